package cluster

import (
	"sync"

	"github.com/holdfast/holdfast/fsm"
)

// counters accumulate what the node did, for the metrics endpoint.
type counters struct {
	mu       sync.Mutex
	proposed map[string]uint64
	sweeps   uint64
	swept    fsm.SweepResult // sums of the per-sweep counts
}

func (c *counters) proposal(outcome string) { c.proposals(outcome, 1) }

// proposals counts n proposals with one outcome.
func (c *counters) proposals(outcome string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proposed == nil {
		c.proposed = make(map[string]uint64)
	}
	c.proposed[outcome] += uint64(n)
}

func (c *counters) sweep(r *fsm.SweepResult) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweeps++
	c.swept.LeasesRemoved += r.LeasesRemoved
	c.swept.QueuesRemoved += r.QueuesRemoved
	c.swept.ClaimsReturned += r.ClaimsReturned
	c.swept.JobsFailed += r.JobsFailed
	c.swept.ClientsPruned += r.ClientsPruned
}

// Counters is a copy of the node's cumulative counters.
type Counters struct {
	// Proposals counts proposals by outcome: applied, not_leader, busy, storage, outcome_unknown.
	Proposals map[string]uint64
	// Sweeps is the number of sweep entries this node committed as leader.
	Sweeps uint64
	// Swept sums what those sweeps expired.
	Swept fsm.SweepResult
}

// Counters returns the node's cumulative counters.
func (n *Node) Counters() Counters {
	n.counters.mu.Lock()
	defer n.counters.mu.Unlock()
	out := Counters{Proposals: make(map[string]uint64, len(n.counters.proposed)), Sweeps: n.counters.sweeps, Swept: n.counters.swept}
	for k, v := range n.counters.proposed {
		out.Proposals[k] = v
	}
	return out
}
