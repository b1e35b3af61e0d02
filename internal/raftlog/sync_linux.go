package raftlog

import (
	"fmt"
	"os"
	"syscall"
)

// fdatasync flushes f's data and the metadata needed to read it back.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("raw file: %w", err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.Fdatasync(int(fd)) }); err != nil {
		return fmt.Errorf("raw file: %w", err)
	}
	return serr
}
