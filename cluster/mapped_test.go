package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMappedReadTurnsAFaultIntoAnError: a read of a mapped page the file
// no longer backs faults (SIGBUS), as a read the disk fails does; inside
// mappedRead it is an error naming the file, not a crash.
func TestMappedReadTurnsAFaultIntoAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.db")
	if err := os.WriteFile(path, make([]byte, 2*os.Getpagesize()), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data, err := syscall.Mmap(int(f.Fd()), 0, 2*os.Getpagesize(), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Munmap(data) }()
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	var b byte
	err = mappedRead(path, func() error {
		b = data[os.Getpagesize()]
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("a faulting read: %v (read %d), want an error naming %s", err, b, path)
	}
	if err := mappedRead(path, func() error { return nil }); err != nil {
		t.Fatalf("a read that does not fault: %v", err)
	}
}
