package cluster

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
)

// BackupFormat names the layout of a backup file: one JSON header line,
// then the state machine's snapshot bytes exactly as a data directory holds
// them (hashes of secrets, never raw ones).
const BackupFormat = "holdfast-backup/1"

// maxBackupHeader bounds a backup file's header line.
const maxBackupHeader = 4096

// BackupHeader is a backup's first line.
type BackupHeader struct {
	Format string `json:"format"`
	// Index and Term are the Raft position the snapshot was taken at.
	Index uint64 `json:"index"`
	Term  uint64 `json:"term"`
	// Size and SHA256 are those of the snapshot bytes after the header.
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// NodeID is the leader that took it; CreatedAt its clock then (RFC 3339).
	NodeID    string `json:"node_id"`
	CreatedAt string `json:"created_at"`
	// FencingCounter is the last fencing token the snapshot's state had
	// issued (absent from backups made before it was recorded).
	FencingCounter uint64 `json:"fencing_counter,omitempty"`
}

// RestoreGap is how far above a backup's fencing counter a restore starts
// its tokens at least: room for the tokens the backed-up cluster can have
// issued after the backup was taken.
const RestoreGap = 1_000_000_000

// RestoreFloor is the fencing counter a restore at now starts from: above
// the backup's counter by RestoreGap, and above now in milliseconds times
// 1000, so that a later restore of the same backup starts higher still
// (as long as fewer than 1000 tokens a millisecond were issued in between).
func RestoreFloor(counter uint64, now time.Time) uint64 {
	return max(counter+RestoreGap, uint64(max(now.UnixMilli(), 0))*1000)
}

// Backup is a backup file's content, checked.
type Backup struct {
	Header BackupHeader
	// open reads the snapshot's bytes: from the node's snapshot store for
	// one TakeBackup took, from the file for one ReadBackupFile read, so a
	// large state is never copied in memory.
	open func() (io.ReadCloser, error)
}

// ErrBackup is wrapped by every error about a malformed backup.
var ErrBackup = errors.New("invalid backup")

// ErrRestoreRefused is wrapped by the errors of a restore that would
// overwrite state or could not install the backup alone.
var ErrRestoreRefused = errors.New("restore refused")

// WriteTo writes the backup file's bytes to w: the header line, then the
// snapshot.
func (b *Backup) WriteTo(w io.Writer) (int64, error) {
	h, err := json.Marshal(b.Header)
	if err != nil {
		return 0, fmt.Errorf("encode backup header: %w", err)
	}
	n, err := w.Write(append(h, '\n'))
	if err != nil {
		return int64(n), fmt.Errorf("write backup header: %w", err)
	}
	rc, err := b.open()
	if err != nil {
		return int64(n), fmt.Errorf("reopen the snapshot: %w", err)
	}
	m, err := io.Copy(w, rc)
	if cerr := rc.Close(); err == nil {
		err = cerr // the store checks the snapshot's CRC at close
	}
	if err == nil && m != b.Header.Size {
		err = fmt.Errorf("the snapshot changed size: %d bytes, %d in the header", m, b.Header.Size)
	}
	if err != nil {
		return int64(n) + m, fmt.Errorf("write backup snapshot: %w", err)
	}
	return int64(n) + m, nil
}

// CheckBackup reads a backup file's bytes from r as they come and checks
// them, holding one record of the snapshot at a time: the header, the
// snapshot's size and SHA-256, and the snapshot's own format and checksum.
// It returns the header, where the snapshot starts (the header line's
// length) and the summary of the state.
func CheckBackup(r io.Reader) (BackupHeader, int64, fsm.SnapshotSummary, error) {
	var none fsm.SnapshotSummary
	br := bufio.NewReader(r)
	line, err := br.ReadSlice('\n')
	if err != nil || len(line) > maxBackupHeader {
		return BackupHeader{}, 0, none, fmt.Errorf("%w: no header line", ErrBackup)
	}
	var h BackupHeader
	if err := json.Unmarshal(line[:len(line)-1], &h); err != nil || h.Format != BackupFormat {
		return BackupHeader{}, 0, none, fmt.Errorf("%w: the header is not a %s header", ErrBackup, BackupFormat)
	}
	start := int64(len(line))
	sum, n := sha256.New(), &countingWriter{}
	snap := io.TeeReader(br, io.MultiWriter(sum, n))
	summary, inspectErr := fsm.InspectSnapshotReader(snap)
	// A file cut short or altered is said to be so, whatever the
	// snapshot's own decoding met first: the rest is read for the sum.
	if _, err := io.Copy(io.Discard, snap); err != nil {
		return BackupHeader{}, 0, none, fmt.Errorf("read backup: %w", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); n.n != h.Size || got != h.SHA256 {
		return BackupHeader{}, 0, none, fmt.Errorf("%w: checksum mismatch: the header gives sha256 %s for %d bytes, the %d bytes that follow it have sha256 %s (the file is truncated or altered)",
			ErrBackup, h.SHA256, h.Size, n.n, got)
	}
	if inspectErr != nil {
		return BackupHeader{}, 0, none, fmt.Errorf("%w: %w", ErrBackup, inspectErr)
	}
	if h.FencingCounter != 0 && h.FencingCounter != summary.FencingCounter {
		return BackupHeader{}, 0, none, fmt.Errorf("%w: the header's fencing_counter %d is not the snapshot's %d", ErrBackup, h.FencingCounter, summary.FencingCounter)
	}
	return h, start, summary, nil
}

// ReadBackupFile reads and checks a backup file as it goes; the backup it
// returns reads the snapshot from the file again when it is used, so a
// large state is never held in memory.
func ReadBackupFile(path string) (*Backup, fsm.SnapshotSummary, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fsm.SnapshotSummary{}, fmt.Errorf("read backup: %w", err)
	}
	defer f.Close()
	h, start, summary, err := CheckBackup(f)
	if err != nil {
		return nil, fsm.SnapshotSummary{}, err
	}
	return &Backup{Header: h, open: func() (io.ReadCloser, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read backup: %w", err)
		}
		return readCloser{Reader: io.NewSectionReader(f, start, h.Size), Closer: f}, nil
	}}, summary, nil
}

