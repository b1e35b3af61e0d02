//go:build unix

package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// slotKey is a multi-slot key of the slots workload.
type slotKey struct {
	name  string
	slots int64
}

// slotKeys are the slots workload's keys with their slot counts: fewer
// slots than clients, so acquires contend.
func slotKeys() []slotKey { return []slotKey{{"s-two", 2}, {"s-three", 3}} }

// slotsWorkload drives multi-slot keys: workers acquire a slot (some
// blocking), hold it briefly, maybe renew, then release it, walk away from
// it, or stall past its lease and then renew or release it late.
type slotsWorkload struct {
	r       *run
	ns      string
	workers int
	keys    []slotKey
}

func newSlotsWorkload(r *run) *slotsWorkload {
	return &slotsWorkload{r: r, workers: 2 * r.sc.Nodes, keys: slotKeys()}
}

// awaitActiveLevel waits (bounded) until every target reports the cluster level
// at least level: slots and checkpoints are refused below level 2, which
// the cluster reaches some seconds after it forms.
func (r *run) awaitActiveLevel(ctx context.Context, level uint32) error {
	return poll(ctx, 60*time.Second, 250*time.Millisecond, func() error {
		for _, n := range r.targets {
			s, err := r.status(n, false)
			if err != nil {
				return err
			}
			if s.ActiveLevel < level {
				return fmt.Errorf("%s reports active level %d, want %d", n.ID, s.ActiveLevel, level)
			}
		}
		return nil
	})
}

// mintNamespace asks the service for a new lease namespace.
func (r *run) mintNamespace(ctx context.Context) (string, error) {
	var ns string
	err := poll(ctx, 30*time.Second, 200*time.Millisecond, func() error {
		a := r.ops.Do(ctx, r.targets[0].HTTPAddr, http.MethodPost, apiPrefix+"/lease/namespace", map[string]any{}, "")
		if a.Status != http.StatusOK || a.Body.Namespace == "" {
			return fmt.Errorf("mint a namespace: HTTP %d %.200s %v", a.Status, a.Raw, a.Err)
		}
		ns = a.Body.Namespace
		return nil
	})
	return ns, err
}

func (w *slotsWorkload) setup(ctx context.Context) error {
	if err := w.r.awaitActiveLevel(ctx, 2); err != nil {
		return err
	}
	ns, err := w.r.mintNamespace(ctx)
	w.ns = ns
	return err
}

func (w *slotsWorkload) start(ctx context.Context, wg *sync.WaitGroup) {
	spawnWorkers(ctx, wg, w.workers, w.worker)
}

// slotCall is the classified result of one slot operation.
type slotCall = opCall[SlotOutput]

// slotOutcome maps an answer to a slot operation's output.
func slotOutcome(f string, a Answer) (SlotOutput, bool) {
	b := a.Body
	out := SlotOutput{Fence: b.FencingToken, ExpTs: b.LeaseExpiresAtTimestamp, Slots: b.Slots, Held: b.Held}
	switch {
	case f == fSlotAcquire && a.Status == http.StatusCreated && b.Status == "held" && b.OwnerToken != "":
		out.Status, out.Owner = stGranted, shortToken(b.OwnerToken)
	case f == fSlotAcquire && a.Status == http.StatusConflict && b.Status == "held":
		out.Status = stHeld
	case f != fSlotAcquire && a.Status == http.StatusConflict && b.Status == "lost":
		out = SlotOutput{Status: stLost}
	case f == fSlotRenew && a.Status == http.StatusOK && b.Status == "held":
		out.Status = stRenewed
	case f == fSlotRelease && a.Status == http.StatusOK && b.Status == "released":
		out = SlotOutput{Status: stReleased, Fence: b.FencingToken}
	default:
		return SlotOutput{}, false
	}
	return out, true
}

// call performs one slot operation and records it.
func (w *slotsWorkload) call(proc int, node *harness.Node, key string, in SlotInput, body map[string]any, path string) slotCall {
	return recordOp(w.r, proc, node, in.Kind, key, in, in.Wait, body, path, slotOutcome)
}

