package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/raftlog"
)

// Errors a proposal or read can end with. ErrNotLeader and ErrNotReady mean
// nothing was written and the request may be retried (on the leader);
// ErrOutcomeUnknown means the command may or may not have been committed.
var (
	ErrNotLeader      = errors.New("this node is not the leader")
	ErrNotReady       = errors.New("the leader has not yet caught up with its term")
	ErrOutcomeUnknown = errors.New("outcome unknown: the command may or may not have been committed")
	ErrNoLeader       = errors.New("no leader is known")
	ErrBusy           = errors.New("the leader's queue of proposals is full; nothing was written")
)

// Propose commits cmd through Raft and returns the state machine's typed
// result once it is applied on this node. Concurrent proposals share a log
// entry (see flush). It waits at most until ctx is done or the configured
// ProposeTimeout, whichever is sooner.
//
// Errors: ErrNotLeader or ErrBusy when nothing was written and the request
// may be retried; a StorageError when the leader could not append the entry
// for want of space, or its log is stalled (nothing was written);
// ErrOutcomeUnknown (wrapping the cause) when leadership was lost, the
// deadline passed, the node shut down or its log stalled after the entry may
// have reached the log.
func (n *Node) Propose(ctx context.Context, cmd fsm.Command) (interface{}, error) {
	p := n.newProposal()
	p.one[0] = cmd
	p.cmds = p.one[:]
	rs, err := n.propose(ctx, p)
	if err != nil {
		return nil, err
	}
	r := rs[0]
	n.recycle(p)
	return r, nil
}

// bookkeeping reports whether cmds hold a command of the cluster's own
// bookkeeping (the node directory, the level, settings, the fence floor):
// the planted early-ack bug acknowledges clients' commands only, so that a
// cluster built with it still forms and becomes ready.
func bookkeeping(cmds []fsm.Command) bool {
	for _, c := range cmds {
		switch c.Type() {
		case fsm.TypeSetNode, fsm.TypeRemoveNode, fsm.TypeSetLevel, fsm.TypeSetSettings, fsm.TypeFenceFloor:
			return true
		}
	}
	return false
}

// ProposeAll is Propose for commands that must be applied together and in
// order, in one log entry: all of them, or (on an error) none that the
// caller learns of. It returns one result per command.
func (n *Node) ProposeAll(ctx context.Context, cmds ...fsm.Command) ([]interface{}, error) {
	p := n.newProposal()
	p.cmds = cmds
	rs, err := n.propose(ctx, p)
	if err != nil {
		return nil, err
	}
	rs = append([]interface{}(nil), rs...)
	n.recycle(p)
	return rs, nil
}

// newProposal takes a proposal from the pool, queued and empty.
func (n *Node) newProposal() *proposal {
	if p, ok := n.proposals.Get().(*proposal); ok {
		p.state.Store(proposalQueued)
		return p
	}
	return &proposal{done: make(chan proposalResult, 1)}
}

// recycle returns a proposal whose result its waiter has received: the
// flusher is done with it.
func (n *Node) recycle(p *proposal) {
	p.cmds, p.one[0], p.oneResp[0] = nil, nil, nil
	n.proposals.Put(p)
}

