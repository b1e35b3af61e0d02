package raftlog

import "time"

// plantedSyncLag is how long after an append returned the planted bug
// holdfast_bug_ack_before_sync syncs it.
const plantedSyncLag = time.Second

// syncLater is an append's fdatasync under the planted bug
// holdfast_bug_ack_before_sync: it runs plantedSyncLag after the append
// returned, its error unseen. Every normal build syncs before it returns.
func syncLater(f segFile) {
	time.AfterFunc(plantedSyncLag, func() { _ = f.Datasync() })
}
