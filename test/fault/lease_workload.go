//go:build unix

package fault

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// fWrite is a write to the fenced store (not a service call).
const fWrite = "write"

// storeInput and storeOutput are the history values of a store write.
type storeInput struct {
	Value string `json:"value"`
	Fence int64  `json:"fence"`
	Owner string `json:"owner"`
	Stale bool   `json:"stale,omitempty"`
}

type storeOutput struct {
	Accepted bool `json:"accepted"`
}

// leaseWorkload drives the lease register, and with a store the fenced
// resource: workers acquire a few keys of one namespace (keys rotate every
// epoch so completed keys do not stay blocked for the 24-hour lifecycle),
// renew, then release, complete with a result, or abandon the lease and,
// after it has certainly expired, try to use it again — a paused worker
// waking up.
type leaseWorkload struct {
	r            *run
	ns           string
	store        *FencedStore
	workers      int
	keysPerEpoch int
	epoch        time.Duration

	mu    sync.Mutex
	keys  map[string]bool
	stale map[string]bool
	// done holds keys seen completed: workers mostly leave them alone (a
	// completed key answers the same until its lifecycle ends).
	done map[string]bool
	seq  int
}

func newLeaseWorkload(r *run, store *FencedStore) *leaseWorkload {
	keys := r.sc.Keys
	if keys == 0 {
		keys = r.sc.Nodes + 2
	}
	return &leaseWorkload{r: r, store: store, workers: 2 * r.sc.Nodes, keysPerEpoch: keys, epoch: 10 * time.Second,
		keys: map[string]bool{}, stale: map[string]bool{}, done: map[string]bool{}}
}

func shortToken(tok string) string {
	if len(tok) > 16 {
		return tok[:16]
	}
	return tok
}

func (w *leaseWorkload) setup(ctx context.Context) error {
	ns, err := w.r.mintNamespace(ctx)
	w.ns = ns
	return err
}

// afterAcquire is a worker's step after an acquire and returns the process
// to continue as: a grant is held (hold returns the process then), anything
// else pauses the worker, and an unknown outcome (which may hold the lease
// for an owner the worker cannot name) continues as a new process.
func (r *run) afterAcquire(ctx context.Context, rng *rand.Rand, proc int, class Class, ok, granted bool, hold func() int) int {
	switch {
	case class == Unknown:
		proc = r.rec.NewProcess()
		sleepCtx(ctx, between(rng, 100*time.Millisecond, 300*time.Millisecond))
	case !ok:
		sleepCtx(ctx, between(rng, 100*time.Millisecond, 300*time.Millisecond))
	case granted:
		if p := hold(); p != proc {
			proc = p
			sleepCtx(ctx, between(rng, 100*time.Millisecond, 300*time.Millisecond))
		}
	default:
		sleepCtx(ctx, between(rng, 50*time.Millisecond, 250*time.Millisecond))
	}
	return proc
}

// spawnWorkers starts n workers, worker(ctx, i) for i in [0, n), counted
// in wg.
func spawnWorkers(ctx context.Context, wg *sync.WaitGroup, n int, worker func(context.Context, int)) {
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker(ctx, i)
		}()
	}
}

func (w *leaseWorkload) start(ctx context.Context, wg *sync.WaitGroup) {
	spawnWorkers(ctx, wg, w.workers, w.worker)
}

func (w *leaseWorkload) pickKey(rng *rand.Rand) string {
	epoch := int(time.Since(w.r.start) / w.epoch)
	w.mu.Lock()
	defer w.mu.Unlock()
	var key string
	for try := 0; try < 4; try++ {
		key = fmt.Sprintf("e%d-k%d", epoch, rng.IntN(w.keysPerEpoch))
		if !w.done[key] || rng.IntN(10) == 0 {
			break
		}
	}
	w.keys[key] = true
	return key
}

// opCall is the classified result of one recorded operation.
type opCall[T any] struct {
	class Class
	ok    bool // recorded as ok (a definite, understood answer)
	out   T
	token string // raw owner token of a grant
}

// leaseCall is the classified result of one lease operation.
type leaseCall = opCall[LeaseOutput]

