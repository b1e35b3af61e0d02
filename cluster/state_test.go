package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast/holdfast/fsm"
)

// grantKeys acquires keys first..last-1 on a single-node leader.
func grantKeys(t *testing.T, n *Node, first, last int) {
	t.Helper()
	for i := first; i < last; i++ {
		r, err := acquire(context.Background(), n, fmt.Sprint("k", i), "A")
		if err != nil || r.Outcome != fsm.LeaseGranted {
			t.Fatalf("acquire k%d: %+v, %v", i, r, err)
		}
	}
}

// stateAfterSnapshot runs a single node that grants ten leases, five of
// them after a snapshot, and stops it; it returns its config and the
// index its state store held at the end.
func stateAfterSnapshot(t *testing.T) (Config, uint64) {
	t.Helper()
	cfg := testConfig(t, "solo", t.TempDir(), true)
	n := open(t, cfg)
	waitReadyLeader(t, n)
	grantKeys(t, n, 0, 5)
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	grantKeys(t, n, 5, 10)
	applied := n.state.Applied()
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	return cfg, applied
}

// TestRestartResumesFromTheStateStore: a node restarted after a clean stop
// opens its state store where it stopped, restores no snapshot (the store
// is ahead of it) and applies the rest of its log on top.
func TestRestartResumesFromTheStateStore(t *testing.T) {
	cfg, applied := stateAfterSnapshot(t)
	n := open(t, cfg)
	if got := n.state.Applied(); got < applied {
		t.Fatalf("the reopened state store is at index %d, the node stopped at %d", got, applied)
	}
	waitReadyLeader(t, n)
	if got := filepath.Base(n.state.Dir()); got != "store-000001" {
		t.Fatalf("the state store was replaced (now %s): the snapshot was restored although the store was ahead of it", got)
	}
	r, err := acquire(context.Background(), n, "k10", "A")
	if err != nil || r.FencingToken != 11 {
		t.Fatalf("acquire after the restart: %+v, %v; want fencing token 11", r, err)
	}
}

// TestStateStoreBehindTheSnapshotIsRestored: a node whose state store is
// missing (a data directory of a build before the store) restores its
// newest snapshot (a checkpoint of the store it lost, read in the state
// machine's format) into a new store and replays the log after it.
func TestStateStoreBehindTheSnapshotIsRestored(t *testing.T) {
	cfg, _ := stateAfterSnapshot(t)
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, StateDir)); err != nil {
		t.Fatal(err)
	}
	n := open(t, cfg)
	waitReadyLeader(t, n)
	if got := n.fsm.Stats().Leases; got != 10 {
		t.Fatalf("%d lease records after the restore, want the 10 granted", got)
	}
	r, err := acquire(context.Background(), n, "k10", "A")
	if err != nil || r.FencingToken != 11 {
		t.Fatalf("acquire after the restore: %+v, %v; want fencing token 11", r, err)
	}
}

// TestRestartAfterABarrierRestoresNothing: a snapshot taken right after a
// barrier (an entry Raft never hands the state machine) has an index past
// the store's, yet the store holds its state: the node restarts from the
// store without restoring the snapshot, and with every write.
func TestRestartAfterABarrierRestoresNothing(t *testing.T) {
	cfg := testConfig(t, "solo", t.TempDir(), true)
	n := open(t, cfg)
	waitReadyLeader(t, n)
	grantKeys(t, n, 0, 5)
	if err := n.raft.Barrier(0).Error(); err != nil {
		t.Fatalf("barrier: %v", err)
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("list snapshots: %v %v", metas, err)
	}
	if applied := n.state.Applied(); metas[0].Index <= applied {
		t.Fatalf("the snapshot's index %d is not past the store's %d: the barrier did not make the case", metas[0].Index, applied)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	n = open(t, cfg)
	waitReadyLeader(t, n)
	if got := filepath.Base(n.state.Dir()); got != "store-000001" {
		t.Fatalf("the state store was replaced (now %s): the snapshot was restored although the store held its state", got)
	}
	r, err := acquire(context.Background(), n, "k5", "A")
	if err != nil || r.FencingToken != 6 {
		t.Fatalf("acquire after the restart: %+v, %v; want fencing token 6", r, err)
	}
}
