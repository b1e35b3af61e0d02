//go:build holdfast_bug_superseded_receipt

package fsm

// Planted bug: a superseded receipt is accepted while the job is claimed.
const (
	plantedFenceReset        = false
	plantedLocalClock        = false
	plantedSupersededReceipt = true
	plantedSlotOvergrant     = false
	plantedLostCheckpoint    = false
)

func plantedNow() int64 { return 0 }
