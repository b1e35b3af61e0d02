package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
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
// missing state. Damaged snapshots newer than it are moved under
// damaged-snapshots/, bytes intact, so Raft cannot pick them later; when
// the log does not continue from any usable snapshot, nothing is moved
// and the node refuses to start.
func (n *Node) checkSnapshots(snaps raft.SnapshotStore, logs raft.LogStore) error {
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
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("read the log's first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("read the log's last index: %w", err)
	}
	covered := last == 0 && (found || len(metas) == 0) || last > 0 && first <= from+1
	if len(damaged) == 0 && covered {
		return nil
	}
	dir := filepath.Join(n.cfg.DataDir, "snapshots")
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
		if err := n.setAsideSnapshot(dir, id); err != nil {
			return err
		}
		n.log.Warn("a damaged snapshot was set aside; the node starts from an older snapshot and its log", "snapshot", id, "problem", damaged[i],
			"kept_in", filepath.Join(n.cfg.DataDir, damagedSnapshotsDir, id), "starts_from", start, "log", holds)
	}
	return nil
}

// verifySnapshot reads a snapshot through the store (which checks its CRC)
// and checks the state machine's format and checksum.
func verifySnapshot(snaps raft.SnapshotStore, id string) error {
	_, rc, err := snaps.Open(id)
	if err != nil {
		return err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if _, err := fsm.InspectSnapshot(b); err != nil {
		return err
	}
	return nil
}

// setAsideSnapshot moves snapshot id out of the snapshot store's directory.
func (n *Node) setAsideSnapshot(dir, id string) error {
	aside := filepath.Join(n.cfg.DataDir, damagedSnapshotsDir)
	if err := os.MkdirAll(aside, 0o700); err != nil {
		return fmt.Errorf("keep damaged snapshot %s: %w", id, err)
	}
	if err := os.Rename(filepath.Join(dir, id), filepath.Join(aside, id)); err != nil {
		return fmt.Errorf("keep damaged snapshot %s: %w", id, err)
	}
	return nil
}
