package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/atomicfile"
	"github.com/holdfast/holdfast/test/faultfs"
)

// snapshotted runs a single node that, once it has taken the snapshot of
// its cluster's level, takes a snapshot after each of three rounds of five
// acquires, then a fourth round, and stops it. It returns the config and
// the snapshot directories, newest first. A small segment size lets
// compaction remove whole segment files.
func snapshotted(t *testing.T, trailing uint64, segment int64) (Config, []string) {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(t, "solo", dir, true)
	cfg.TrailingLogs, cfg.LogSegmentSize = trailing, segment
	n := open(t, cfg)
	waitReadyLeader(t, n)
	waitLevelSnapshot(t, n)
	for i := range 4 {
		for k := range 5 {
			key := fmt.Sprintf("k%d-%d", i, k)
			if _, err := acquire(context.Background(), n, key, "owner-"+key); err != nil {
				t.Fatalf("acquire %s: %v", key, err)
			}
		}
		if i < 3 {
			if err := n.raft.Snapshot().Error(); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
		}
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	store, err := raft.NewFileSnapshotStore(dir, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	metas, err := store.List()
	if err != nil || len(metas) < 2 {
		t.Fatalf("snapshots: %v %v", metas, err)
	}
	var snaps []string
	for _, m := range metas {
		snaps = append(snaps, filepath.Join(dir, "snapshots", m.ID))
	}
	cfg.Logger = testConfig(t, "solo", dir, true).Logger
	return cfg, snaps
}

func flipByte(t *testing.T, path string, at func(size int) int) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at(len(b))] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDamagedNewestSnapshotFallsBack: a damaged newest snapshot (its state
// or its meta) is passed over, kept aside with its bytes, and the node
// starts from the older snapshot and its log with every write it had.
func TestDamagedNewestSnapshotFallsBack(t *testing.T) {
	for name, file := range map[string]string{"state": "state.bin", "meta": "meta.json"} {
		t.Run(name, func(t *testing.T) {
			cfg, snaps := snapshotted(t, 10240, 0)
			damaged := flipByte(t, filepath.Join(snaps[0], file), func(size int) int { return size / 2 })
			n := open(t, cfg)
			waitReadyLeader(t, n)
			if name == "state" {
				kept, err := os.ReadFile(filepath.Join(cfg.DataDir, damagedSnapshotsDir, filepath.Base(snaps[0]), file))
				if err != nil || !bytes.Equal(kept, damaged) {
					t.Fatalf("the damaged snapshot was not kept as it was: %v", err)
				}
			}
			r, err := acquire(context.Background(), n, "e", "owner-e")
			if err != nil || r.Outcome != fsm.LeaseGranted || r.FencingToken != 21 {
				// Fence 21: the entries after the older snapshot were replayed.
				t.Fatalf("acquire after the fallback: %+v %v, want fence 21", r, err)
			}
		})
	}
}

// TestDamagedSnapshotWithoutLogRefuses: when the log was compacted past the
// older snapshots, a damaged newest snapshot leaves entries nobody on this
// node holds: the node refuses to start, names the snapshot and the log's
// range, and moves nothing.
func TestDamagedSnapshotWithoutLogRefuses(t *testing.T) {
	cfg, snaps := snapshotted(t, 1, 256)
	flipByte(t, filepath.Join(snaps[0], "state.bin"), func(size int) int { return max(size-40, size/2) })
	n, err := Open(cfg)
	if err == nil {
		_ = n.Kill()
		t.Fatal("the node started with missing state")
	}
	msg := err.Error()
	if !errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(msg, filepath.Base(snaps[0])) || !strings.Contains(msg, "log holds entries") ||
		!strings.Contains(msg, "--join") {
		t.Fatalf("start: %v", err)
	}
	if _, err := os.Stat(snaps[0]); err != nil {
		t.Fatalf("the damaged snapshot was moved: %v", err)
	}
}

// TestUnfinishedSnapshotsAreRemovedAtStart: a snapshot directory left
// unfinished (*.tmp, by a failed write or a stop in the middle) is removed
// when the node starts; finished snapshots stay.
func TestUnfinishedSnapshotsAreRemovedAtStart(t *testing.T) {
	dir := t.TempDir()
	n := open(t, testConfig(t, "solo", dir, true))
	waitReadyLeader(t, n)
	waitLevelSnapshot(t, n)
	if _, err := acquire(context.Background(), n, "k", "A"); err != nil {
		t.Fatal(err)
	}
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "snapshots", "2-405-1796000000000.tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "state.bin"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	n = open(t, testConfig(t, "solo", dir, true))
	waitReadyLeader(t, n)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unfinished snapshot is still there: %v", err)
	}
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 {
		t.Errorf("finished snapshots after the start: %v, %v", metas, err)
	}
}

// halfSnapshots are the shapes a snapshot directory can have after a
// power loss took part of it (a store that never synced the directory):
// nothing in it (first), or one of its two files missing or empty.
var halfSnapshots = []struct {
	name string
	cut  func(t *testing.T, snap string)
}{
	{"empty directory", func(t *testing.T, snap string) {
		removeFile(t, filepath.Join(snap, "meta.json"))
		removeFile(t, filepath.Join(snap, "state.bin"))
	}},
	{"meta only", func(t *testing.T, snap string) { removeFile(t, filepath.Join(snap, "state.bin")) }},
	{"state only", func(t *testing.T, snap string) { removeFile(t, filepath.Join(snap, "meta.json")) }},
	{"empty meta", func(t *testing.T, snap string) { emptyFile(t, filepath.Join(snap, "meta.json")) }},
	{"empty state", func(t *testing.T, snap string) { emptyFile(t, filepath.Join(snap, "state.bin")) }},
}

func removeFile(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func emptyFile(t *testing.T, path string) {
	t.Helper()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
}

// TestHalfSnapshotFallsBack: a newest snapshot that is partly there, even
// one Raft's store does not list (no readable meta.json), is set aside,
// and the node starts from the older snapshot and its log with every write
// it had, never from the half one.
func TestHalfSnapshotFallsBack(t *testing.T) {
	for _, tc := range halfSnapshots {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, snaps := snapshotted(t, 10240, 0)
			tc.cut(t, snaps[0])
			n := open(t, cfg)
			waitReadyLeader(t, n)
			if _, err := os.Stat(filepath.Join(cfg.DataDir, damagedSnapshotsDir, filepath.Base(snaps[0]))); err != nil {
				t.Errorf("the half snapshot was not set aside: %v", err)
			}
			if _, err := os.Stat(snaps[0]); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the half snapshot is still among the snapshots: %v", err)
			}
			r, err := acquire(context.Background(), n, "e", "owner-e")
			if err != nil || r.Outcome != fsm.LeaseGranted || r.FencingToken != 21 {
				// Fence 21: the entries after the older snapshot were replayed.
				t.Fatalf("acquire after the fallback: %+v %v, want fence 21", r, err)
			}
		})
	}
}

