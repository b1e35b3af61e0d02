package cluster

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/holdfast/holdfast/fsm"
)

// leadership tracks this node's current term as leader. A term becomes
// ready once a barrier committed in it has been applied, so the state
// reflects every entry committed before; only then are reads served and the
// sweeper run. Each gain of leadership gets a new generation, so work left
// over from an earlier term can never mark a later one ready.
type leadership struct {
	mu     sync.Mutex
	gen    uint64
	ctx    context.Context // the current term's; nil when not leading
	cancel context.CancelFunc
	ready  bool
}

// gain starts a new generation and returns its context.
func (l *leadership) gain() (context.Context, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.gen++
	l.ctx, l.cancel = ctx, cancel
	l.ready = false
	return ctx, l.gen
}

// lose ends the current generation.
func (l *leadership) lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		l.cancel()
		l.ctx, l.cancel = nil, nil
	}
	l.gen++
	l.ready = false
}

// done returns a channel closed when the current term as leader ends,
// already closed when there is none.
func (l *leadership) done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return l.ctx.Done()
}

// markReady marks generation gen ready if it is still current.
func (l *leadership) markReady(gen uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if gen != l.gen || l.cancel == nil {
		return false
	}
	l.ready = true
	return true
}

func (l *leadership) isReady() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ready
}

// watchLeadership drains Raft's leadership notifications (an undrained
// channel would block Raft) and starts or stops the leader's duties.
func (n *Node) watchLeadership() {
	for {
		select {
		case <-n.shutdownCh:
			return
		case isLeader := <-n.notifyCh:
			if !isLeader {
				n.lead.lose()
				n.log.Info("lost leadership")
				continue
			}
			ctx, gen := n.lead.gain()
			n.log.Info("gained leadership", "term", n.raft.CurrentTerm())
			n.goLoop(func() { n.establish(ctx, gen) })
		}
	}
}

// establish commits a barrier in the new term, raises a new cluster's level,
// marks the term ready, records this node in the directory and runs the
// sweeper until the term ends.
func (n *Node) establish(ctx context.Context, gen uint64) {
	for {
		err := await(ctx, n.raft.Barrier(5*time.Second))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("barrier after gaining leadership failed; retrying", "error", err)
		if !n.sleepCtx(ctx, 200*time.Millisecond) {
			return
		}
	}
	if !n.awaitClockVerdict(ctx, 5*time.Second) {
		if ctx.Err() != nil {
			return
		}
		n.log.Warn("leading without a fresh clock comparison: no peer's clock could be sampled")
	}
	if skewed, _ := n.clock.verdict(); skewed {
		n.log.Warn("not serving as leader: this node's clock is skewed; handing leadership over")
		n.TransferLeadership(ctx)
		return
	}
	// A cluster this node has just formed starts at its members' level
	// before anything reports it ready; one that starts from a backup
	// does once the backup is installed (restore), since installing it
	// replaces the state, its level with it.
	if n.cfg.Restore == nil {
		n.startAtBootLevel(ctx)
	}
	if !n.lead.markReady(gen) {
		return
	}
	n.log.Info("leader ready", "term", n.raft.CurrentTerm(), "applied_index", n.raft.AppliedIndex())
	n.ensureSelfInDirectory(ctx)
	n.sweep(ctx)
}

// ensureSelfInDirectory records the leader's own addresses if they are
// missing or changed.
func (n *Node) ensureSelfInDirectory(ctx context.Context) {
	me := n.self()
	if cur, ok := n.fsm.Node(me.ID); ok && cur == me {
		return
	}
	if _, err := n.Propose(ctx, &fsm.SetNode{Now: n.Now(), Node: me}); err != nil {
		n.log.Warn("recording this node in the directory failed", "error", err)
	}
}

func (n *Node) self() fsm.NodeInfo {
	return fsm.NodeInfo{ID: n.cfg.NodeID, HTTPAddr: n.cfg.HTTPAdvertise, RaftAddr: n.RaftAddr()}
}

// sweep commits a sweep entry whenever the state's earliest deadline has
// passed by the leader's clock; an idle cluster adds nothing to the log.
func (n *Node) sweep(ctx context.Context) {
	t := time.NewTicker(n.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n.logStall() != nil {
			// Its proposals are refused until the stalled write returns,
			// which ends this term if another node leads by then.
			continue
		}
		// A sweep that reports more due work is followed at once by another,
		// up to a bound per tick so one tick cannot monopolise the log.
		for i := 0; i < 16; i++ {
			at, ok := n.fsm.NextDeadline()
			now := n.Now()
			if !ok || at > now {
				break
			}
			res, err := n.Propose(ctx, &fsm.Sweep{Now: now, Limit: n.cfg.SweepLimit})
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					n.log.Warn("sweep proposal failed", "error", err)
				}
				break
			}
			r, _ := res.(*fsm.SweepResult)
			if r == nil {
				break
			}
			n.counters.sweep(r)
			if r.LeasesRemoved+r.QueuesRemoved+r.ClaimsReturned+r.JobsFailed > 0 {
				n.log.Debug("swept", "leases_removed", r.LeasesRemoved, "queues_removed", r.QueuesRemoved,
					"claims_returned", r.ClaimsReturned, "jobs_failed", r.JobsFailed, "more", r.More)
			}
			if !r.More {
				break
			}
		}
	}
}

func (n *Node) sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-n.shutdownCh:
		return false
	}
}
