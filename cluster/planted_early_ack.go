//go:build holdfast_bug_early_ack

package cluster

// Planted bug: the leader applies a command to its own state and
// acknowledges it without committing it through Raft.
const (
	plantedStaleRead = false
	plantedEarlyAck  = true
)
