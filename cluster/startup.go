package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/atomicfile"
)

// ErrCorruptSnapshot is wrapped by the start-up error of a node whose
// snapshots are damaged in a way its log cannot make up for.
var ErrCorruptSnapshot = errors.New("corrupt snapshot")

// damagedSnapshotsDir is where damaged snapshots are kept, out of the
// snapshot store's sight, when the node starts from an older one.
const damagedSnapshotsDir = "damaged-snapshots"

// removeUnfinishedSnapshots removes the snapshot store's temporary
// directories (*.tmp): a snapshot written when the node stopped, or one that
// failed, which was never finished, so nothing was ever read from it.
func (n *Node) removeUnfinishedSnapshots() error {
	dir := filepath.Join(n.cfg.DataDir, StorageSnapshots)
	names, err := unfinishedSnapshots(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("remove an unfinished snapshot: %w", err)
		}
		n.log.Info("removed an unfinished snapshot", "dir", filepath.Join(dir, name))
	}
	return nil
}

// checkSnapshots finds the snapshot Raft will start from (the newest whose
// meta reads, whose CRC and the state machine's own checksum verify) and
// makes sure the log continues from it, so the node never starts with
// missing state. Damaged snapshots newer than it, and snapshot directories
// Raft's store passes over because their meta cannot be read (one a power
// loss left empty or half there), are moved under damaged-snapshots/,
// bytes intact, so Raft cannot pick them later; when the log does not
// continue from any usable snapshot, nothing is moved and the node refuses
// to start, naming them.
func (n *Node) checkSnapshots(snaps raft.SnapshotStore, logs raft.LogStore) error {
	dir := filepath.Join(n.cfg.DataDir, StorageSnapshots)
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	var (
		damaged []string // "id: what failed", newest first
		ids     []string
		from    uint64 // the index of the snapshot Raft will restore; 0 for none
		found   bool
	)
	for _, m := range metas {
		if err := verifySnapshot(snaps, m.ID); err != nil {
			damaged = append(damaged, fmt.Sprintf("%s: %v", m.ID, err))
			ids = append(ids, m.ID)
			continue
		}
		from, found = m.Index, true
		break
	}
	unlisted, problems, err := unreadableSnapshots(dir, snaps, metas)
	if err != nil {
		return err
	}
	ids, damaged = append(ids, unlisted...), append(damaged, problems...)
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("read the log's first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("read the log's last index: %w", err)
	}
	none := len(metas) == 0 && len(unlisted) == 0 // no snapshot was ever finished here
	covered := last == 0 && (found || none) || last > 0 && first <= from+1
	if len(damaged) == 0 && covered {
		return nil
	}
	start := "no snapshot"
	if found {
		start = fmt.Sprintf("the snapshot at index %d", from)
	}
	holds := "the log is empty"
	if last > 0 {
		holds = fmt.Sprintf("the log holds entries %d-%d", first, last)
	}
	if !covered {
		why := "damaged snapshots: none"
		if len(damaged) > 0 {
			why = "damaged snapshots in " + dir + ": " + strings.Join(damaged, "; ")
		}
		return fmt.Errorf("%w: this node would start from %s, but %s, so the entries between are missing (%s); the files are left as they are",
			ErrCorruptSnapshot, start, holds, why)
	}
	for i, id := range ids {
		if err := setAsideSnapshot(n.cfg.DataDir, id); err != nil {
			return err
		}
		n.log.Warn("a damaged snapshot was set aside; the node starts from an older snapshot and its log", "snapshot", id, "problem", damaged[i],
			"kept_in", filepath.Join(n.cfg.DataDir, damagedSnapshotsDir, id), "starts_from", start, "log", holds)
	}
	return nil
}

// verifySnapshot reads a snapshot through the store (which checks its CRC)
// and checks the state machine's format and checksum, or an archive's
// (a store's files received from the leader) framing and checksums; one
// kept as a checkpoint is checked as openChecked says, without reading
// its state.
func verifySnapshot(snaps raft.SnapshotStore, id string) error {
	rc, err := openState(snaps, id)
	if err != nil || rc == nil {
		return err
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	if head, _ := br.Peek(len(archiveMagic)); isArchive(head) {
		_, err := readArchive(br, "")
		return err
	}
	_, err = fsm.InspectSnapshotReader(br)
	return err
}

// unreadableSnapshots returns the snapshot directories in dir that the
// store does not list and cannot open, each with what failed: the store
// passes over a directory whose meta.json it cannot read (one a power loss
// left empty, say) without a word, and would keep it for good. A readable
// one it does not list (past the number it keeps) is not among them.
func unreadableSnapshots(dir string, snaps raft.SnapshotStore, listed []*raft.SnapshotMeta) (ids, problems []string, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list snapshots: %w", err)
	}
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || strings.HasSuffix(id, ".tmp") || slices.ContainsFunc(listed, func(m *raft.SnapshotMeta) bool { return m.ID == id }) {
			continue
		}
		err := openable(snaps, id)
		if err == nil {
			continue
		}
		ids = append(ids, id)
		problems = append(problems, fmt.Sprintf("%s: unreadable: %v", id, err))
	}
	return ids, problems, nil
}

// openable reports whether snapshot id opens: its meta and checksum, and
// for one kept as a checkpoint, the checkpoint's own.
func openable(snaps raft.SnapshotStore, id string) error {
	rc, err := openState(snaps, id)
	if rc != nil {
		_ = rc.Close()
	}
	return err
}

// setAsideSnapshot moves snapshot id out of the snapshot store's directory
// into dataDir's damaged-snapshots/, durably. The directory it goes to is
// synced before the one it leaves: a power loss in between leaves it
// under one name or both (and it is set aside again), never under neither.
func setAsideSnapshot(dataDir, id string) error {
	dir, aside := filepath.Join(dataDir, StorageSnapshots), filepath.Join(dataDir, damagedSnapshotsDir)
	if err := atomicfile.MkdirAll(aside, 0o700); err != nil {
		return fmt.Errorf("keep damaged snapshot %s: %w", id, err)
	}
	if err := os.Rename(filepath.Join(dir, id), filepath.Join(aside, id)); err != nil {
		return fmt.Errorf("keep damaged snapshot %s: %w", id, err)
	}
	for _, d := range []string{aside, dir} {
		if err := atomicfile.SyncDir(d); err != nil {
			return fmt.Errorf("keep damaged snapshot %s: %w", id, err)
		}
	}
	return nil
}