// propose commits p's commands. The results it returns are valid until p
// is recycled; on an error p must not be recycled.
func (n *Node) propose(ctx context.Context, p *proposal) ([]interface{}, error) {
	cmds := p.cmds
	if n.raft.State() != raft.Leader {
		n.counters.proposal("not_leader")
		return nil, ErrNotLeader
	}
	if skewed, _ := n.clock.verdict(); skewed {
		n.counters.proposal("not_leader")
		return nil, ErrClockSkew
	}
	if err := n.logStall(); err != nil {
		// The entry would wait behind the append that hangs; nothing is
		// written, and another node leads shortly.
		n.counters.proposal("storage")
		return nil, err
	}
	stall := n.storage.stallBegins()
	if err := n.checkLevel(cmds); err != nil {
		n.counters.proposal("not_leader")
		return nil, err
	}
	if plantedEarlyAck && !bookkeeping(cmds) {
		rs := make([]interface{}, len(cmds))
		for i, c := range cmds {
			rs[i] = n.fsm.ApplyCommand(c)
		}
		return rs, nil
	}
	// The propose timeout bounds a caller without an earlier deadline; a
	// timer, not a derived context, which would cost a registration with
	// every cancellable parent. The timer is the proposal's own, reused
	// with it.
	var expired <-chan time.Time
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > n.cfg.ProposeTimeout {
		if p.expired == nil {
			p.expired = time.NewTimer(n.cfg.ProposeTimeout)
		} else {
			p.expired.Reset(n.cfg.ProposeTimeout)
		}
		defer p.expired.Stop()
		expired = p.expired.C
	}
	// The queue has room for several entries' worth of proposals, so the
	// send rarely blocks: try it alone first, which spares the common case
	// the locks of a four-way select.
	select {
	case n.proposeCh <- p:
	default:
		select {
		case n.proposeCh <- p:
		case <-ctx.Done():
			n.counters.proposal("busy")
			return nil, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
		case <-expired:
			n.counters.proposal("busy")
			return nil, fmt.Errorf("%w: %w", ErrBusy, context.DeadlineExceeded)
		case <-n.shutdownCh:
			return nil, fmt.Errorf("%w: %w", ErrNotLeader, errShutdown)
		}
	}
	select {
	case r := <-p.done:
		if r.err != nil {
			return nil, r.err
		}
		n.counters.proposals("applied", len(cmds))
		return r.resps, nil
	case <-ctx.Done():
		return nil, n.giveUp(p, ErrBusy, ctx.Err())
	case <-expired:
		return nil, n.giveUp(p, ErrBusy, context.DeadlineExceeded)
	case <-n.shutdownCh:
		return nil, n.giveUp(p, ErrNotLeader, errShutdown)
	case <-stall:
		// Queued behind the append that hangs, or in it: the caller hears
		// now, not at its deadline, and can go to the next leader.
		fault := n.logStall()
		if fault == nil {
			fault = &StorageError{NodeID: n.cfg.NodeID, Kind: StorageLog, Err: raftlog.ErrStalled}
		}
		return nil, n.giveUp(p, fault, fault)
	}
}

// giveUp withdraws a proposal whose waiter stops waiting. Still queued, it
// will never be proposed and notApplied is returned (counted as a storage
// refusal when it is a StorageError); already taken by a flusher, its
// outcome is unknown.
func (n *Node) giveUp(p *proposal, notApplied, cause error) error {
	if p.state.CompareAndSwap(proposalQueued, proposalWithdrawn) {
		var se *StorageError
		if errors.As(notApplied, &se) {
			n.counters.proposal("storage")
			return fmt.Errorf("%w: withdrawn before it was proposed", notApplied)
		}
		n.counters.proposal("busy")
		return fmt.Errorf("%w: withdrawn before it was proposed: %w", notApplied, cause)
	}
	n.counters.proposal("outcome_unknown")
	return fmt.Errorf("%w: %w", ErrOutcomeUnknown, cause)
}

// proposalError maps a Raft future error to this package's errors, counting it.
func (n *Node) proposalError(err error) error {
	if se := n.appendError(err); se != nil {
		if errors.Is(se, ErrOutcomeUnknown) {
			n.counters.proposal("outcome_unknown")
		} else {
			n.counters.proposal("storage")
		}
		return se
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		// Refused before reaching the log: nothing happened.
		n.counters.proposal("not_leader")
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	case errors.Is(err, raft.ErrEnqueueTimeout):
		n.counters.proposal("busy")
		return fmt.Errorf("%w: %w", ErrBusy, err)
	case errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrRaftShutdown), errors.Is(err, raft.ErrAbortedByRestore):
		n.counters.proposal("outcome_unknown")
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
	n.counters.proposal("outcome_unknown")
	if f := n.WriteFault(); f != nil {
		// The leader's own append failed, not for want of space: it may
		// have written part of the entry.
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, f)
	}
	return fmt.Errorf("%w: unexpected raft error: %w", ErrOutcomeUnknown, err)
}

// await waits for a Raft future, bounded by ctx.
func await(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
