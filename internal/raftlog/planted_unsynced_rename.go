//go:build holdfast_bug_unsynced_rename

package raftlog

// Planted bug: a new segment (the spare renamed into place, or a file
// created) is used without syncing the log directory, so a power loss can
// take the segment, and every append acknowledged in it, away.
const (
	plantedUnsyncedRename = true
	plantedAckBeforeSync  = false
)
