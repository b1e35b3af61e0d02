package raftlog

import (
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// faultFS is the real file system with failures switched on by tests.
type faultFS struct {
	osFS
	mu         sync.Mutex
	write      error // WriteAt of records to a segment fails with it
	shortWrite bool  // a failing WriteAt first writes half its bytes
	undo       error // writing zeros to a segment, or truncating it, fails with it
	sync       error // Datasync of a segment fails with it
	remove     error // Remove of a segment fails with it
	free       int64 // what Free reports; 0 means the real value
	// hold, while set, holds every Datasync of a segment until it is
	// closed, then lets the sync go on (and fail with sync if set).
	hold chan struct{}
}

func (fs *faultFS) set(f func(fs *faultFS)) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f(fs)
}

func (fs *faultFS) get() faultFS {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return faultFS{write: fs.write, shortWrite: fs.shortWrite, undo: fs.undo, sync: fs.sync, remove: fs.remove, free: fs.free, hold: fs.hold}
}

func (fs *faultFS) OpenFile(path string, flag int) (segFile, error) {
	f, err := fs.osFS.OpenFile(path, flag)
	if err != nil || !strings.HasSuffix(path, segmentSuffix) {
		return f, err
	}
	return faultFile{segFile: f, fs: fs}, nil
}

func (fs *faultFS) Remove(path string) error {
	if err := fs.get().remove; err != nil && strings.HasSuffix(path, segmentSuffix) {
		return err
	}
	return fs.osFS.Remove(path)
}

func (fs *faultFS) Free(dir string) (int64, error) {
	if f := fs.get().free; f != 0 {
		return f, nil
	}
	return fs.osFS.Free(dir)
}

type faultFile struct {
	segFile
	fs *faultFS
}

func (f faultFile) WriteAt(b []byte, off int64) (int, error) {
	c := f.fs.get()
	if allZero(b) && c.undo != nil {
		return 0, c.undo
	}
	if c.write == nil || allZero(b) {
		return f.segFile.WriteAt(b, off)
	}
	if c.shortWrite {
		n, _ := f.segFile.WriteAt(b[:len(b)/2], off)
		return n, c.write
	}
	return 0, c.write
}

func (f faultFile) Datasync() error {
	if hold := f.fs.get().hold; hold != nil {
		<-hold
	}
	if err := f.fs.get().sync; err != nil {
		return err
	}
	return f.segFile.Datasync()
}

func (f faultFile) Truncate(size int64) error {
	if err := f.fs.get().undo; err != nil {
		return err
	}
	return f.segFile.Truncate(size)
}

// healthLog records what the store reports through Options.Health.
type healthLog struct {
	mu   sync.Mutex
	seen []error
}

func (h *healthLog) report(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, err)
}

func (h *healthLog) last() (error, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) == 0 {
		return nil, 0
	}
	return h.seen[len(h.seen)-1], len(h.seen)
}

func openFaulty(t *testing.T, dir string, seg int64) (*Store, *faultFS, *healthLog) {
	t.Helper()
	return openFaultyWith(t, dir, Options{SegmentSize: seg})
}

// openFaultyWith opens a store with opts over a faultFS, recording its
// health reports.
func openFaultyWith(t *testing.T, dir string, opts Options) (*Store, *faultFS, *healthLog) {
	t.Helper()
	return openOn(t, dir, opts, &faultFS{})
}

// openOn opens a store with opts over fs, as it is set up before the
// store's first look at it, recording its health reports.
func openOn(t *testing.T, dir string, opts Options, fs *faultFS) (*Store, *faultFS, *healthLog) {
	t.Helper()
	h := &healthLog{}
	opts.fs, opts.Health, opts.Manifest = fs, h.report, &memManifest{}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, fs, h
}

// TestFailedWriteIsUndone: an append that fails to write (ENOSPC, even
// after writing part of its bytes) leaves nothing behind, reports the
// condition once, and the store takes the same entries once the disk
// writes again.
func TestFailedWriteIsUndone(t *testing.T) {
	for name, free := range map[string]int64{"preallocated segment": 0, "growing segment": 1000} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			// The free space is set before the open, so the store's first
			// preparation of a segment already meets it.
			s, fs, h := openOn(t, dir, Options{}, &faultFS{free: free})
			if free != 0 {
				// No room for a zero-filled segment: the first one grows.
				waitFor(t, func() bool { return errors.Is(s.Err(), ErrNoSpace) })
			}
			must(t, s.StoreLogs(entries(1, 5)))
			if grows := s.segs[0].fileSize == 0; grows != (free != 0) {
				t.Fatalf("segment file size %d", s.segs[0].fileSize)
			}
			_, before := h.last()
			fs.set(func(fs *faultFS) { fs.write, fs.shortWrite = syscall.ENOSPC, true })
			for range 3 {
				err := s.StoreLogs(entries(6, 10))
				if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrPoisoned) {
					t.Fatalf("append on a full disk: %v, want ErrNoSpace", err)
				}
			}
			if err, n := h.last(); !errors.Is(err, ErrNoSpace) || (free == 0 && n != before+1) {
				t.Fatalf("health %v after %d reports, want one ErrNoSpace report", err, n-before)
			}
			if !errors.Is(s.Err(), ErrNoSpace) {
				t.Fatalf("Err() = %v", s.Err())
			}
			checkRange(t, s, 1, 5)
			fs.set(func(fs *faultFS) { fs.write, fs.free = nil, 0 })
			// Once the disk has room, the condition ends without an append:
			// a node out of elections may have nobody to append for it.
			waitFor(t, func() bool { err, _ := h.last(); return err == nil && s.Err() == nil })
			must(t, s.StoreLogs(entries(6, 10)))
			_ = s.Close()
			checkRange(t, open(t, dir, 0), 1, 10)
		})
	}
}

