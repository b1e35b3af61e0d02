//go:build holdfast_bug_ack_before_sync

package raftlog

// Planted bug: an append returns once it is written, and its fdatasync
// runs later (see syncLater), so Raft acknowledges entries that a power
// loss takes back; a kill alone loses nothing, the page cache keeps them.
const (
	plantedUnsyncedRename = false
	plantedAckBeforeSync  = true
)
