//go:build holdfast_bug_slot_overgrant

package fsm

// Planted bug: an acquire of a multi-slot key is granted one slot more than the key has.
const (
	plantedFenceReset        = false
	plantedLocalClock        = false
	plantedSupersededReceipt = false
	plantedSlotOvergrant     = true
	plantedLostCheckpoint    = false
)

func plantedNow() int64 { return 0 }