// TestHalfSnapshotWithoutLogRefuses: when the log was compacted past the
// older snapshots, a newest snapshot directory left empty (which Raft's
// store does not even list) leaves entries nobody on this node holds: the
// node refuses to start, naming it, and moves nothing.
func TestHalfSnapshotWithoutLogRefuses(t *testing.T) {
	cfg, snaps := snapshotted(t, 1, 256)
	halfSnapshots[0].cut(t, snaps[0])
	n, err := Open(cfg)
	if err == nil {
		_ = n.Kill()
		t.Fatal("the node started with missing state")
	}
	if !errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(err.Error(), filepath.Base(snaps[0])) {
		t.Fatalf("start: %v; want a refusal naming %s", err, filepath.Base(snaps[0]))
	}
	if _, err := os.Stat(snaps[0]); err != nil {
		t.Fatalf("the empty snapshot directory was moved: %v", err)
	}
}

// TestSetAsideSurvivesAPowerLoss: a snapshot set aside is, after a power
// loss (test/faultfs keeps only what was synced), under damaged-snapshots/
// with its bytes, and no longer among the snapshots.
func TestSetAsideSurvivesAPowerLoss(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	const id = "2-40-1796000000000"
	snap := filepath.Join(mnt, StorageSnapshots, id)
	if err := atomicfile.MkdirAll(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(filepath.Join(snap, "state.bin"), []byte("damaged")); err != nil {
		t.Fatal(err)
	}
	if err := setAsideSnapshot(mnt, id); err != nil {
		t.Fatal(err)
	}
	if err := f.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, damagedSnapshotsDir, id, "state.bin")); err != nil || string(b) != "damaged" {
		t.Errorf("the snapshot set aside, after a power loss: %q, %v", b, err)
	}
	if _, err := os.Stat(snap); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the snapshot set aside is among the snapshots again after a power loss: %v", err)
	}
}
