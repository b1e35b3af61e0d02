//go:build holdfast_bug_stale_read

package cluster

// Planted bug: any node answers "linearizable" reads from its local state.
const (
	plantedStaleRead = true
	plantedEarlyAck  = false
)
