package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/atomicfile"
	"github.com/holdfast/holdfast/internal/statestore"
)

// CheckpointLevel is the cluster level from which a node keeps its Raft
// snapshots as checkpoints of its state store: a snapshot then costs
// what changed since the last flush of the store (hard links to its
// immutable files), not the size of the state. A build of an earlier
// level cannot read such a snapshot, so none is taken before every member
// speaks this level; what a follower receives is the state machine's
// snapshot format either way.
const CheckpointLevel = 3

// checkpointMagic starts the state file (state.bin) of a snapshot kept as
// a checkpoint; the index of the last entry the checkpoint holds follows,
// as 8 bytes big-endian. A snapshot in the state machine's format starts
// with another magic, so the two cannot be taken for each other.
const checkpointMagic = "HOLDFAST-CKPT1\n"

// checkpointDir is the directory, inside a snapshot's, of its checkpoint.
const checkpointDir = "state"

// checkpointMarker is the state file of a snapshot kept as a checkpoint
// holding every entry up to applied.
func checkpointMarker(applied uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(checkpointMagic), applied)
}

// parseCheckpointMarker reads the start of a snapshot's state file: the
// index a checkpoint holds, or ok false for a snapshot in the state
// machine's format.
func parseCheckpointMarker(head []byte) (applied uint64, ok bool) {
	rest, ok := bytes.CutPrefix(head, []byte(checkpointMagic))
	if !ok || len(rest) != 8 {
		return 0, false
	}
	return binary.BigEndian.Uint64(rest), true
}

// checkpointSink is a snapshot sink that can hold a checkpoint: the
// snapshot store's own (watchedSink over the file store).
type checkpointSink interface {
	raft.SnapshotSink
	// checkpointDir is where the snapshot's checkpoint goes while it is
	// written (inside the snapshot's temporary directory, which the store
	// renames whole when it finishes); ok false: this sink cannot hold one.
	checkpointDir() (dir string, ok bool)
}

// checkpointDirOf is where sink keeps a checkpoint, if it can.
func checkpointDirOf(sink raft.SnapshotSink) (string, bool) {
	if cs, ok := sink.(checkpointSink); ok {
		return cs.checkpointDir()
	}
	return "", false
}

func (s *watchedSink) checkpointDir() (string, bool) {
	if s.dir == "" {
		return "", false
	}
	return filepath.Join(s.dir, checkpointDir), true
}

// persistCheckpoint makes dir a checkpoint of the state store and writes
// its marker to the snapshot's state file, once flushed reports durable
// every batch up to applied (the snapshot's state). It reports false,
// leaving nothing behind, when the store had flushed later batches too by
// the time the checkpoint was taken: the checkpoint would then hold
// entries past the snapshot's index, which a follower installing it would
// apply a second time; the caller writes the state instead.
func persistCheckpoint(st *statestore.Store, flushed <-chan struct{}, applied uint64, dir string, state io.Writer) (bool, error) {
	<-flushed
	if err := st.CheckpointFlushed(dir); err != nil {
		return false, discardCheckpoint(dir, err)
	}
	fz, err := statestore.OpenFrozen(dir)
	if err != nil {
		return false, discardCheckpoint(dir, err)
	}
	got := fz.Applied()
	if err := fz.Close(); err != nil {
		return false, discardCheckpoint(dir, err)
	}
	if got != applied {
		return false, discardCheckpoint(dir, nil)
	}
	if _, err := state.Write(checkpointMarker(applied)); err != nil {
		return false, fmt.Errorf("write the checkpoint's marker: %w", err)
	}
	return true, nil
}

// discardCheckpoint removes a checkpoint that will not be used, and
// returns cause (with what the removal failed on, if it did).
func discardCheckpoint(dir string, cause error) error {
	if err := os.RemoveAll(dir); err != nil {
		return errors.Join(cause, fmt.Errorf("remove the checkpoint %s: %w", dir, err))
	}
	if err := atomicfile.SyncDir(filepath.Dir(dir)); err != nil {
		return errors.Join(cause, fmt.Errorf("remove the checkpoint %s: %w", dir, err))
	}
	if cause != nil {
		return fmt.Errorf("checkpoint the state store: %w", cause)
	}
	return nil
}

