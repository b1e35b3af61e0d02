package cluster

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// mappedBolt is raft.db as the node uses it. bbolt reads its file through
// a memory map, so a read the disk fails reaches the process as a fault
// (SIGBUS), not as an error, and would crash it without a word of which
// file failed. Every call here turns such a fault into an error naming
// raft.db, which the node reports like any other storage error.
type mappedBolt struct {
	b    *raftboltdb.BoltStore
	path string
}

var (
	_ raft.StableStore = (*mappedBolt)(nil)
	_ raft.LogStore    = (*mappedBolt)(nil)
)

// guard runs f, turning a fault on a mapped page into an error.
func (m *mappedBolt) guard(f func() error) error { return mappedRead(m.path, f) }

// mappedRead runs f, which reads path through a memory map, turning a
// fault on a mapped page into an error naming path.
func mappedRead(path string, f func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if rec := recover(); rec != nil {
			re, ok := rec.(runtime.Error)
			if _, mapped := rec.(interface{ Addr() uintptr }); !ok || !mapped {
				panic(rec)
			}
			err = fmt.Errorf("read %s: the disk failed a read of its mapped pages (%v)", path, re)
		}
	}()
	return f()
}

// Set implements raft.StableStore.
func (m *mappedBolt) Set(key, val []byte) error {
	return m.guard(func() error { return m.b.Set(key, val) })
}

// Get implements raft.StableStore.
func (m *mappedBolt) Get(key []byte) (val []byte, err error) {
	err = m.guard(func() error { val, err = m.b.Get(key); return err })
	return val, err
}

// SetUint64 implements raft.StableStore.
func (m *mappedBolt) SetUint64(key []byte, val uint64) error {
	return m.guard(func() error { return m.b.SetUint64(key, val) })
}

// GetUint64 implements raft.StableStore.
func (m *mappedBolt) GetUint64(key []byte) (val uint64, err error) {
	err = m.guard(func() error { val, err = m.b.GetUint64(key); return err })
	return val, err
}

// FirstIndex implements raft.LogStore (for a data dir made before raftlog).
func (m *mappedBolt) FirstIndex() (i uint64, err error) {
	err = m.guard(func() error { i, err = m.b.FirstIndex(); return err })
	return i, err
}

// LastIndex implements raft.LogStore.
func (m *mappedBolt) LastIndex() (i uint64, err error) {
	err = m.guard(func() error { i, err = m.b.LastIndex(); return err })
	return i, err
}

// GetLog implements raft.LogStore.
func (m *mappedBolt) GetLog(index uint64, log *raft.Log) error {
	return m.guard(func() error { return m.b.GetLog(index, log) })
}

// StoreLog implements raft.LogStore.
func (m *mappedBolt) StoreLog(log *raft.Log) error {
	return m.guard(func() error { return m.b.StoreLog(log) })
}

// StoreLogs implements raft.LogStore.
func (m *mappedBolt) StoreLogs(logs []*raft.Log) error {
	return m.guard(func() error { return m.b.StoreLogs(logs) })
}

// DeleteRange implements raft.LogStore.
func (m *mappedBolt) DeleteRange(lo, hi uint64) error {
	return m.guard(func() error { return m.b.DeleteRange(lo, hi) })
}

// Close closes raft.db.
func (m *mappedBolt) Close() error { return m.b.Close() }

// readMetaPages reads the first pages of the bbolt file at path, where its
// meta pages are, and returns an error naming the file if the disk fails
// the read. A file that is not there yet, or shorter, is no error here.
func readMetaPages(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	buf := make([]byte, 2*os.Getpagesize())
	if _, err := f.ReadAt(buf, 0); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}
