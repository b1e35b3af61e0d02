//go:build holdfast_bug_fence_reset

package fsm

// Planted bug: a restore, or a restart from the state store, resets the
// fencing counter.
const (
	plantedFenceReset        = true
	plantedLocalClock        = false
	plantedSupersededReceipt = false
	plantedSlotOvergrant     = false
	plantedLostCheckpoint    = false
)

func plantedNow() int64 { return 0 }
