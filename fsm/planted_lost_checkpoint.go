//go:build holdfast_bug_lost_checkpoint

package fsm

// Planted bug: a checkpoint is stored from an owner token whose slot no longer holds the key (as long as it held it once in this lifecycle).
const (
	plantedFenceReset        = false
	plantedLocalClock        = false
	plantedSupersededReceipt = false
	plantedSlotOvergrant     = false
	plantedLostCheckpoint    = true
)

func plantedNow() int64 { return 0 }
