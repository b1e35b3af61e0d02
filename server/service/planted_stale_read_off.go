//go:build !holdfast_bug_stale_read

package service

// PlantedStaleRead is true only in the build that plants the stale-read bug
// for the fault suite: reads are then served by whichever node receives
// them (the HTTP layer routes them so, and the service reads locally).
const PlantedStaleRead = false
