//go:build !holdfast_bug_stale_read

package server

// plantedStaleRead is true only in the build that plants the stale-read bug
// for the fault suite: reads are then served by whichever node receives them.
const plantedStaleRead = false
