package raftlog

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// opLog records, in order, what a store did to its files.
type opLog struct {
	mu  sync.Mutex
	ops []string
	at  []time.Time
}

func (l *opLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, fmt.Sprintf(format, args...))
	l.at = append(l.at, time.Now())
}

func (l *opLog) snapshot() ([]string, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ops), slices.Clone(l.at)
}

// recordingFile is a segment file in memory that records what is done to it.
type recordingFile struct {
	log  *opLog
	data []byte
}

func (f *recordingFile) ReadAt(b []byte, off int64) (int, error) {
	return copy(b, f.data[off:]), nil
}

func (f *recordingFile) WriteAt(b []byte, off int64) (int, error) {
	f.log.add("write %d+%d", off, len(b))
	if end := off + int64(len(b)); end > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
	}
	return copy(f.data[off:], b), nil
}

func (f *recordingFile) WriteOut(off, n int64) error {
	f.log.add("out %d+%d", off, n)
	return nil
}

func (f *recordingFile) Datasync() error {
	f.log.add("sync")
	return nil
}

func (f *recordingFile) Truncate(size int64) error {
	f.data = f.data[:min(int64(len(f.data)), size)]
	return nil
}

func (f *recordingFile) Size() (int64, error) { return int64(len(f.data)), nil }
func (f *recordingFile) Close() error         { return nil }
func (f *recordingFile) Name() string         { return "recording" }

// TestFillWritesEachChunkOutBeforeTheNext checks that a spare is written a
// chunk at a time, each chunk out to the disk and a pause taken before the
// next, and synced at the end: never a segment's worth of data queued for
// the disk at once, for the log's fdatasync to wait behind.
func TestFillWritesEachChunkOutBeforeTheNext(t *testing.T) {
	log := &opLog{}
	f := &recordingFile{log: log}
	size := int64(3*fillChunk + fillChunk/2)
	if err := fill(f, size, make(chan struct{}), fillPause, nil); err != nil {
		t.Fatal(err)
	}
	var want []string
	for off := int64(0); off < size; off += fillChunk {
		n := min(int64(fillChunk), size-off)
		want = append(want, fmt.Sprintf("write %d+%d", off, n), fmt.Sprintf("out %d+%d", off, n))
	}
	want = append(want, "sync")
	ops, at := log.snapshot()
	if !slices.Equal(ops, want) {
		t.Fatalf("fill did\n%q\nwant\n%q", ops, want)
	}
	for i := 2; i < len(ops)-1; i += 2 {
		if gap := at[i].Sub(at[i-1]); gap < fillPause {
			t.Errorf("%s came %v after the chunk before it was written out, want at least %v", ops[i], gap, fillPause)
		}
	}
	if int64(len(f.data)) != size || !allZero(f.data) {
		t.Errorf("the spare holds %d bytes (all zero: %v), want %d zeros", len(f.data), allZero(f.data), size)
	}
}

// TestFillRushedTakesNoMoreRests checks that once rush is closed the rest
// of a spare is written without the rests between chunks: with an hour's
// rest, fill returns only if it stops resting.
func TestFillRushedTakesNoMoreRests(t *testing.T) {
	log := &opLog{}
	f := &recordingFile{log: log}
	stop, rush := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- fill(f, 4*fillChunk, stop, time.Hour, rush) }()
	first := fmt.Sprintf("out 0+%d", fillChunk)
	for i := 0; i < 1000; i++ {
		if ops, _ := log.snapshot(); slices.Contains(ops, first) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ops, _ := log.snapshot(); len(ops) != 2 {
		t.Fatalf("before the rush fill did %q, want the first chunk alone", ops)
	}
	close(rush)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		close(stop)
		<-done
		t.Fatal("fill kept resting after it was rushed")
	}
	if ops, _ := log.snapshot(); len(ops) != 9 || int64(len(f.data)) != 4*fillChunk {
		t.Errorf("fill did %q and wrote %d bytes, want 4 chunks and a sync", ops, len(f.data))
	}
}