// frozenSnapshots keeps the checkpoints of snapshots open while they are
// read (a checkpoint is opened once however many readers it has: a store
// opens a database once per process) and the size in the state machine's
// format, which Raft must know before it sends one, of the last one
// measured and of those being read.
type frozenSnapshots struct {
	mu    sync.Mutex
	open  map[string]*sharedFrozen
	sizes map[string]int64
}

type sharedFrozen struct {
	fz   *statestore.Frozen
	refs int
}

// acquire opens the checkpoint of snapshot id in dir, or shares the one
// open.
func (f *frozenSnapshots) acquire(id, dir string) (*statestore.Frozen, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s := f.open[id]; s != nil {
		s.refs++
		return s.fz, nil
	}
	fz, err := statestore.OpenFrozen(dir)
	if err != nil {
		return nil, err
	}
	if f.open == nil {
		f.open = make(map[string]*sharedFrozen)
	}
	f.open[id] = &sharedFrozen{fz: fz, refs: 1}
	return fz, nil
}

// release gives back a checkpoint acquire returned, closing it after its
// last reader.
func (f *frozenSnapshots) release(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.open[id]
	if s == nil {
		return
	}
	if s.refs--; s.refs == 0 {
		_ = s.fz.Close()
		delete(f.open, id)
	}
}

// size returns the size in the state machine's format of the state the
// checkpoint of snapshot id holds, encoding it once to count.
func (f *frozenSnapshots) size(id string, fz *statestore.Frozen) (int64, error) {
	f.mu.Lock()
	n, ok := f.sizes[id]
	f.mu.Unlock()
	if ok {
		return n, nil
	}
	var c countingWriter
	if err := fsm.WriteStoreSnapshot(fz, &c); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sizes == nil {
		f.sizes = make(map[string]int64)
	}
	// Raft sends its newest snapshot: the sizes of others not being read
	// are not needed again.
	for k := range f.sizes {
		if f.open[k] == nil {
			delete(f.sizes, k)
		}
	}
	f.sizes[id] = c.n
	return c.n, nil
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
}

// Open implements raft.SnapshotStore: what Raft sends a follower, and
// restores at a start whose state store is behind. A snapshot kept as a
// checkpoint is read as the checkpoint's files (an archive, see
// ArchiveLevel) once the cluster is at ArchiveLevel, and before that as
// openEncoded reads it; any other is read as the file store keeps it.
func (s *watchedSnapshots) Open(id string) (*raft.SnapshotMeta, io.ReadCloser, error) {
	if s.level == nil || s.level() < ArchiveLevel {
		return s.openEncoded(id, true)
	}
	meta, rc, applied, ok, err := s.openMarked(id)
	if err != nil || !ok {
		return meta, rc, err
	}
	a, err := openArchive(filepath.Join(s.dir, id, checkpointDir), applied)
	if err != nil {
		return nil, nil, fmt.Errorf("open snapshot %s: %w", id, err)
	}
	m := *meta
	m.Size = a.size()
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pw.CloseWithError(a.writeTo(pw))
	}()
	return &m, &frozenReader{PipeReader: pr, done: done, release: func() {}}, nil
}

