package statestore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/internal/atomicfile"
)

// FormatVersion is the pebble format every store is created and kept at.
// It is pinned so that a later pebble can never move a store to a format
// an earlier build of holdfast cannot open.
const FormatVersion = pebble.FormatValueSeparation

const (
	currentFile = "CURRENT"
	storePrefix = "store-"
	// installPrefix names a directory being filled for Install.
	installPrefix = "install-"
)

// appliedKey holds the index of the last log entry applied, as 8 bytes
// big-endian. Its first byte sorts before every record key the state
// machine uses, which must not start with 0x00.
var appliedKey = []byte{0x00, 'a', 'p', 'p', 'l', 'i', 'e', 'd'}

// ErrReservedKey is returned for a key that starts with the byte 0x00,
// which the store keeps for itself.
var ErrReservedKey = errors.New("statestore: keys starting with 0x00 are reserved")

// Options tune a store.
type Options struct {
	// CacheBytes is the memory pebble keeps (default 128 MiB): the block
	// cache, from which the memtables are reserved too.
	CacheBytes int64
	// MemTableBytes is the size of one memtable (default 32 MiB, at most
	// a quarter of CacheBytes: larger ones cost fewer flushes and
	// compactions for the same writes); a second fills while one is
	// flushed. Both are reserved from CacheBytes, which must leave room
	// for blocks beside them.
	MemTableBytes uint64
	// Logger receives pebble's messages (default: none).
	Logger hclog.Logger
}

func (o Options) withDefaults() Options {
	if o.CacheBytes <= 0 {
		o.CacheBytes = 128 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 32 << 20
	}
	o.MemTableBytes = min(o.MemTableBytes, uint64(o.CacheBytes)/4)
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	return o
}

// Store is an open state store. Its methods may be called from any
// goroutine, but batches are committed by one writer.
type Store struct {
	root    string
	opts    Options
	live    atomic.Pointer[database]
	closed  atomic.Bool
	applied atomic.Uint64 // as of the last commit or open
	spare   atomic.Pointer[batchBufs]
}

// Open opens the store under root, making an empty one if there is none.
// A directory left by an Install that a crash interrupted is removed.
func Open(root string, opts Options) (*Store, error) {
	limitMallocArenas()
	opts = opts.withDefaults()
	if err := atomicfile.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("open state store: %w", err)
	}
	name, err := readCurrent(root)
	fresh := errors.Is(err, os.ErrNotExist)
	if fresh {
		name = storeName(1)
	} else if err != nil {
		return nil, err
	}
	if err := removeOthers(root, name, fresh); err != nil {
		return nil, err
	}
	s := &Store{root: root, opts: opts}
	if fresh {
		return s, s.create(name)
	}
	d, applied, err := s.open(name, false)
	if err != nil {
		return nil, err
	}
	s.live.Store(d)
	s.applied.Store(applied)
	return s, nil
}

// create makes the first database and then CURRENT. A database left
// without CURRENT is one whose creation a crash interrupted: nothing was
// ever committed to it, since Open returns only after CURRENT is written,
// so one that pebble cannot open (a power loss took part of what it was
// writing) is made again.
func (s *Store) create(name string) error {
	dir := filepath.Join(s.root, name)
	d, applied, err := s.open(name, true)
	if err != nil {
		s.opts.Logger.Warn("state store: remaking a first database whose creation was interrupted", "dir", dir, "error", err)
		if rerr := os.RemoveAll(dir); rerr != nil {
			return errors.Join(err, fmt.Errorf("open state store: remove %s: %w", dir, rerr))
		}
		if d, applied, err = s.open(name, true); err != nil {
			return err
		}
	}
	if applied != 0 {
		err = fmt.Errorf("open state store: %s holds a database at index %d but no %s", s.root, applied, currentFile)
	}
	if err == nil {
		err = atomicfile.SyncDir(s.root)
	}
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.root, currentFile), []byte(name+"\n"))
	}
	if err != nil {
		_ = d.Close()
		return fmt.Errorf("open state store: %w", err)
	}
	s.live.Store(d)
	return nil
}

// readCurrent reads the name of the live database from root's CURRENT.
func readCurrent(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, currentFile))
	if err != nil {
		return "", fmt.Errorf("open state store: read %s: %w", currentFile, err)
	}
	name := strings.TrimSuffix(string(b), "\n")
	if _, ok := storeNumber(name); !ok {
		return "", fmt.Errorf("open state store: %s in %s names %q, not a store directory", currentFile, root, name)
	}
	return name, nil
}