// TakeBackup snapshots the replicated state as this leader sees it: it
// confirms leadership, waits until everything committed before the call is
// applied (a barrier), then takes a Raft snapshot, so the backup holds every
// write acknowledged before it began.
func (n *Node) TakeBackup(ctx context.Context) (*Backup, error) {
	if n.raft.State() != raft.Leader {
		return nil, ErrNotLeader
	}
	if !n.lead.isReady() {
		return nil, ErrNotReady
	}
	if err := await(ctx, n.raft.VerifyLeader()); err != nil {
		return nil, fmt.Errorf("%w: leadership not confirmed: %w", ErrNotLeader, err)
	}
	if err := await(ctx, n.raft.Barrier(backupTimeout(ctx))); err != nil {
		return nil, fmt.Errorf("%w: barrier before the backup: %w", ErrNotLeader, err)
	}
	f := n.raft.Snapshot()
	if err := await(ctx, f); err != nil {
		return nil, fmt.Errorf("take a snapshot: %w", err)
	}
	// Hash the snapshot now for the header, and stream it again from the
	// store when the backup is written (the store keeps two), in
	// the state machine's format whatever Raft would send a follower.
	meta, rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("open the snapshot: %w", err)
	}
	_ = rc.Close()
	open := func() (io.ReadCloser, error) { return openForBackup(n.snaps, meta.ID) }
	if rc, err = open(); err != nil {
		return nil, fmt.Errorf("open the snapshot: %w", err)
	}
	h := sha256.New()
	prefix := &prefixWriter{max: fsm.SnapshotPrefixLen}
	size, err := io.Copy(io.MultiWriter(h, prefix), rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("read the snapshot: %w", err)
	}
	fencing, err := fsm.SnapshotFencing(prefix.b)
	if err != nil {
		return nil, fmt.Errorf("read the snapshot: %w", err)
	}
	return &Backup{Header: BackupHeader{
		Format: BackupFormat, Index: meta.Index, Term: meta.Term,
		Size: size, SHA256: hex.EncodeToString(h.Sum(nil)),
		NodeID: n.cfg.NodeID, CreatedAt: n.cfg.Now().UTC().Format(time.RFC3339),
		FencingCounter: fencing,
	}, open: open}, nil
}

// prefixWriter keeps the first max bytes written to it.
type prefixWriter struct {
	b   []byte
	max int
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	if k := w.max - len(w.b); k > 0 {
		w.b = append(w.b, p[:min(k, len(p))]...)
	}
	return len(p), nil
}

// backupTimeout is what is left of ctx for a Raft call that takes a timeout.
func backupTimeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 30 * time.Second
}

// restore installs a backup into a new single-node cluster this node has
// just bootstrapped: once it leads, Raft consumes the snapshot (the current
// configuration is kept, the log continues past the snapshot's index so
// joiners receive it), the cluster's level is raised to this build's, the
// fencing counter above every token the backup's cluster can have issued,
// and this node records itself in the restored node directory again.
func (n *Node) restore(b *Backup) error {
	deadline := time.Now().Add(restoreWait)
	for n.raft.State() != raft.Leader || !n.lead.isReady() {
		if time.Now().After(deadline) {
			return fmt.Errorf("restore: this node did not become a ready leader within %v", restoreWait)
		}
		if !n.sleep(20 * time.Millisecond) {
			return errors.New("restore: the node shut down")
		}
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Index: b.Header.Index, Term: b.Header.Term, Size: b.Header.Size}
	rc, err := b.open()
	if err != nil {
		return fmt.Errorf("restore the snapshot: %w", err)
	}
	err = n.raft.Restore(meta, rc, restoreWait)
	_ = rc.Close()
	if err != nil {
		return fmt.Errorf("restore the snapshot: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), restoreWait)
	defer cancel()
	// The backup's state carries its cluster's level, which may be below
	// this build's. The new cluster is this node alone, so it starts at its
	// build's level now, after the restore: raised before, it would have
	// been lowered again by the restore.
	n.startAtBootLevel(ctx)
	restored := n.fsm.FencingCounter()
	floor := &fsm.FenceFloor{Now: n.Now(), Floor: RestoreFloor(restored, n.cfg.Now())}
	if err := floor.Valid(); err != nil {
		return fmt.Errorf("%w: %w", ErrRestoreRefused, err)
	}
	// The floor's entry needs level 1, which a backup at level 0 lacks;
	// should the raise above have failed, the level rises once the
	// configuration has settled (tendLevel).
	if err := n.awaitLevel(ctx, fsm.RequiredLevel(floor)); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if _, err := n.Propose(ctx, floor); err != nil {
		return fmt.Errorf("restore: raise the fencing counter above every token issued after the backup: %w", err)
	}
	n.ensureSelfInDirectory(ctx)
	n.log.Info("restored a backup", "index", b.Header.Index, "term", b.Header.Term, "from_node", b.Header.NodeID, "taken_at", b.Header.CreatedAt,
		"backup_fencing_counter", restored, "fencing_counter", n.fsm.FencingCounter(), "level", n.fsm.Level())
	return nil
}

// restoreWait bounds each step of a restore.
const restoreWait = 60 * time.Second
