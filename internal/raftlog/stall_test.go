package raftlog

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// holdSyncs holds every fdatasync of a segment until the returned function
// is called.
func holdSyncs(fs *faultFS) (release func()) {
	hold := make(chan struct{})
	fs.set(func(fs *faultFS) { fs.hold = hold })
	return func() {
		fs.set(func(fs *faultFS) { fs.hold = nil })
		close(hold)
	}
}

// stalledWrite runs write while the segments' fdatasyncs are held and
// checks that the store reports it stalled, no sooner than the bound, with
// an error naming the directory; then it releases the write and returns
// its error.
func stalledWrite(t *testing.T, s *Store, fs *faultFS, h *healthLog, dir string, write func() error) error {
	t.Helper()
	_, before := h.last()
	release := holdSyncs(fs)
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- write() }()
	waitFor(t, func() bool { err, _ := h.last(); return errors.Is(err, ErrStalled) })
	if took := time.Since(start); took < s.health.stallAfter {
		t.Errorf("reported stalled after %v, before the bound of %v", took, s.health.stallAfter)
	}
	err, n := h.last()
	if n != before+1 || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), s.health.stallAfter.String()) {
		t.Errorf("stall reported as %v (%d reports), want one naming %s and the bound", err, n-before, dir)
	}
	if !errors.Is(s.Err(), ErrStalled) {
		t.Errorf("Err() during the stall: %v", s.Err())
	}
	select {
	case err := <-done:
		t.Fatalf("the held write returned: %v", err)
	default:
	}
	release()
	return <-done
}

// TestStalledWriteIsReported: an append or a deletion whose fdatasync does
// not return within the bound is reported stalled once, never before the
// bound, and the report ends with the write's own outcome: nothing once it
// succeeds (the entries are there), the poisoning when its sync fails.
// Writes within the bound report nothing.
func TestStalledWriteIsReported(t *testing.T) {
	dir := t.TempDir()
	s, fs, h := openFaultyWith(t, dir, Options{StallAfter: 500 * time.Millisecond})
	for i := uint64(1); i <= 20; i += 5 {
		must(t, s.StoreLogs(entries(i, i+4)))
	}
	if err, n := h.last(); n != 0 {
		t.Fatalf("writes within the bound reported %v", err)
	}

	if err := stalledWrite(t, s, fs, h, dir, func() error { return s.StoreLogs(entries(21, 25)) }); err != nil {
		t.Fatalf("the stalled append, released: %v", err)
	}
	if err, n := h.last(); err != nil || n != 2 || s.Err() != nil {
		t.Fatalf("after the stalled append returned: report %v (%d reports), Err() %v", err, n, s.Err())
	}
	checkRange(t, s, 1, 25)

	if err := stalledWrite(t, s, fs, h, dir, func() error { return s.DeleteRange(23, 25) }); err != nil {
		t.Fatalf("the stalled deletion, released: %v", err)
	}
	if err, _ := h.last(); err != nil || s.Err() != nil {
		t.Fatalf("after the stalled deletion returned: report %v, Err() %v", err, s.Err())
	}
	checkRange(t, s, 1, 22)

	fs.set(func(fs *faultFS) { fs.sync = syscall.EIO })
	if err := stalledWrite(t, s, fs, h, dir, func() error { return s.StoreLogs(entries(23, 24)) }); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("a stalled append whose sync fails: %v, want ErrPoisoned", err)
	}
	if err, _ := h.last(); !errors.Is(err, ErrPoisoned) || errors.Is(err, ErrStalled) {
		t.Fatalf("report after a stalled sync failed: %v, want the poisoning", err)
	}
}

// TestStallReportsFollowTheWrites: a write that returns while its stall is
// still being reported (the receiver logs, takes locks) has its end
// reported after the stall, never before it, so the last report says the
// store writes again.
func TestStallReportsFollowTheWrites(t *testing.T) {
	var (
		h         healthLog
		stalled   = make(chan struct{})
		cleared   = make(chan struct{})
		clearOnce sync.Once
	)
	fs := &faultFS{}
	s, err := Open(t.TempDir(), Options{StallAfter: 50 * time.Millisecond, fs: fs, Health: func(err error) {
		if errors.Is(err, ErrStalled) {
			close(stalled)
			// Still delivering the stall when the write returns: the end
			// must wait for it (or this wait times out and the order is
			// right all the same).
			select {
			case <-cleared:
			case <-time.After(300 * time.Millisecond):
			}
		} else if err == nil {
			clearOnce.Do(func() { close(cleared) })
		}
		h.report(err)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	release := holdSyncs(fs)
	done := make(chan error, 1)
	go func() { done <- s.StoreLogs(entries(1, 2)) }()
	<-stalled
	release()
	must(t, <-done)
	if err, n := h.last(); err != nil || n != 2 || s.Err() != nil {
		t.Fatalf("last of %d reports: %v (Err() %v), want the stall, then nil", n, err, s.Err())
	}
}