func storeName(n uint64) string { return fmt.Sprintf("%s%06d", storePrefix, n) }

func storeNumber(name string) (uint64, bool) {
	digits, ok := strings.CutPrefix(name, storePrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	return n, err == nil && n > 0 && storeName(n) == name
}

// removeOthers removes every store or install directory under root but
// the live one, and syncs root if it removed any. Without CURRENT (fresh)
// it removes only install directories: a database other than the first
// one is then a sign that CURRENT was lost, and an error.
func removeOthers(root, live string, fresh bool) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return fmt.Errorf("open state store: %w", err)
	}
	removed := false
	for _, e := range entries {
		n := e.Name()
		if n == live || !(strings.HasPrefix(n, storePrefix) || strings.HasPrefix(n, installPrefix)) {
			continue
		}
		if fresh && strings.HasPrefix(n, storePrefix) {
			return fmt.Errorf("open state store: %s holds the database %s but no %s", root, n, currentFile)
		}
		if err := os.RemoveAll(filepath.Join(root, n)); err != nil {
			return fmt.Errorf("open state store: remove %s: %w", n, err)
		}
		removed = true
	}
	if removed {
		return atomicfile.SyncDir(root)
	}
	return nil
}

// open opens the database in the directory name, making it only if
// create is set, and reads its applied index.
func (s *Store) open(name string, create bool) (*database, uint64, error) {
	cache := pebble.NewCache(s.opts.CacheBytes)
	defer cache.Unref()
	dir := filepath.Join(s.root, name)
	o := pebbleOptions(s.opts)
	o.Cache = cache
	o.ErrorIfNotExists = !create
	db, err := pebble.Open(dir, o)
	if err != nil {
		return nil, 0, fmt.Errorf("open state store %s: %w", dir, err)
	}
	applied, _, err := readApplied(db)
	if err != nil {
		_ = db.Close()
		return nil, 0, fmt.Errorf("open state store %s: %w", dir, err)
	}
	return newDatabase(db, name), applied, nil
}

// readApplied reads the applied index a database records (ok false, and
// 0, for one that records none: nothing was committed to it).
func readApplied(r reader) (applied uint64, ok bool, err error) {
	v, ok, err := get(r, appliedKey)
	switch {
	case err != nil || !ok:
		return 0, false, err
	case len(v) != 8:
		return 0, false, fmt.Errorf("applied index is %d bytes, want 8", len(v))
	}
	return binary.BigEndian.Uint64(v), true, nil
}

// pebbleOptions are the options of every database of a store.
func pebbleOptions(opts Options) *pebble.Options {
	o := &pebble.Options{
		MemTableSize:       opts.MemTableBytes,
		DisableWAL:         true, // the Raft log is the write-ahead log
		FormatMajorVersion: FormatVersion,
		Logger:             pebbleLogger{opts.Logger},
		EventListener:      storeEvents(opts.Logger),
	}
	// Most lookups of the state machine are of keys that do not exist
	// yet (a new lease, job or queue): a filter answers those without
	// reading a block.
	// Records are mostly random ids and hashes, which compression barely
	// shrinks, while compressing every flush and compaction and
	// decompressing every block read cost a tenth of a node's CPU under
	// the queue load.
	//
	// Blocks of 32 KiB rather than pebble's 4 KiB: a flush or compaction
	// writes each block with a system call of its own, which at 4 KiB
	// cost more than the blocks' contents under the queue load.
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		o.Levels[i].BlockSize = 32 << 10
		o.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
	}
	return o
}

// Dir is the live database's directory.
func (s *Store) Dir() string { return filepath.Join(s.root, s.live.Load().name) }

// Applied is the index of the last log entry whose batch was committed,
// or after Open, the last one that was durable.
func (s *Store) Applied() uint64 { return s.applied.Load() }

// Get returns a copy of the committed value of key.
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	d, err := s.acquire()
	if err != nil {
		return nil, false, err
	}
	defer func() { _ = s.release(d) }()
	return get(d, key)
}

