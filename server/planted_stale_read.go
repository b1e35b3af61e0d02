//go:build holdfast_bug_stale_read

package server

// Planted bug: reads are served by whichever node receives them.
const plantedStaleRead = true
