package cluster

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/fsm"
)

// Group commit: proposals go through a channel to one flusher, which takes
// every proposal waiting (up to maxBatch), proposes them as one Raft entry
// and waits for it to apply. While that entry commits, the next proposals
// gather, so concurrent writes share an entry, a disk write and an fsync on
// every node, and a lone write is proposed at once (see holdTarget for when
// the next entry waits for more). One entry in flight makes the batches as
// large as the load allows; several flushers would split the same writes
// into more, smaller entries, each with its own disk writes and fsyncs on
// every node.
const maxBatch = 128

// Proposal states: a waiter that gives up can withdraw its proposal only
// while it is still queued, so nothing it was told "not applied" is applied.
const (
	proposalQueued int32 = iota
	proposalTaken
	proposalWithdrawn
)

// proposal is one or more commands that must be applied together, in
// order, in one entry (a hand-over: a release and the acquire of the key's
// longest waiter). Proposals are reused (Node.proposals) once their waiter
// has received the result; one whose waiter gave up is left to the
// collector, since the flusher may still send it a result.
type proposal struct {
	cmds  []fsm.Command
	state atomic.Int32
	done  chan proposalResult
	// expired bounds the wait of a caller without an earlier deadline.
	expired *time.Timer
	// one holds the command of a single-command proposal, and oneResp its
	// result, so that neither needs a slice of its own.
	one     [1]fsm.Command
	oneResp [1]interface{}
}

// proposalResult holds one result per command, or the error of them all.
type proposalResult struct {
	resps []interface{}
	err   error
}

// Holding an entry back: the callers of the entry just committed get their
// answers as it applies, and under load most of them send their next write
// at once. Proposed at once, the next entry would carry only the writes
// that gathered while the last one committed, about half of the callers;
// so while fewer than holdTarget proposals (callers) are waiting, the
// flusher waits for more, at most as long as the last entry took to commit
// (so a write waits at most one commit more) and never more than maxHold.
// Fewer, larger entries cost every node fewer disk writes, fsyncs and
// replication messages per write. One or two callers are never held.
const maxHold = 4 * time.Millisecond

// holdTarget is how many proposals the flusher waits for: seven eighths of
// those of the entry just committed (their callers are expected back) and
// of those already waiting, rounded down, so one or two callers are never
// held. Proposals, not commands, are counted: a hand-over is one caller's
// two commands.
func holdTarget(answered, waiting int) int {
	return min(7*(answered+waiting)/8, maxBatch)
}

// flush runs the flusher until shutdown.
func (n *Node) flush() {
	batch := make([]*proposal, 0, maxBatch)
	cmds := make([]fsm.Command, 0, maxBatch)
	take := func(p *proposal) {
		if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
			batch = append(batch, p)
			cmds = append(cmds, p.cmds...)
		}
	}
	held := time.NewTimer(time.Hour)
	held.Stop()
	answered, lastCommit := 0, time.Duration(0)
	for {
		clear(batch) // what was proposed is not kept alive here
		clear(cmds)
		batch, cmds = batch[:0], cmds[:0]
		select {
		case <-n.shutdownCh:
			return
		case p := <-n.proposeCh:
			take(p)
		}
	drain:
		for len(cmds) < maxBatch {
			select {
			case p := <-n.proposeCh:
				take(p)
			default:
				break drain
			}
		}
		if want := holdTarget(answered, len(batch)); len(batch) < want && lastCommit > 0 {
			held.Reset(min(lastCommit, maxHold))
		hold:
			for len(batch) < want && len(cmds) < maxBatch {
				select {
				case p := <-n.proposeCh:
					take(p)
				case <-held.C:
					break hold
				case <-n.shutdownCh:
					break hold
				}
			}
			held.Stop()
		}
		if len(batch) == 0 {
			continue
		}
		start := time.Now()
		n.commit(batch, len(cmds), fsm.Entry(cmds))
		answered, lastCommit = len(batch), time.Since(start)
	}
}

// commit applies one entry of parts commands and hands each proposal its
// results.
func (n *Node) commit(batch []*proposal, parts int, data []byte) {
	// Results are built for this term's entries from here on (see
	// fsm.FSM.ResultsFrom); the flusher proposes one entry at a time, so no
	// entry of an earlier term it proposed still waits for a result.
	n.fsm.ResultsFrom(n.raft.CurrentTerm())
	f := n.raft.Apply(data, n.cfg.ProposeTimeout)
	if err := f.Error(); err != nil {
		mapped := n.proposalError(err)
		for _, p := range batch {
			p.done <- proposalResult{err: mapped}
		}
		return
	}
	resp := f.Response()
	if parts == 1 {
		p := batch[0]
		p.oneResp[0] = resp
		p.done <- proposalResult{resps: p.oneResp[:]}
		return
	}
	br, ok := resp.(*fsm.BatchResult)
	if !ok || len(br.Results) != parts {
		err := fmt.Errorf("%w: batch applied with an unexpected result %T", ErrOutcomeUnknown, resp)
		for _, p := range batch {
			p.done <- proposalResult{err: err}
		}
		return
	}
	at := 0
	for _, p := range batch {
		// Nothing of p may be read after the send: its waiter reuses it.
		n := len(p.cmds)
		p.done <- proposalResult{resps: br.Results[at : at+n]}
		at += n
	}
}