func (w *slotsWorkload) acquire(proc int, node *harness.Node, k int, wait int64) slotCall {
	key, slots := w.keys[k].name, w.keys[k].slots
	in := SlotInput{Kind: fSlotAcquire, Slots: slots, TTL: int64(leaseTTL), Wait: wait}
	body := map[string]any{"namespace": w.ns, "key": key, "slots": slots, "ttl_seconds": int(leaseTTL / time.Second)}
	if wait > 0 {
		body["wait_seconds"] = wait
	}
	return w.call(proc, node, key, in, body, "/lease")
}

func (w *slotsWorkload) ownerOp(proc int, node *harness.Node, k int, f, token string, fence int64, late bool) slotCall {
	key := w.keys[k].name
	in := SlotInput{Kind: f, Owner: shortToken(token), OwnerFence: fence, Late: late}
	body := map[string]any{"namespace": w.ns, "key": key, "owner_token": token}
	path := "/lease/release"
	if f == fSlotRenew {
		in.TTL = int64(leaseTTL)
		body["ttl_seconds"] = int(leaseTTL / time.Second)
		path = "/lease/renew"
	}
	return w.call(proc, node, key, in, body, path)
}

func (w *slotsWorkload) worker(ctx context.Context, i int) {
	r := w.r
	rng := r.rng(uint64(3000 + i))
	node := r.targets[i%len(r.targets)]
	proc := r.rec.NewProcess()
	for ctx.Err() == nil {
		k := rng.IntN(len(w.keys))
		res := w.acquire(proc, node, k, []int64{0, 1, 2, 2}[rng.IntN(4)])
		proc = r.afterAcquire(ctx, rng, proc, res.class, res.ok, res.out.Status == stGranted,
			func() int { return w.hold(ctx, rng, proc, node, k, res) })
	}
}

// hold uses a granted slot and returns the process to continue as.
func (w *slotsWorkload) hold(ctx context.Context, rng *rand.Rand, proc int, node *harness.Node, k int, g slotCall) int {
	r := w.r
	token, fence := g.token, g.out.Fence
	sleepCtx(ctx, between(rng, 200*time.Millisecond, 900*time.Millisecond))
	for j := rng.IntN(3); j > 0 && ctx.Err() == nil; j-- {
		res := w.ownerOp(proc, node, k, fSlotRenew, token, fence, false)
		switch {
		case res.class == Unknown:
			return r.rec.NewProcess()
		case res.ok && res.out.Status == stLost:
			return proc
		}
		sleepCtx(ctx, between(rng, 200*time.Millisecond, 700*time.Millisecond))
	}
	var res slotCall
	switch c := rng.IntN(10); {
	case c < 6 || ctx.Err() != nil:
		res = w.ownerOp(proc, node, k, fSlotRelease, token, fence, false)
	case c < 8:
		// Walk away: the slot frees itself when its lease ends.
		return proc
	default:
		// Stall past the lease, then act as if the slot were still held:
		// the service must answer lost.
		if !sleepCtx(ctx, leaseTTL+between(rng, 600*time.Millisecond, 1200*time.Millisecond)) {
			return proc
		}
		res = w.ownerOp(proc, node, k, []string{fSlotRenew, fSlotRelease}[rng.IntN(2)], token, fence, true)
	}
	if res.class == Unknown {
		return r.rec.NewProcess()
	}
	return proc
}

// final has nothing to read: the slot checks need no final state.
func (w *slotsWorkload) final(context.Context) error { return nil }

func (w *slotsWorkload) check(res *Result) {
	rep := CheckSlots(w.r.rec.Ops(), Tolerance)
	res.Fencing += rep.Fencing()
	res.Unexpected += rep.HeldAbove
	res.Violations += rep.Violations()
	late := 0
	for _, o := range w.r.rec.Ops() {
		if in, ok := o.Input.(SlotInput); ok && in.Late {
			late++
		}
	}
	res.Details = append(res.Details, fmt.Sprintf("slots: %d grants, at most %d certainly valid at once on a key; overgrants %d, counts above the slots %d, fence order %d, duplicate fence %d, late owner accepted %d (%d late operations)",
		rep.Grants, rep.Peak, rep.Overgrant, rep.HeldAbove, rep.FenceOrder, rep.DuplicateFence, rep.LateOwnerAccepted, late))
	res.Details = append(res.Details, rep.Examples...)
	if rep.Grants == 0 {
		w.r.problem("the slots workload got no grant")
	}
}
