//go:build !holdfast_bug_unsynced_rename && !holdfast_bug_ack_before_sync

package raftlog

// Planted bugs are compiled in only with their build tag, for the tests to
// prove they detect them; in every normal build these are false and the
// branches they guard disappear.
const (
	plantedUnsyncedRename = false
	plantedAckBeforeSync  = false
)
