//go:build holdfast_bug_stale_read

package service

// PlantedStaleRead is true: planted bug, reads are served by whichever node
// receives them.
const PlantedStaleRead = true