// recordOp performs one POST through node and records it in the history:
// not applied as a failure, unknown as info, and an answer outcome
// understands as ok with its output (any other answer is unexpected).
func recordOp[T any](r *run, proc int, node *harness.Node, kind, key string, in any, wait int64, body map[string]any, path string, outcome func(string, Answer) (T, bool)) opCall[T] {
	p := r.rec.Invoke(proc, node.ID, kind, key, in)
	a := r.client.DoWaiting(context.Background(), time.Duration(wait)*time.Second, node.HTTPAddr, http.MethodPost, apiPrefix+path, body, "")
	res := opCall[T]{class: a.Classify()}
	switch res.class {
	case NotApplied:
		r.rec.Complete(p, Fail, nil, a.Status, a.ErrText())
	case Unknown:
		r.rec.Complete(p, Info, nil, a.Status, a.ErrText())
	default:
		out, ok := outcome(kind, a)
		if !ok {
			r.unexpectedAnswer(kind, a)
			r.rec.Complete(p, Fail, nil, a.Status, "unexpected answer: "+a.ErrText())
			return res
		}
		res.ok, res.out, res.token = true, out, a.Body.OwnerToken
		r.rec.Complete(p, OK, out, a.Status, "")
	}
	return res
}

// leaseOutcome maps an answer to the model's output.
func leaseOutcome(f string, a Answer) (LeaseOutput, bool) {
	b := a.Body
	acquire := f == fAcquire || f == fFinalAcquire
	switch {
	case acquire && a.Status == http.StatusCreated && b.Status == "held" && b.OwnerToken != "":
		return LeaseOutput{Status: stGranted, Owner: shortToken(b.OwnerToken), Fence: b.FencingToken, ExpTs: b.LeaseExpiresAtTimestamp,
			Checkpoint: canonicalJSON(b.Checkpoint), CheckpointFence: b.CheckpointFencingToken}, true
	case (acquire || f == fComplete) && a.Status == http.StatusOK && b.Status == "completed":
		return LeaseOutput{Status: stCompleted, Fence: b.FencingToken, Result: canonicalJSON(b.Result)}, true
	case acquire && a.Status == http.StatusConflict && b.Status == "held":
		return LeaseOutput{Status: stHeld, Fence: b.FencingToken, ExpTs: b.LeaseExpiresAtTimestamp}, true
	case acquire && a.Status == http.StatusConflict && b.Status == "conflict":
		return LeaseOutput{Status: stConflict}, true
	case !acquire && a.Status == http.StatusConflict && b.Status == "lost":
		return LeaseOutput{Status: stLost}, true
	case f == fRenew && a.Status == http.StatusOK && b.Status == "held":
		return LeaseOutput{Status: stRenewed, Fence: b.FencingToken, ExpTs: b.LeaseExpiresAtTimestamp}, true
	case f == fRelease && a.Status == http.StatusOK && b.Status == "released":
		return LeaseOutput{Status: stReleased, Fence: b.FencingToken}, true
	case f == fCheckpoint && a.Status == http.StatusOK && b.Status == "checkpointed":
		return LeaseOutput{Status: stCheckpointed, Fence: b.FencingToken}, true
	}
	return LeaseOutput{}, false
}

// call performs one lease operation and records it.
func (w *leaseWorkload) call(proc int, node *harness.Node, key string, in LeaseInput, body map[string]any, path string) leaseCall {
	return recordOp(w.r, proc, node, in.Kind, key, in, in.Wait, body, path, leaseOutcome)
}

// acquire asks for the lease; with wait > 0 (seconds) it is a blocking
// acquire: the service holds it while the lease is held.
func (w *leaseWorkload) acquire(proc int, node *harness.Node, key, f string, wait int64) leaseCall {
	in := LeaseInput{Kind: f, TTL: int64(leaseTTL), Wait: wait}
	body := map[string]any{"namespace": w.ns, "key": key, "fingerprint": "fp-" + key, "ttl_seconds": int(leaseTTL / time.Second)}
	if wait > 0 {
		body["wait_seconds"] = wait
	}
	return w.call(proc, node, key, in, body, "/lease")
}