// Scan calls fn for each committed key in [lower, upper) in order, until
// fn returns false. The slices are valid only during the call.
func (s *Store) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	d, err := s.acquire()
	if err != nil {
		return err
	}
	defer func() { _ = s.release(d) }()
	return scan(d, lower, upper, fn)
}

// Flush makes every committed batch durable.
func (s *Store) Flush() error {
	return s.with(flush)
}

// flushLive flushes the live database, closed or not (for Close).
func (s *Store) flushLive() error { return flush(s.live.Load()) }

func flush(d *database) error {
	if err := d.Flush(); err != nil {
		return fmt.Errorf("flush state store: %w", err)
	}
	return nil
}

// StartFlush starts making every batch committed so far durable and
// returns a channel closed once they are. It does not wait: it only sets
// the memtable that holds them aside for flushing, so a caller that must
// not block writers (the state machine's snapshot) can wait elsewhere.
func (s *Store) StartFlush() (<-chan struct{}, error) {
	var ch <-chan struct{}
	err := s.with(func(d *database) (err error) {
		ch, err = d.AsyncFlush()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("flush state store: %w", err)
	}
	return ch, nil
}

// Checkpoint flushes the store and makes a durable copy of it in dir
// (which must not exist, and must be on the store's file system): hard
// links to its immutable files, so it costs what changed since the last
// flush, not the size of the state.
func (s *Store) Checkpoint(dir string) error {
	if err := s.Flush(); err != nil {
		return err
	}
	return s.CheckpointFlushed(dir)
}

// CheckpointFlushed is Checkpoint without the flush: the copy holds what
// was durable when it was taken (every batch up to some index, the one
// its Applied says), none of what was committed but not yet flushed.
func (s *Store) CheckpointFlushed(dir string) error {
	if err := s.with(func(d *database) error { return d.Checkpoint(dir) }); err != nil {
		return fmt.Errorf("checkpoint state store to %s: %w", dir, err)
	}
	if err := syncTree(dir); err != nil {
		return fmt.Errorf("checkpoint state store to %s: %w", dir, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(dir)); err != nil {
		return fmt.Errorf("checkpoint state store to %s: %w", dir, err)
	}
	return nil
}

// reads are the reads of a state that does not change: a View's or a
// Frozen checkpoint's.
type reads struct{ r reader }

// Get returns a copy of key's value.
func (x reads) Get(key []byte) ([]byte, bool, error) { return get(x.r, key) }

// Scan calls fn for each key in [lower, upper), in order, until fn
// returns false. The slices are valid only during the call.
func (x reads) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	return scan(x.r, lower, upper, fn)
}

// Frozen is a read-only database: a checkpoint of a store.
type Frozen struct {
	reads
	db      *pebble.DB
	applied uint64
}

// OpenFrozen opens the checkpoint in dir read-only.
func OpenFrozen(dir string) (*Frozen, error) {
	o := pebbleOptions(Options{}.withDefaults())
	o.ReadOnly, o.ErrorIfNotExists = true, true
	cache := pebble.NewCache(8 << 20)
	defer cache.Unref()
	o.Cache = cache
	db, err := pebble.Open(dir, o)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint %s: %w", dir, err)
	}
	applied, ok, err := readApplied(db)
	if err == nil && !ok {
		err = errors.New("it records no applied index")
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open checkpoint %s: %w", dir, err)
	}
	return &Frozen{reads: reads{db}, db: db, applied: applied}, nil
}

// Applied is the index of the last log entry the checkpoint holds.
func (f *Frozen) Applied() uint64 { return f.applied }

// Close closes the checkpoint.
func (f *Frozen) Close() error {
	if err := f.db.Close(); err != nil {
		return fmt.Errorf("close checkpoint: %w", err)
	}
	return nil
}

// InstallDir returns a new, empty directory under the store's root in
// which to build a database for Install. Open removes it if Install was
// never called or did not finish.
func (s *Store) InstallDir() (string, error) {
	dir, err := os.MkdirTemp(s.root, installPrefix)
	if err != nil {
		return "", fmt.Errorf("state store: make an install directory: %w", err)
	}
	return dir, nil
}

