//go:build holdfast_bug_early_ack

package cluster

// Planted bug: the leader applies a client's command to its own state and
// acknowledges it without committing it through Raft (the cluster's own
// bookkeeping still goes through Raft, so the cluster forms and is ready).
const (
	plantedStaleRead = false
	plantedEarlyAck  = true
)