// TestFailedSyncPoisons: after a failed fdatasync the store refuses every
// write, and a failed undo of a failed write does too.
func TestFailedSyncPoisons(t *testing.T) {
	for name, fault := range map[string]func(fs *faultFS){
		"fdatasync fails": func(fs *faultFS) { fs.sync = syscall.EIO },
		"undo fails":      func(fs *faultFS) { fs.write, fs.undo = syscall.EIO, syscall.EIO },
	} {
		t.Run(name, func(t *testing.T) {
			s, fs, h := openFaulty(t, t.TempDir(), 0)
			must(t, s.StoreLogs(entries(1, 5)))
			fs.set(fault)
			if err := s.StoreLogs(entries(6, 10)); err == nil {
				t.Fatal("append accepted")
			} else if name == "fdatasync fails" && !errors.Is(err, ErrPoisoned) {
				t.Fatalf("append: %v, want ErrPoisoned", err)
			}
			if name == "undo fails" {
				// The write failed and so does zeroing it (the same fault):
				// what is on disk is unknown.
				if !errors.Is(s.Err(), ErrPoisoned) {
					t.Fatalf("Err() = %v, want ErrPoisoned", s.Err())
				}
			}
			fs.set(func(fs *faultFS) { fs.write, fs.sync, fs.undo = nil, nil, nil })
			if err := s.StoreLogs(entries(6, 10)); !errors.Is(err, ErrPoisoned) {
				t.Fatalf("append after poisoning: %v, want ErrPoisoned", err)
			}
			if err := s.DeleteRange(1, 2); !errors.Is(err, ErrPoisoned) {
				t.Fatalf("delete after poisoning: %v, want ErrPoisoned", err)
			}
			if err, _ := h.last(); !errors.Is(err, ErrPoisoned) {
				t.Fatalf("health %v, want ErrPoisoned", err)
			}
		})
	}
}

// TestFailedSuffixDeletePoisons: a deletion of a log suffix that fails
// poisons the store (the entries it keeps would come back at a restart);
// a failed deletion of a prefix does not.
func TestFailedSuffixDeletePoisons(t *testing.T) {
	s, fs, _ := openFaulty(t, t.TempDir(), 512)
	for i := uint64(1); i <= 60; i += 5 {
		must(t, s.StoreLogs(entries(i, i+4)))
	}
	fs.set(func(fs *faultFS) { fs.remove = syscall.EIO })
	if err := s.DeleteRange(1, 20); err == nil || errors.Is(err, ErrPoisoned) {
		t.Fatalf("failed prefix deletion: %v, want an error that does not poison", err)
	}
	must(t, s.StoreLogs(entries(61, 62)))
	if err := s.DeleteRange(30, 62); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("failed suffix deletion: %v, want ErrPoisoned", err)
	}
	if err := s.StoreLogs(entries(30, 31)); !errors.Is(err, ErrPoisoned) {
		t.Fatalf("append after a failed suffix deletion: %v", err)
	}
}

// TestNextSegmentLeavesRoom: the next segment is not prepared while the
// disk has less than two segments free; the store says so, appends go to a
// growing file meanwhile, and the condition ends by itself once space
// returns.
func TestNextSegmentLeavesRoom(t *testing.T) {
	dir := t.TempDir()
	fs := &faultFS{free: 1000}
	h := &healthLog{}
	s, err := Open(dir, Options{SegmentSize: 600, fs: fs, Health: h.report})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitFor(t, func() bool { err, _ := h.last(); return errors.Is(err, ErrNoSpace) })
	if _, err := os.Stat(dir + "/" + spareName); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a spare segment was made without room for it: %v", err)
	}
	for i := uint64(1); i <= 100; i += 5 {
		must(t, s.StoreLogs(entries(i, i+4)))
	}
	checkRange(t, s, 1, 100)
	fs.set(func(fs *faultFS) { fs.free = 1 << 30 })
	waitFor(t, func() bool { err, _ := h.last(); return err == nil && s.Err() == nil })
	if st, err := os.Stat(dir + "/" + spareName); err != nil || st.Size() != 600 {
		t.Fatalf("spare after space returned: %v", err)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var _ raft.LogStore = (*Store)(nil)
