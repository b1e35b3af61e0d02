package cluster

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/statestore"
)

// newestSnapshot returns the newest snapshot's meta, with its size, and
// its state in the state machine's format, as the node's snapshot store
// reads it for a follower below ArchiveLevel.
func newestSnapshot(t *testing.T, n *Node) (*raft.SnapshotMeta, []byte) {
	t.Helper()
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("list snapshots: %v %v", metas, err)
	}
	meta, rc, err := n.snaps.(*watchedSnapshots).openEncoded(metas[0].ID, true)
	if err != nil {
		t.Fatalf("open snapshot %s: %v", metas[0].ID, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read snapshot %s: %v", metas[0].ID, err)
	}
	return meta, b
}

// TestSnapshotsAreCheckpointsFromTheirLevel: from CheckpointLevel on, a
// node keeps a snapshot as a checkpoint of its state store (a marker in
// state.bin and the store's files beside it) and reads it back for a
// backup, with its size, as exactly the state machine's own snapshot of
// that state, and for Raft (at this build's level) as an archive of the
// checkpoint's files; below that level it keeps the state machine's
// snapshot, which a build of the level before reads, and Raft reads that.
func TestSnapshotsAreCheckpointsFromTheirLevel(t *testing.T) {
	for _, c := range []struct {
		name       string
		speaks     *uint32
		checkpoint bool
	}{
		{"this build", nil, true},
		{"a build of the level before", olderBuild(CheckpointLevel - 1), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, "solo", t.TempDir(), true)
			cfg.LevelSettle, cfg.testLevel = time.Hour, c.speaks
			n := open(t, cfg)
			waitReadyLeader(t, n)
			grantKeys(t, n, 0, 20)
			if err := n.raft.Snapshot().Error(); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			meta, got := newestSnapshot(t, n)
			if want := n.fsm.SnapshotBytes(); !bytes.Equal(got, want) || meta.Size != int64(len(want)) {
				t.Fatalf("the snapshot reads as %d bytes (meta size %d), the state machine's is %d bytes; equal: %v",
					len(got), meta.Size, len(want), bytes.Equal(got, want))
			}
			dir := filepath.Join(cfg.DataDir, StorageSnapshots, meta.ID)
			state, err := os.ReadFile(filepath.Join(dir, "state.bin"))
			if err != nil {
				t.Fatal(err)
			}
			applied, marked := parseCheckpointMarker(state)
			_, statErr := os.Stat(filepath.Join(dir, checkpointDir))
			if marked != c.checkpoint || (statErr == nil) != c.checkpoint {
				t.Fatalf("state.bin is a checkpoint's marker: %v, a checkpoint directory: %v; want %v", marked, statErr == nil, c.checkpoint)
			}
			if marked && applied != n.state.Applied() {
				t.Fatalf("the marker says index %d, the store is at %d", applied, n.state.Applied())
			}
			if err := verifySnapshot(n.snaps, meta.ID); err != nil {
				t.Fatalf("verify the snapshot: %v", err)
			}
			brc, err := openForBackup(n.snaps, meta.ID)
			if err != nil {
				t.Fatal(err)
			}
			backup, err := io.ReadAll(brc)
			_ = brc.Close()
			if err != nil || !bytes.Equal(backup, got) {
				t.Fatalf("a backup reads the snapshot as %d bytes (%v), not as the state machine's %d", len(backup), err, len(got))
			}
			rmeta, rc, err := n.snaps.Open(meta.ID)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(rc)
			_ = rc.Close()
			if err != nil || rmeta.Size != int64(len(raw)) || isArchive(raw) != c.checkpoint {
				t.Fatalf("raft reads the snapshot as %d bytes (meta size %d, %v), an archive: %v; want %v", len(raw), rmeta.Size, err, isArchive(raw), c.checkpoint)
			}
			if c.checkpoint {
				if got, err := readArchive(bytes.NewReader(raw), ""); err != nil || got != applied {
					t.Fatalf("the archive holds index %d (%v), the marker says %d", got, err, applied)
				}
			} else if !bytes.Equal(raw, got) {
				t.Fatal("raft reads a snapshot in the state machine's format otherwise than a backup does")
			}
		})
	}
}