// TestAnAppendWaitingForTheSpareRushesIt checks that an append that needs
// the next segment while its spare is being written does not wait for the
// spare's rests: it waits only for the writing.
func TestAnAppendWaitingForTheSpareRushesIt(t *testing.T) {
	s, err := Open(t.TempDir(), Options{SegmentSize: 8 * fillChunk, fillPause: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	storeWithin10s(t, s, entry(1), "the first append waited for the spare's rests")
	checkRange(t, s, 1, 1)
	if s.segs[0].fileSize != 8*fillChunk {
		t.Errorf("the first segment is %d bytes, want the %d-byte spare", s.segs[0].fileSize, 8*fillChunk)
	}
}

// TestFillStopsWhenTheStoreCloses checks that a closing store does not wait
// for a spare to be written to its end.
func TestFillStopsWhenTheStoreCloses(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	f := &recordingFile{log: &opLog{}}
	if err := fill(f, 4*fillChunk, stop, fillPause, nil); err != errClosed {
		t.Fatalf("fill after close = %v, want errClosed", err)
	}
}

// orderFS is the real file system, recording directory syncs (made slow,
// so that anything running beside one shows) and the opening of the spare.
type orderFS struct {
	osFS
	log *opLog
}

func (fs orderFS) SyncDir(dir string) error {
	fs.log.add("sync dir")
	time.Sleep(20 * time.Millisecond)
	return fs.osFS.SyncDir(dir)
}

func (fs orderFS) OpenFile(path string, flag int) (segFile, error) {
	if filepath.Base(path) == spareName {
		fs.log.add("open spare")
	}
	return fs.osFS.OpenFile(path, flag)
}

// orderManifest records its saves in the same log.
type orderManifest struct {
	memManifest
	log *opLog
}

func (m *orderManifest) Save(b []byte) error {
	m.log.add("save manifest")
	return m.memManifest.Save(b)
}

// TestARollPreparesTheNextSpareAfterItsOwnSyncs checks that when the log
// moves to a new segment, the next spare is written only after the roll's
// sync of the directory and its save of the segment list: a spare being
// written beside them would make the roll, and every append behind it,
// wait for its data.
func TestARollPreparesTheNextSpareAfterItsOwnSyncs(t *testing.T) {
	log := &opLog{}
	dir := t.TempDir()
	s, err := Open(dir, Options{SegmentSize: 512, fs: orderFS{log: log}, Manifest: &orderManifest{log: log}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rolls := 0
	for i := uint64(1); rolls < 3 && i < 1000; i += 5 {
		before := len(s.segs)
		if err := s.StoreLogs(entries(i, i+4)); err != nil {
			t.Fatal(err)
		}
		if len(s.segs) != before {
			rolls++
		}
	}
	if rolls < 3 {
		t.Fatalf("the log rolled %d times, want 3", rolls)
	}
	// Wait for the last roll's spare, so that its opening is in the log.
	if _, err := s.spare.take(filepath.Join(dir, "taken")); err != nil {
		t.Fatal(err)
	}
	ops, _ := log.snapshot()
	// The first spare is made when the store opens; each roll after it
	// syncs the directory, saves the list and only then opens the next.
	first := slices.Index(ops, "sync dir")
	if first < 0 {
		t.Fatalf("no directory sync in %q", ops)
	}
	seen := 0
	for i := first; i < len(ops); i++ {
		if ops[i] != "sync dir" {
			continue
		}
		seen++
		if i+2 >= len(ops) || ops[i+1] != "save manifest" || ops[i+2] != "open spare" {
			t.Fatalf("a roll did %q, want sync dir, save manifest, open spare (all: %q)", ops[i:min(i+3, len(ops))], ops)
		}
	}
	if seen != rolls {
		t.Errorf("%d directory syncs for %d rolls: %q", seen, rolls, ops)
	}
}

// TestALargeAppendDoesNotWaitForTheLog checks that an append too large for
// the segment in use, made while that segment is far from full, gets its
// new segment: the spare it waits for must never wait, in turn, for
// appends that the waiting one holds back.
func TestALargeAppendDoesNotWaitForTheLog(t *testing.T) {
	s := open(t, t.TempDir(), 4*fillChunk)
	small := entry(1)
	small.Data = make([]byte, fillChunk/2)
	must(t, s.StoreLogs([]*raft.Log{small}))
	big := entry(2)
	big.Data = make([]byte, 4*fillChunk-fillChunk/4)
	storeWithin10s(t, s, big, "an append starting a new segment while the one in use is an eighth full did not return in 10s")
	if len(s.segs) != 2 {
		t.Fatalf("%d segments, want 2", len(s.segs))
	}
}

// storeWithin10s appends l and fails the test with stuck if the append has
// not returned within 10 s; the spare is then stopped so that the stuck
// append, and then the store's Close, return.
func storeWithin10s(t *testing.T, s *Store, l *raft.Log, stuck string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.StoreLogs([]*raft.Log{l}) }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		s.spare.close()
		<-done
		t.Fatal(stuck)
	}
}
