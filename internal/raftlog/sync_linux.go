package raftlog

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// fdatasync flushes f's data and the metadata needed to read it back.
func fdatasync(f *os.File) error {
	return withFD(f, syscall.Fdatasync)
}

// withFD runs call on f's descriptor, again while it is interrupted.
func withFD(f *os.File, call func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("raw file: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = retryInterrupted(func() error { return call(int(fd)) }) }); err != nil {
		return fmt.Errorf("raw file: %w", err)
	}
	return serr
}

// retryInterrupted calls call until it ends other than with EINTR. On a
// local disk fdatasync is never interrupted, but on a network or FUSE file
// system a signal (the Go runtime sends them to its own threads) can end
// it with EINTR before it did anything: a failed sync that was not one.
// os.File.Sync retries the same way.
func retryInterrupted(call func() error) error {
	for {
		if err := call(); !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// WriteOut starts the write-out of n bytes of f's data from off (n 0: to
// the file's end) to the disk and waits for it (sync_file_range), without
// the file's metadata or the disk's cache: called every MiB or so, it
// paces a large write so that no fdatasync of another file (the log's) has
// much of it to wait for. It makes nothing durable.
func WriteOut(f *os.File, off, n int64) error {
	const how = 1 | 2 | 4 // SYNC_FILE_RANGE_WAIT_BEFORE | _WRITE | _WAIT_AFTER
	return withFD(f, func(fd int) error { return syscall.SyncFileRange(fd, off, n, how) })
}

// freeSpace is the space available to an unprivileged writer in dir's
// file system.
func freeSpace(dir string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
