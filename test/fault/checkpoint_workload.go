//go:build unix

package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// checkpointWorkload drives checkpoints of single-slot keys: a worker
// acquires a key, reads the checkpoint the grant returns, stores one or
// more checkpoints of its own (values unique to the write), and releases,
// walks away, or stalls past its lease and then tries to store another
// (which must be refused). The history is the lease register's, with
// checkpoint operations, so the lease checkers and the lease model (which
// keeps the last checkpoint) judge it.
type checkpointWorkload struct {
	*leaseWorkload
	names []string

	mu   sync.Mutex
	seq  int
	late int
}

func newCheckpointWorkload(r *run) *checkpointWorkload {
	lw := newLeaseWorkload(r, nil)
	lw.workers = r.sc.Nodes + 1
	return &checkpointWorkload{leaseWorkload: lw, names: []string{"c-k0", "c-k1"}}
}

func (w *checkpointWorkload) setup(ctx context.Context) error {
	if err := w.r.awaitActiveLevel(ctx, 2); err != nil {
		return err
	}
	if err := w.leaseWorkload.setup(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range w.names {
		w.keys[k] = true // acquired again at the end
	}
	return nil
}

func (w *checkpointWorkload) start(ctx context.Context, wg *sync.WaitGroup) {
	spawnWorkers(ctx, wg, w.workers, w.worker)
}

// value returns a checkpoint value no other write uses.
func (w *checkpointWorkload) value(proc int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seq++
	return fmt.Sprintf(`{"w":"p%d-%d"}`, proc, w.seq)
}

func (w *checkpointWorkload) worker(ctx context.Context, i int) {
	r := w.r
	rng := r.rng(uint64(5000 + i))
	node := r.targets[i%len(r.targets)]
	proc := r.rec.NewProcess()
	for ctx.Err() == nil {
		key := w.names[rng.IntN(len(w.names))]
		res := w.acquire(proc, node, key, fAcquire, []int64{0, 1, 2, 2}[rng.IntN(4)])
		proc = r.afterAcquire(ctx, rng, proc, res.class, res.ok, res.out.Status == stGranted,
			func() int { return w.hold(ctx, rng, proc, node, key, res) })
	}
}

// hold stores checkpoints under a granted lease and returns the process to
// continue as.
func (w *checkpointWorkload) hold(ctx context.Context, rng *rand.Rand, proc int, node *harness.Node, key string, g leaseCall) int {
	r := w.r
	token, fence := g.token, g.out.Fence
	for j := 1 + rng.IntN(3); j > 0 && ctx.Err() == nil; j-- {
		sleepCtx(ctx, between(rng, 100*time.Millisecond, 500*time.Millisecond))
		if rng.IntN(3) == 0 {
			res := w.ownerOp(proc, node, key, fRenew, token, fence, "")
			switch {
			case res.class == Unknown:
				return r.rec.NewProcess()
			case res.ok && res.out.Status == stLost:
				return proc
			}
		}
		res := w.ownerOp(proc, node, key, fCheckpoint, token, fence, w.value(proc))
		switch {
		case res.class == Unknown:
			return r.rec.NewProcess()
		case res.ok && res.out.Status == stLost:
			return proc
		}
	}
	var res leaseCall
	switch c := rng.IntN(10); {
	case c < 5 || ctx.Err() != nil:
		res = w.ownerOp(proc, node, key, fRelease, token, fence, "")
		if res.class == Definite && res.ok && res.out.Status == stReleased && rng.IntN(3) == 0 {
			// A released owner tries to store progress: refused.
			w.countLate()
			res = w.ownerOp(proc, node, key, fCheckpoint, token, fence, w.value(proc))
		}
	case c < 7:
		// Walk away: the next holder gets the last checkpoint.
		return proc
	default:
		// Stall past the lease, then store progress as if still holding
		// it: the service must refuse it, and no later grant may see it.
		if !sleepCtx(ctx, leaseTTL+between(rng, 600*time.Millisecond, 1200*time.Millisecond)) {
			return proc
		}
		w.countLate()
		res = w.ownerOp(proc, node, key, fCheckpoint, token, fence, w.value(proc))
		if res.class != Unknown && rng.IntN(2) == 0 {
			res = w.ownerOp(proc, node, key, fRelease, token, fence, "")
		}
	}
	if res.class == Unknown {
		return r.rec.NewProcess()
	}
	return proc
}

func (w *checkpointWorkload) countLate() {
	w.mu.Lock()
	w.late++
	w.mu.Unlock()
}

func (w *checkpointWorkload) check(res *Result) {
	w.leaseWorkload.check(res)
	w.mu.Lock()
	late := w.late
	w.mu.Unlock()
	res.Details = append(res.Details, fmt.Sprintf("checkpoint workload: %d checkpoints tried after the lease ended or was released", late))
	if late == 0 {
		w.r.problem("the checkpoint workload made no late checkpoint: it did not exercise the refusal")
	}
}