// openEncoded opens snapshot id in the state machine's format, the format
// of backups: one kept as a checkpoint is encoded from the checkpoint as
// it is read; one kept in that format is read as the file store keeps it.
// With sized, the meta has the size in that format, which costs encoding
// the state once more first (Raft sends the size before the bytes); a
// backup counts the bytes as it reads them and needs none (meta.Size 0).
func (s *watchedSnapshots) openEncoded(id string, sized bool) (*raft.SnapshotMeta, io.ReadCloser, error) {
	meta, rc, applied, ok, err := s.openMarked(id)
	if err != nil || !ok {
		return meta, rc, err
	}
	dir := filepath.Join(s.dir, id, checkpointDir)
	fz, err := s.frozen.acquire(id, dir)
	if err != nil {
		return nil, nil, fmt.Errorf("open snapshot %s: its checkpoint: %w", id, err)
	}
	if fz.Applied() != applied {
		s.frozen.release(id)
		return nil, nil, fmt.Errorf("open snapshot %s: its checkpoint holds entries up to %d, its marker says %d", id, fz.Applied(), applied)
	}
	m := *meta
	m.Size = 0
	if sized {
		if m.Size, err = s.frozen.size(id, fz); err != nil {
			s.frozen.release(id)
			return nil, nil, fmt.Errorf("open snapshot %s: read its checkpoint: %w", id, err)
		}
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pw.CloseWithError(fsm.WriteStoreSnapshot(fz, pw))
	}()
	return &m, &frozenReader{PipeReader: pr, done: done, release: func() { s.frozen.release(id) }}, nil
}

// openMarked opens snapshot id in the file store and reads its marker if
// it is kept as a checkpoint (ok, and the index it holds: rc is then
// closed); otherwise rc reads its state from the start.
func (s *watchedSnapshots) openMarked(id string) (meta *raft.SnapshotMeta, rc io.ReadCloser, applied uint64, ok bool, err error) {
	meta, rc, err = s.SnapshotStore.Open(id)
	if err != nil || s.dir == "" {
		return meta, rc, 0, false, err
	}
	head := make([]byte, len(checkpointMarker(0)))
	n, err := io.ReadFull(rc, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		_ = rc.Close()
		return nil, nil, 0, false, fmt.Errorf("open snapshot %s: %w", id, err)
	}
	if applied, ok := parseCheckpointMarker(head[:n]); ok && n == int(meta.Size) {
		_ = rc.Close()
		return meta, nil, applied, true, nil
	}
	return meta, readCloser{Reader: io.MultiReader(bytes.NewReader(head[:n]), rc), Closer: rc}, 0, false, nil
}

// openChecked opens snapshot id to check it without encoding a
// checkpoint's state: for one kept as a checkpoint it checks the marker's
// checksum (the file store's) and that the checkpoint opens and holds the
// entries the marker says, and returns a nil rc; for one in the state
// machine's format it returns rc, which reads the state.
func (s *watchedSnapshots) openChecked(id string) (rc io.ReadCloser, err error) {
	_, rc, applied, ok, err := s.openMarked(id)
	if err != nil || !ok {
		return rc, err
	}
	fz, err := s.frozen.acquire(id, filepath.Join(s.dir, id, checkpointDir))
	if err != nil {
		return nil, fmt.Errorf("its checkpoint: %w", err)
	}
	defer s.frozen.release(id)
	if fz.Applied() != applied {
		return nil, fmt.Errorf("its checkpoint holds entries up to %d, its marker says %d", fz.Applied(), applied)
	}
	return nil, nil
}

// openForBackup opens snapshot id of snaps in the state machine's format,
// unsized: see watchedSnapshots.openEncoded.
func openForBackup(snaps raft.SnapshotStore, id string) (io.ReadCloser, error) {
	if w, ok := snaps.(*watchedSnapshots); ok {
		_, rc, err := w.openEncoded(id, false)
		return rc, err
	}
	_, rc, err := snaps.Open(id)
	return rc, err
}

// openState opens snapshot id of snaps for a check: see openChecked.
func openState(snaps raft.SnapshotStore, id string) (io.ReadCloser, error) {
	if w, ok := snaps.(*watchedSnapshots); ok {
		return w.openChecked(id)
	}
	_, rc, err := snaps.Open(id)
	return rc, err
}

type readCloser struct {
	io.Reader
	io.Closer
}

// frozenReader reads a snapshot encoded from a checkpoint as it is
// encoded; Close stops the encoding and gives the checkpoint back.
type frozenReader struct {
	*io.PipeReader
	done    chan struct{}
	release func()
	once    sync.Once
}

func (r *frozenReader) Close() error {
	r.once.Do(func() {
		_ = r.PipeReader.Close()
		<-r.done
		r.release()
	})
	return nil
}