// Install replaces the store's contents by the database in dir, made by
// InstallDir and filled by the caller (a checkpoint's files). It syncs
// dir's files, moves dir in as the next database and writes CURRENT anew,
// so a crash at any moment leaves the old database or the new one whole.
// The store stays open on whichever is live when Install returns. Views
// of the old database go on reading it: it is closed and removed when the
// last of them is closed.
func (s *Store) Install(dir string) error {
	if filepath.Dir(filepath.Clean(dir)) != filepath.Clean(s.root) || !strings.HasPrefix(filepath.Base(dir), installPrefix) {
		return fmt.Errorf("state store: install %s: not a directory from InstallDir", dir)
	}
	if err := syncTree(dir); err != nil {
		return fmt.Errorf("state store: install %s: %w", dir, err)
	}
	if s.closed.Load() {
		return ErrClosed
	}
	old := s.live.Load()
	n, _ := storeNumber(old.name)
	next := storeName(n + 1)
	if err := os.Rename(dir, filepath.Join(s.root, next)); err != nil {
		return fmt.Errorf("state store: install %s: %w", dir, err)
	}
	if err := atomicfile.SyncDir(s.root); err != nil {
		return fmt.Errorf("state store: install %s: %w", dir, err)
	}
	if err := atomicfile.Write(filepath.Join(s.root, currentFile), []byte(next+"\n")); err != nil {
		// CURRENT may or may not have changed on disk; the old database
		// is intact either way, and so is the new one. The old one stays
		// live until the next start, which opens the one CURRENT names.
		return fmt.Errorf("state store: install: %w", err)
	}
	d, applied, err := s.open(next, false)
	if err != nil {
		return fmt.Errorf("state store: install: %w", err)
	}
	s.live.Store(d)
	s.applied.Store(applied)
	old.replaced.Store(true)
	_ = s.release(old) // the new database is live: a failure here is only logged
	return nil
}

// ReplaceFiles makes the store hold the database whose files fill writes
// into the directory it is given (another store's checkpoint, received
// from a peer). The database is opened read-only and handed to check,
// which must find it whole, and only then installed (see Install): an
// error from fill or check leaves the old contents, and the new files
// are removed.
func (s *Store) ReplaceFiles(fill func(dir string) error, check func(*Frozen) error) error {
	dir, err := s.InstallDir()
	if err != nil {
		return err
	}
	err = fill(dir)
	if err == nil {
		err = checkFrozen(dir, check)
	}
	if err != nil {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fmt.Errorf("state store: replace: %w", err)
	}
	return s.Install(dir)
}

// checkFrozen opens the database in dir read-only for check.
func checkFrozen(dir string, check func(*Frozen) error) error {
	fz, err := OpenFrozen(dir)
	if err != nil {
		return err
	}
	err = check(fz)
	if cerr := fz.Close(); err == nil {
		err = cerr
	}
	return err
}

// Close flushes the store, so that a restart replays nothing, and closes it.
// Views still open keep the database open until they are closed. A second
// Close does nothing.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	ferr := s.flushLive()
	d := s.live.Load()
	if err := s.release(d); err != nil {
		return errors.Join(ferr, fmt.Errorf("close state store: %w", err))
	}
	return ferr
}

// Batch is one apply batch: nothing of it is visible until Commit, and it
// cannot be read (a writer keeps what it changed until then).
//
// Its writes are gathered and handed to pebble in key order at Commit,
// the last write of a key alone: pebble inserts a batch into its memtable
// with the place of the key before as a hint, which costs little when
// each key follows the last and a whole search of the memtable when
// keys come in any order, as a state machine's changed records do.
type Batch struct {
	s *Store
	*batchBufs
}

// batchBufs are a batch's buffers, kept by the store for the next batch
// (there is one at a time: the state machine's).
type batchBufs struct {
	buf []byte // every key and value, back to back
	ops []batchOp
}

// errBatchDone is the error of a batch used after its Commit or Discard.
var errBatchDone = errors.New("state store: the batch was committed or discarded already")

// maxKeptBatchBytes bounds the buffers a store keeps between batches.
const maxKeptBatchBytes = 16 << 20

// done hands the batch's buffers back to the store.
func (b *Batch) done() {
	if b.batchBufs == nil {
		return
	}
	if cap(b.buf) <= maxKeptBatchBytes {
		b.buf, b.ops = b.buf[:0], b.ops[:0]
		b.s.spare.Store(b.batchBufs)
	}
	b.batchBufs = nil
}

// batchOp is one write of a batch: its key and value as offsets in buf.
type batchOp struct {
	k, v, end int
	del       bool
}

