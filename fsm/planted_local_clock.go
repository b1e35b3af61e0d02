//go:build holdfast_bug_local_clock

package fsm

import "time"

// Planted bug: Apply reads the replica's own clock instead of the command's.
const (
	plantedFenceReset        = false
	plantedLocalClock        = true
	plantedSupersededReceipt = false
	plantedSlotOvergrant     = false
	plantedLostCheckpoint    = false
)

func plantedNow() int64 { return time.Now().UnixMilli() }
