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
// every node, and a lone write is proposed at once. One entry in flight
// makes the batches as large as the load allows; several flushers would
// split the same writes into more, smaller entries, each with its own disk
// writes and fsyncs on every node.
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
// longest waiter). Proposals are reused (proposalPool) once their waiter has
// received the result; one whose waiter gave up is left to the collector,
// since the flusher may still send it a result.
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

// flush runs the flusher until shutdown.
func (n *Node) flush() {
	batch := make([]*proposal, 0, maxBatch)
	cmds := make([]fsm.Command, 0, maxBatch)
	for {
		clear(batch) // what was proposed is not kept alive here
		clear(cmds)
		batch, cmds = batch[:0], cmds[:0]
		select {
		case <-n.shutdownCh:
			return
		case p := <-n.proposeCh:
			if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
				batch = append(batch, p)
				cmds = append(cmds, p.cmds...)
			}
		}
	drain:
		for len(cmds) < maxBatch {
			select {
			case p := <-n.proposeCh:
				if p.state.CompareAndSwap(proposalQueued, proposalTaken) {
					batch = append(batch, p)
					cmds = append(cmds, p.cmds...)
				}
			default:
				break drain
			}
		}
		if len(batch) == 0 {
			continue
		}
		n.commit(batch, len(cmds), fsm.Entry(cmds))
	}
}

// commit applies one entry of parts commands and hands each proposal its
// results.
func (n *Node) commit(batch []*proposal, parts int, data []byte) {
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
		p.done <- proposalResult{resps: br.Results[at : at+len(p.cmds)]}
		at += len(p.cmds)
	}
}
