package raftlog

import "time"

// plantedSyncLag is how long after an append returned the planted bug
// holdfast_bug_ack_before_sync syncs it: long enough that each power cut
// of the fault suite takes back several acknowledged appends, so the bug
// is caught in every run (with one second, a run's cuts lost one to three
// acknowledged jobs, and one run in eight lost none).
const plantedSyncLag = 5 * time.Second

// syncLater is an append's fdatasync under the planted bug
// holdfast_bug_ack_before_sync: it runs plantedSyncLag after the append
// returned, its error unseen. Every normal build syncs before it returns.
func syncLater(f segFile) {
	time.AfterFunc(plantedSyncLag, func() { _ = f.Datasync() })
}