// ownerOp is a renew, release, complete (with result) or checkpoint (with
// result as the checkpoint) by the owner of token.
func (w *leaseWorkload) ownerOp(proc int, node *harness.Node, key, f, token string, fence int64, result string) leaseCall {
	in := LeaseInput{Kind: f, Owner: shortToken(token), OwnerFence: fence}
	body := map[string]any{"namespace": w.ns, "key": key, "owner_token": token}
	path := "/lease/" + f
	switch f {
	case fRenew:
		in.TTL = int64(leaseTTL)
		body["ttl_seconds"] = int(leaseTTL / time.Second)
	case fComplete:
		in.Result = result
		body["result"] = json.RawMessage(result)
	case fCheckpoint:
		in.Checkpoint = canonicalJSON([]byte(result))
		body["checkpoint"] = json.RawMessage(result)
	}
	return w.call(proc, node, key, in, body, path)
}

// write writes to the fenced store, if the workload has one.
func (w *leaseWorkload) write(proc int, key, token string, fence int64, stale bool) {
	if w.store == nil {
		return
	}
	w.mu.Lock()
	w.seq++
	val := fmt.Sprintf("v%d-p%d", w.seq, proc)
	if stale {
		w.stale[val] = true
	}
	w.mu.Unlock()
	p := w.r.rec.Invoke(proc, "store", fWrite, key, storeInput{Value: val, Fence: fence, Owner: shortToken(token), Stale: stale})
	ok := w.store.Write(key, val, fence, shortToken(token), proc)
	typ := OK
	if !ok {
		typ = Fail
	}
	w.r.rec.Complete(p, typ, storeOutput{Accepted: ok}, 0, "")
}

func (w *leaseWorkload) worker(ctx context.Context, i int) {
	r := w.r
	rng := r.rng(uint64(1000 + i))
	node := r.targets[i%len(r.targets)]
	proc := r.rec.NewProcess()
	for ctx.Err() == nil {
		key := w.pickKey(rng)
		// Most acquires wait while the lease is held (blocking acquires,
		// served in arrival order); some answer at once.
		res := w.acquire(proc, node, key, fAcquire, []int64{0, 1, 2, 2}[rng.IntN(4)])
		if res.ok && res.out.Status == stCompleted {
			w.mu.Lock()
			w.done[key] = true
			w.mu.Unlock()
		}
		proc = r.afterAcquire(ctx, rng, proc, res.class, res.ok, res.out.Status == stGranted,
			func() int { return w.hold(ctx, rng, proc, node, key, res) })
	}
}

// hold uses a granted lease and returns the process to continue as (a new
// one if an operation's outcome was unknown).
func (w *leaseWorkload) hold(ctx context.Context, rng *rand.Rand, proc int, node *harness.Node, key string, g leaseCall) int {
	r := w.r
	token, fence := g.token, g.out.Fence
	w.write(proc, key, token, fence, false)
	for j := rng.IntN(3); j > 0 && ctx.Err() == nil; j-- {
		sleepCtx(ctx, between(rng, 200*time.Millisecond, 700*time.Millisecond))
		res := w.ownerOp(proc, node, key, fRenew, token, fence, "")
		switch {
		case res.class == Unknown:
			return r.rec.NewProcess()
		case res.ok && res.out.Status == stLost:
			return proc
		case res.ok:
			w.write(proc, key, token, fence, false)
		}
	}
	var res leaseCall
	switch c := rng.IntN(20); {
	case c < 10 || ctx.Err() != nil:
		res = w.ownerOp(proc, node, key, fRelease, token, fence, "")
	case c < 13:
		w.mu.Lock()
		w.seq++
		result := fmt.Sprintf(`{"by":%d,"fence":%d,"seq":%d}`, proc, fence, w.seq)
		w.mu.Unlock()
		res = w.ownerOp(proc, node, key, fComplete, token, fence, result)
	default:
		// A worker that stalls past its lease and then acts as if it
		// still held it: the fence must stop its write and the service
		// must refuse its renew, release or complete.
		if !sleepCtx(ctx, leaseTTL+between(rng, 600*time.Millisecond, 1200*time.Millisecond)) {
			return proc
		}
		w.write(proc, key, token, fence, true)
		f := []string{fRenew, fRelease, fComplete}[rng.IntN(3)]
		res = w.ownerOp(proc, node, key, f, token, fence, fmt.Sprintf(`{"late":%d}`, proc))
	}
	if res.class == Unknown {
		return r.rec.NewProcess()
	}
	return proc
}

