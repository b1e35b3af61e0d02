//go:build !holdfast_bug_fence_reset && !holdfast_bug_local_clock && !holdfast_bug_superseded_receipt && !holdfast_bug_slot_overgrant && !holdfast_bug_lost_checkpoint

package fsm

// Planted bugs are compiled in only with their build tag, for the fault
// suite to prove it detects them; in every normal build these are false and
// the branches they guard disappear.
const (
	plantedFenceReset        = false
	plantedLocalClock        = false
	plantedSupersededReceipt = false
	plantedSlotOvergrant     = false
	plantedLostCheckpoint    = false
)

// plantedNow is the local clock a planted bug would use; unused here.
func plantedNow() int64 { return 0 }
