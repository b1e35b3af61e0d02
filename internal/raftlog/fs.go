package raftlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/holdfast/holdfast/internal/atomicfile"
)

// segFile is what the store does with an open segment file.
type segFile interface {
	io.ReaderAt
	io.WriterAt
	// Datasync makes the file's written data durable (fdatasync).
	Datasync() error
	// WriteOut writes n bytes from off out to the disk and waits for
	// them, without making them durable (see WriteOut).
	WriteOut(off, n int64) error
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Size is the file's current size.
	Size() (int64, error)
	Close() error
	Name() string
}

// fileSystem is the store's access to its directory. The store uses the
// real one; tests substitute one that fails on demand.
type fileSystem interface {
	OpenFile(path string, flag int) (segFile, error)
	Remove(path string) error
	Rename(from, to string) error
	// SyncDir makes the creation, renaming or removal of files in dir durable.
	SyncDir(dir string) error
	// Free is the space available to the process in dir's file system, in
	// bytes, or -1 where it cannot be known.
	Free(dir string) (int64, error)
}

// osFS is the operating system's file system.
type osFS struct{}

// osFile is an *os.File with fdatasync.
type osFile struct{ *os.File }

func (f osFile) Datasync() error { return fdatasync(f.File) }

func (f osFile) WriteOut(off, n int64) error { return WriteOut(f.File, off, n) }

func (f osFile) Size() (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (osFS) OpenFile(path string, flag int) (segFile, error) {
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

func (osFS) Remove(path string) error       { return os.Remove(path) }
func (osFS) Rename(from, to string) error   { return os.Rename(from, to) }
func (osFS) Free(dir string) (int64, error) { return freeSpace(dir) }

func (osFS) SyncDir(dir string) error { return atomicfile.SyncDir(dir) }

// ErrNoSpace is wrapped by the errors of writes that failed because the
// file system is full (ENOSPC) or the user's quota is used up (EDQUOT).
var ErrNoSpace = errors.New("no space left for the Raft log")

// ErrStorage is wrapped by the errors of writes that failed for another
// reason than a lack of space (EIO, EROFS, ...).
var ErrStorage = errors.New("the Raft log could not be written")

// ErrPoisoned is wrapped by every error of a store after a failure that
// can leave what is on disk different from what the store holds in memory:
// a failed fdatasync (whose unwritten pages the kernel may have dropped),
// a failed deletion of a log suffix, or a failed undo of a failed write.
// Such a store refuses every further write and read; the process must
// stop, and the log is checked again when it starts.
var ErrPoisoned = errors.New("raftlog: the store failed in a way that can leave disk and memory disagreeing; stop the node and start it again")

// ErrCorrupt is wrapped by the errors of Open for a log that is damaged in
// a way a crash cannot explain: a bad record that is not a torn final
// append, a missing or truncated segment. The node must not start on it.
var ErrCorrupt = errors.New("raftlog: corrupt log")

// classify wraps err, the failure of a write, with ErrNoSpace or ErrStorage.
func classify(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return fmt.Errorf("%w: %w", ErrStorage, err)
}