// final acquires every key once more through the leader, after healing:
// a completed key must still return its result.
func (w *leaseWorkload) final(ctx context.Context) error {
	r := w.r
	w.mu.Lock()
	keys := make([]string, 0, len(w.keys))
	for k := range w.keys {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	sort.Strings(keys)
	proc := r.rec.NewProcess()
	for _, k := range keys {
		err := poll(ctx, 30*time.Second, 300*time.Millisecond, func() error {
			node := r.leader()
			if node == nil {
				return fmt.Errorf("no leader")
			}
			res := w.acquire(proc, node, k, fFinalAcquire, 0)
			if res.class == Unknown {
				proc = r.rec.NewProcess()
			}
			if !res.ok {
				return fmt.Errorf("final acquire of %s: no definite answer", k)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *leaseWorkload) check(res *Result) {
	r := w.r
	ops := r.rec.Ops()
	rep := CheckLeases(ops, Tolerance, checkTimeout)
	res.Lin = rep.Verdict
	res.Fencing = rep.FencingViolations()
	res.Lost = rep.Lost()
	res.Details = append(res.Details, fmt.Sprintf("lease: %d grants; fence order %d, duplicate fence %d, stale owner accepted %d, overlapping grants %d; lost completions %d, renewals %d, releases %d",
		rep.Grants, rep.FenceOrder, rep.DuplicateFence, rep.StaleOwnerAccepted, rep.OverlappingGrant, rep.LostCompletion, rep.LostRenewal, rep.LostRelease))
	if rep.Checkpoints+rep.CheckpointsSeen > 0 {
		res.Details = append(res.Details, fmt.Sprintf("checkpoints: %d acknowledged, %d grants returned one; lost %d, refused or unwritten seen %d, wrong fence %d",
			rep.Checkpoints, rep.CheckpointsSeen, rep.LostCheckpoint, rep.RefusedCheckpointSeen, rep.CheckpointFence))
	}
	res.Details = append(res.Details, rep.Examples...)
	if rep.Verdict == VerdictInvalid {
		res.Violations++
	}
	res.Violations += res.Fencing + res.Lost
	if rep.Verdict == VerdictInvalid || r.t.Failed() || (res.Violations > 0 && !r.sc.ExpectViolation) {
		if path, err := r.writeVisualization(rep); err != nil {
			res.Details = append(res.Details, err.Error())
		} else {
			res.Details = append(res.Details, "porcupine visualization: "+path)
		}
	}
	if w.store == nil {
		return
	}
	w.mu.Lock()
	stale := make(map[string]bool, len(w.stale))
	for k := range w.stale {
		stale[k] = true
	}
	w.mu.Unlock()
	srep := CheckStore(w.store.Log(), ops, stale, Tolerance)
	res.Lost += srep.LostUpdates
	res.Fencing += srep.SharedToken + srep.ValidHolderRejected
	res.Violations += srep.LostUpdates + srep.SharedToken + srep.ValidHolderRejected
	res.Details = append(res.Details, fmt.Sprintf("store (fence check %v): %d writes, %d accepted, %d rejected, %d stale attempts; lost updates %d, shared tokens %d, valid holder rejected %d",
		w.store.check, srep.Writes, srep.Accepted, srep.Rejected, srep.StaleAttempts, srep.LostUpdates, srep.SharedToken, srep.ValidHolderRejected))
	res.Details = append(res.Details, srep.Examples...)
	if srep.StaleAttempts == 0 {
		r.problem("the fenced workload made no stale write: it did not exercise the fence")
	}
}