// Begin starts a batch. Call Commit or Discard.
func (s *Store) Begin() *Batch {
	bufs := s.spare.Swap(nil)
	if bufs == nil {
		bufs = &batchBufs{}
	}
	return &Batch{s: s, batchBufs: bufs}
}

// Set writes key's value.
func (b *Batch) Set(key, value []byte) error {
	return b.add(key, value, false)
}

// Delete removes key.
func (b *Batch) Delete(key []byte) error {
	return b.add(key, nil, true)
}

func (b *Batch) add(key, value []byte, del bool) error {
	if len(key) == 0 || key[0] == 0 {
		return ErrReservedKey
	}
	if b.batchBufs == nil {
		return errBatchDone
	}
	op := batchOp{k: len(b.buf), del: del}
	b.buf = append(b.buf, key...)
	op.v = len(b.buf)
	b.buf = append(b.buf, value...)
	op.end = len(b.buf)
	b.ops = append(b.ops, op)
	return nil
}

func (b *Batch) key(op batchOp) []byte { return b.buf[op.k:op.v] }

// Commit records index as the last applied log entry and commits the
// batch without syncing it. The batch is done with either way.
func (b *Batch) Commit(index uint64) error {
	if b.batchBufs == nil {
		return errBatchDone
	}
	defer b.done()
	if a := b.s.applied.Load(); index <= a {
		return fmt.Errorf("state store: commit index %d, but %d is applied already", index, a)
	}
	// Stable, so that of two writes of a key the later stays later.
	slices.SortStableFunc(b.ops, func(x, y batchOp) int { return bytes.Compare(b.key(x), b.key(y)) })
	d, err := b.s.acquire()
	if err != nil {
		return fmt.Errorf("state store: commit: %w", err)
	}
	defer func() { _ = b.s.release(d) }()
	pb := d.NewBatchWithSize(len(b.buf) + len(b.ops)*16 + 32)
	defer pb.Close()
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], index)
	err = pb.Set(appliedKey, v[:], nil) // the first key of all
	for i, op := range b.ops {
		if err != nil {
			break
		}
		if i+1 < len(b.ops) && bytes.Equal(b.key(op), b.key(b.ops[i+1])) {
			continue // written again later in the batch
		}
		if op.del {
			err = pb.Delete(b.key(op), nil)
		} else {
			err = pb.Set(b.key(op), b.buf[op.v:op.end], nil)
		}
	}
	if err == nil {
		err = pb.Commit(pebble.NoSync)
	}
	if err != nil {
		return fmt.Errorf("state store: commit: %w", err)
	}
	b.s.applied.Store(index)
	return nil
}

// Discard drops the batch's writes.
func (b *Batch) Discard() { b.done() }

// View is a consistent, read-only view of the committed state.
type View struct {
	reads
	snap *pebble.Snapshot
	s    *Store
	d    *database
}

// View returns a view of the state as committed now, which later commits
// do not change. Close it when done: until then pebble keeps what it
// needs.
func (s *Store) View() (*View, error) {
	d, err := s.acquire()
	if err != nil {
		return nil, err
	}
	snap := d.NewSnapshot()
	return &View{reads: reads{snap}, snap: snap, s: s, d: d}, nil
}

// Close releases the view.
func (v *View) Close() error {
	err := v.snap.Close()
	if rerr := v.s.release(v.d); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("state store: close a view: %w", err)
	}
	return nil
}

// Writer fills a database for Replace, committing as it goes.
type Writer struct{ b *pebble.Batch }

// replaceBatchBytes is how much a Writer gathers before it commits.
const replaceBatchBytes = 4 << 20

// Set writes key's value.
func (w *Writer) Set(key, value []byte) error {
	if len(key) == 0 || key[0] == 0 {
		return ErrReservedKey
	}
	if err := w.b.Set(key, value, nil); err != nil {
		return fmt.Errorf("state store: set: %w", err)
	}
	return w.maybeCommit()
}

// Delete removes key.
func (w *Writer) Delete(key []byte) error {
	if len(key) == 0 || key[0] == 0 {
		return ErrReservedKey
	}
	if err := w.b.Delete(key, nil); err != nil {
		return fmt.Errorf("state store: delete: %w", err)
	}
	return w.maybeCommit()
}

