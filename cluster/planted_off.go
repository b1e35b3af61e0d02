//go:build !holdfast_bug_stale_read && !holdfast_bug_early_ack

package cluster

// Planted bugs are compiled in only with their build tag, for the fault
// suite to prove it detects them; in every normal build these are false.
const (
	plantedStaleRead = false
	plantedEarlyAck  = false
)