// TestACheckpointWithoutItsManifestFailsItsCheck: a node's start checks a
// checkpoint snapshot by opening it (TestStateStoreBehindTheSnapshotIsRestored
// restores one): one that lost its manifest fails the check, and so is
// set aside as damaged.
func TestACheckpointWithoutItsManifestFailsItsCheck(t *testing.T) {
	cfg, _ := stateAfterSnapshot(t)
	s, err := openSnapshots(cfg.DataDir, cfg.Logger, &storageHealth{})
	if err != nil {
		t.Fatal(err)
	}
	metas, err := s.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("list snapshots: %v %v", metas, err)
	}
	if err := verifySnapshot(s, metas[0].ID); err != nil {
		t.Fatalf("verify the checkpoint snapshot: %v", err)
	}
	ckpt := filepath.Join(cfg.DataDir, StorageSnapshots, metas[0].ID, checkpointDir)
	manifests, err := filepath.Glob(filepath.Join(ckpt, "MANIFEST-*"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("the checkpoint's manifest: %v %v", manifests, err)
	}
	for _, m := range manifests {
		if err := os.Remove(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := verifySnapshot(s, metas[0].ID); err == nil {
		t.Fatal("a checkpoint without its manifest verified")
	}
}

// memCheckpointSink is a checkpoint sink over a directory of its own.
type memCheckpointSink struct {
	bytes.Buffer
	dir string
}

func (s *memCheckpointSink) ID() string                    { return "test" }
func (s *memCheckpointSink) Cancel() error                 { return nil }
func (s *memCheckpointSink) Close() error                  { return nil }
func (s *memCheckpointSink) checkpointDir() (string, bool) { return s.dir, true }

// TestACheckpointPastItsIndexIsNotKept: a checkpoint holds what the store
// had flushed when it was taken; when that includes batches after the
// snapshot's index, it is removed and the snapshot is written in the
// state machine's format instead, since a follower installing it would
// apply those entries twice.
func TestACheckpointPastItsIndexIsNotKept(t *testing.T) {
	st, err := statestore.Open(t.TempDir(), statestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f, err := fsm.Open(StateStore(st))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(index uint64) {
		f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: fsm.Encode(&fsm.LeaseAcquire{Now: int64(index), Lease: secret.Hash{byte(index)}, Owner: secret.Hash{1}, TTLSeconds: 60})}})
	}
	for _, c := range []struct {
		name  string
		later bool // another batch is committed and flushed before the checkpoint
		kept  bool
	}{
		{"nothing flushed after the index", false, true},
		{"a later batch flushed", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			apply(st.Applied() + 1)
			applied := st.Applied()
			flushed, err := st.StartFlush()
			if err != nil {
				t.Fatal(err)
			}
			if c.later {
				apply(applied + 1)
				if err := st.Flush(); err != nil {
					t.Fatal(err)
				}
			}
			sink := &memCheckpointSink{dir: filepath.Join(t.TempDir(), checkpointDir)}
			dir, ok := checkpointDirOf(sink)
			if !ok {
				t.Fatal("the sink holds no checkpoint")
			}
			kept, err := persistCheckpoint(st, flushed, applied, dir, sink)
			if err != nil || kept != c.kept {
				t.Fatalf("persistCheckpoint: kept %v, %v; want kept %v", kept, err, c.kept)
			}
			_, statErr := os.Stat(sink.dir)
			if got, ok := parseCheckpointMarker(sink.Bytes()); ok != c.kept || (statErr == nil) != c.kept || ok && got != applied {
				t.Fatalf("marker %q (index %d), checkpoint directory there: %v; want one at index %d: %v", sink.Bytes(), got, statErr == nil, applied, c.kept)
			}
		})
	}
}

// TestACheckpointSizeIsKeptForTheNewest: the size of a checkpoint
// snapshot in the state machine's format is measured once and kept for
// the last one measured only (and those being read), not for every
// snapshot a node ever sent.
func TestACheckpointSizeIsKeptForTheNewest(t *testing.T) {
	cfg := testConfig(t, "solo", t.TempDir(), true)
	n := open(t, cfg)
	waitReadyLeader(t, n)
	w, ok := n.snaps.(*watchedSnapshots)
	if !ok {
		t.Fatalf("the node's snapshot store is a %T", n.snaps)
	}
	var ids []string
	for round := range 3 {
		grantKeys(t, n, 10*round, 10*round+10)
		if err := n.raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		meta, b := newestSnapshot(t, n)
		ids = append(ids, meta.ID)
		w.frozen.mu.Lock()
		size, kept, open := w.frozen.sizes[meta.ID], len(w.frozen.sizes), len(w.frozen.open)
		w.frozen.mu.Unlock()
		if size != int64(len(b)) || kept != 1 || open != 0 {
			t.Fatalf("after reading %s (%d bytes): its kept size %d, %d sizes kept, %d checkpoints open; want its size alone, none open (snapshots %v)",
				meta.ID, len(b), size, kept, open, ids)
		}
	}
}