func (w *Writer) maybeCommit() error {
	if w.b.Len() < replaceBatchBytes {
		return nil
	}
	if err := w.b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("state store: fill: %w", err)
	}
	w.b.Reset()
	return nil
}

// Replace makes the store hold exactly what fill writes, as of the log
// index given, and nothing else: it fills a new database beside the live
// one and installs it (see Install), so a crash at any moment leaves the
// old contents or the new ones. An error from fill leaves the old.
func (s *Store) Replace(index uint64, fill func(w *Writer) error) error {
	dir, err := s.InstallDir()
	if err != nil {
		return err
	}
	if err := fillDir(dir, s.opts, index, fill); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("state store: replace: %w", err)
	}
	return s.Install(dir)
}

// fillDir makes a database in dir holding what fill writes and the applied
// index, flushed and closed.
func fillDir(dir string, opts Options, index uint64, fill func(w *Writer) error) error {
	db, err := pebble.Open(dir, pebbleOptions(opts))
	if err != nil {
		return err
	}
	w := &Writer{b: db.NewBatch()}
	err = fill(w)
	if err == nil {
		var v [8]byte
		binary.BigEndian.PutUint64(v[:], index)
		err = w.b.Set(appliedKey, v[:], nil)
	}
	if err == nil {
		err = w.b.Commit(pebble.NoSync)
	}
	_ = w.b.Close()
	if err == nil {
		err = db.Flush()
	}
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	return err
}

// reader is what pebble's DB and indexed Batch share.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

func get(r reader, key []byte) ([]byte, bool, error) {
	v, c, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state store: get: %w", err)
	}
	out := append([]byte(nil), v...)
	if err := c.Close(); err != nil {
		return nil, false, fmt.Errorf("state store: get: %w", err)
	}
	return out, true, nil
}

func scan(r reader, lower, upper []byte, fn func(k, v []byte) bool) error {
	if len(lower) == 0 || lower[0] == 0 {
		return ErrReservedKey
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("state store: scan: %w", err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("state store: scan: %w", err)
		}
		if !fn(it.Key(), v) {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state store: scan: %w", err)
	}
	return nil
}

// syncTree fsyncs every file and directory under dir, dir included.
func syncTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return atomicfile.Sync(p)
	})
}

// pebbleLogger passes pebble's messages to hclog. Pebble calls Fatalf when
// it cannot go on (a corrupt or unreadable file in the background); the
// node must then stop rather than serve a state it cannot read.
type pebbleLogger struct{ l hclog.Logger }

func (p pebbleLogger) Infof(format string, args ...interface{}) {
	p.l.Debug(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...interface{}) {
	p.l.Error(fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("state store cannot go on", "error", msg)
	panic("holdfast state store: " + msg)
}

// storeEvents logs each flush and compaction that ends, at debug level,
// with its sizes and durations (never the keys it held): what the store
// did in the background when a node's latency rose.
func storeEvents(l hclog.Logger) *pebble.EventListener {
	return &pebble.EventListener{
		FlushEnd: func(i pebble.FlushInfo) {
			l.Debug("state store flushed", "job", i.JobID, "reason", i.Reason, "memtable_bytes", i.InputBytes,
				"tables", len(i.Output), "table_bytes", tableBytes(i.Output), "seconds", i.TotalDuration.Seconds(), "error", i.Err)
		},
		CompactionEnd: func(i pebble.CompactionInfo) {
			var in []pebble.TableInfo
			levels := make([]int, 0, len(i.Input))
			for _, li := range i.Input {
				in = append(in, li.Tables...)
				levels = append(levels, li.Level)
			}
			l.Debug("state store compacted", "job", i.JobID, "reason", i.Reason, "levels", levels, "to_level", i.Output.Level,
				"input_bytes", tableBytes(in), "output_bytes", tableBytes(i.Output.Tables), "seconds", i.TotalDuration.Seconds(), "error", i.Err)
		},
	}
}

// tableBytes is the size of tables.
func tableBytes(tables []pebble.TableInfo) uint64 {
	var n uint64
	for _, t := range tables {
		n += t.Size
	}
	return n
}

// Metrics are pebble's figures for the live database: its levels, the
// bytes flushed and compacted, its caches.
func (s *Store) Metrics() (m *pebble.Metrics) {
	if s.with(func(d *database) error { m = d.Metrics(); return nil }) != nil {
		return &pebble.Metrics{}
	}
	return m
}
