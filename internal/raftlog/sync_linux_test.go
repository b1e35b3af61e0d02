package raftlog

import (
	"errors"
	"syscall"
	"testing"
)

func TestRetryInterrupted(t *testing.T) {
	calls := 0
	err := retryInterrupted(func() error {
		calls++
		if calls < 3 {
			return syscall.EINTR
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("after two interrupts: %v in %d calls, want nil in 3", err, calls)
	}
	calls = 0
	if err := retryInterrupted(func() error { calls++; return syscall.EIO }); !errors.Is(err, syscall.EIO) || calls != 1 {
		t.Fatalf("EIO: %v in %d calls, want EIO at once", err, calls)
	}
}
