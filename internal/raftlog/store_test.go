package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func entry(i uint64) *raft.Log {
	return &raft.Log{
		Index:      i,
		Term:       1 + i/10,
		Type:       raft.LogCommand,
		Data:       []byte(fmt.Sprintf("entry-%d", i)),
		Extensions: []byte{byte(i)},
		AppendedAt: time.Unix(1700000000, int64(i)),
	}
}

func entries(from, to uint64) []*raft.Log {
	var ls []*raft.Log
	for i := from; i <= to; i++ {
		ls = append(ls, entry(i))
	}
	return ls
}

func open(t *testing.T, dir string, seg int64) *Store {
	t.Helper()
	s, err := Open(dir, Options{SegmentSize: seg})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// checkRange asserts the store's bounds and that every entry in them reads
// back as written, and nothing outside them does.
func checkRange(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	f, _ := s.FirstIndex()
	l, _ := s.LastIndex()
	if f != first || l != last {
		t.Fatalf("range %d-%d, want %d-%d", f, l, first, last)
	}
	for i := first; i <= last && first != 0; i++ {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("get %d: %v", i, err)
		}
		want := entry(i)
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
			!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) ||
			!got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("entry %d read back as %+v, want %+v", i, got, *want)
		}
	}
	var l2 raft.Log
	for _, i := range []uint64{first - 1, last + 1} {
		if i == 0 {
			continue
		}
		if err := s.GetLog(i, &l2); !errors.Is(err, raft.ErrLogNotFound) {
			t.Fatalf("get %d outside %d-%d: %v, want not found", i, first, last, err)
		}
	}
}

func TestStoreAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 0)
	checkRange(t, s, 0, 0)
	if err := s.StoreLogs(entries(1, 50)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLog(entry(51)); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 1, 51)
	_ = s.Close()
	checkRange(t, open(t, dir, 0), 1, 51)
}

func TestRefusesGapsAndDisorder(t *testing.T) {
	s := open(t, t.TempDir(), 0)
	if err := s.StoreLogs(entries(5, 9)); err != nil {
		t.Fatalf("an empty log accepts any start: %v", err)
	}
	for name, ls := range map[string][]*raft.Log{
		"overlap":   entries(9, 10),
		"disorder":  {entry(10), entry(12)},
		"index 0":   {{Index: 0}},
		"duplicate": {entry(10), entry(10)},
	} {
		if err := s.StoreLogs(ls); !errors.Is(err, ErrNotContiguous) {
			t.Errorf("%s: %v, want ErrNotContiguous", name, err)
		}
	}
	checkRange(t, s, 5, 9)
}

// TestAppendPastAGapDropsEverythingHeld: Raft appends past a gap only after
// installing a snapshot that covers the entry before it.
func TestAppendPastAGapDropsEverythingHeld(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 200)
	if err := s.StoreLogs(entries(1, 30)); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(entries(50, 55)); err != nil {
		t.Fatalf("append past a gap: %v", err)
	}
	checkRange(t, s, 50, 55)
	_ = s.Close()
	checkRange(t, open(t, dir, 200), 50, 55)
}

func TestSegmentsPrefixAndSuffixDeletion(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 200) // a few entries per segment
	for i := uint64(1); i <= 100; i += 5 {
		if err := s.StoreLogs(entries(i, i+4)); err != nil {
			t.Fatal(err)
		}
	}
	segs := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
		return len(m)
	}
	before := segs()
	if before < 10 {
		t.Fatalf("%d segments for 100 entries at 200 bytes each, want many", before)
	}
	checkRange(t, s, 1, 100)

	if err := s.DeleteRange(1, 42); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 43, 100)
	if segs() >= before {
		t.Fatalf("prefix deletion removed no segment (%d before, %d after)", before, segs())
	}

	if err := s.DeleteRange(77, 100); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 43, 76)
	_ = s.Close()
	s = open(t, dir, 200)
	// After a restart the partly deleted segment's older entries may show
	// again; everything Raft kept is there.
	f, _ := s.FirstIndex()
	if f > 43 || f < 1 {
		t.Fatalf("first index %d after reopen, want at most 43", f)
	}
	checkRange(t, s, f, 76)
	if err := s.StoreLogs(entries(77, 80)); err != nil {
		t.Fatalf("append after truncation: %v", err)
	}
	checkRange(t, s, f, 80)
	if err := s.DeleteRange(50, 60); err == nil {
		t.Fatal("deleting from the middle was accepted")
	}
	checkRange(t, s, f, 80)
	_ = s.Close()
	checkRange(t, open(t, dir, 200), f, 80)
}

func TestDeleteEverythingThenStartAnywhere(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 300)
	if err := s.StoreLogs(entries(1, 30)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 30); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 0, 0)
	if err := s.StoreLogs(entries(1000, 1010)); err != nil {
		t.Fatalf("append after deleting everything: %v", err)
	}
	checkRange(t, s, 1000, 1010)
	_ = s.Close()
	checkRange(t, open(t, dir, 300), 1000, 1010)
}

// newestSegment returns the path of the newest segment file in dir.
func newestSegment(t *testing.T, dir string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if err != nil || len(m) == 0 {
		t.Fatalf("no segments in %s: %v", dir, err)
	}
	return m[len(m)-1]
}

// segmentedLog writes entries 1-40 into small segments and returns the
// directory and its segment files in order.
func segmentedLog(t *testing.T) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	s := open(t, dir, 200)
	for i := uint64(1); i <= 40; i += 4 {
		if err := s.StoreLogs(entries(i, i+3)); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	m, err := filepath.Glob(filepath.Join(dir, "*"+segmentSuffix))
	if err != nil || len(m) < 3 {
		t.Fatalf("segments %v, %v: want several", m, err)
	}
	return dir, m
}

// refusesToOpen asserts that the log in dir does not open.
func refusesToOpen(t *testing.T, dir, what string) {
	t.Helper()
	if s, err := Open(dir, Options{SegmentSize: 200}); err == nil {
		_ = s.Close()
		t.Fatalf("%s was accepted", what)
	}
}

func TestCorruptionBeforeTheTailRefusesToOpen(t *testing.T) {
	dir, segs := segmentedLog(t)
	b, _ := os.ReadFile(segs[0])
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(segs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	refusesToOpen(t, dir, "a corrupt record in an older segment")
}

func TestMissingSegmentRefusesToOpen(t *testing.T) {
	dir, segs := segmentedLog(t)
	if err := os.Remove(segs[len(segs)/2]); err != nil {
		t.Fatal(err)
	}
	refusesToOpen(t, dir, "a log with a missing segment")
}

// TestConcurrentReadsDuringAppendsAndDeletions reads entries while another
// goroutine appends and compacts: every read either succeeds with the right
// entry or reports it gone.
func TestConcurrentReadsDuringAppendsAndDeletions(t *testing.T) {
	s := open(t, t.TempDir(), 500)
	if err := s.StoreLogs(entries(1, 10)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				for i := first; i <= last && first != 0; i++ {
					var l raft.Log
					err := s.GetLog(i, &l)
					if errors.Is(err, raft.ErrLogNotFound) {
						continue
					}
					if err != nil || !bytes.Equal(l.Data, entry(i).Data) {
						errs <- fmt.Errorf("read %d: %v %q", i, err, l.Data)
						return
					}
				}
			}
		}()
	}
	for i := uint64(11); i <= 600; i += 10 {
		if err := s.StoreLogs(entries(i, i+9)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 1 {
			if err := s.DeleteRange(1, i-20); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(done)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

// FuzzOpenTail opens a log whose newest segment holds arbitrary bytes after
// valid records: it must not panic, and either refuse the log as corrupt
// or open it with every valid record, read back whatever it reports and
// take appends.
func FuzzOpenTail(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(appendRecord(nil, entry(4)))
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		var b []byte
		for i := uint64(1); i <= 3; i++ {
			b = appendRecord(b, entry(i))
		}
		if err := os.WriteFile(segmentPath(dir, 1), append(b, tail...), 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{})
		if errors.Is(err, ErrCorrupt) {
			return
		}
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer s.Close()
		last, _ := s.LastIndex()
		if last < 3 {
			t.Fatalf("last %d, lost valid records", last)
		}
		for i := uint64(1); i <= last; i++ {
			var l raft.Log
			if err := s.GetLog(i, &l); err != nil || l.Index != i {
				t.Fatalf("get %d: %v (index %d)", i, err, l.Index)
			}
		}
		if err := s.StoreLogs([]*raft.Log{entry(last + 1)}); err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
	})
}

// FuzzDecodePayload decodes arbitrary payloads without panicking, and a
// payload that decodes encodes back to itself.
func FuzzDecodePayload(f *testing.F) {
	f.Add(appendRecord(nil, entry(7))[headerSize:])
	f.Add([]byte{1, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		var l raft.Log
		if decodePayload(p, &l) != nil {
			return
		}
		// Varints may be written longer than needed and still decode; an
		// encoding of the same length must be the same bytes.
		if again := appendRecord(nil, &l)[headerSize:]; len(again) == len(p) && !bytes.Equal(again, p) {
			t.Fatalf("payload %x decodes to %+v, which encodes to %x", p, l, again)
		}
	})
}

// BenchmarkStoreLogs compares one append of a batch of entries (the way the
// Raft leader writes a group of proposals) with this store and with the
// bolt store: each append is durable when it returns.
func BenchmarkStoreLogs(b *testing.B) {
	batch := func(i uint64) []*raft.Log {
		ls := make([]*raft.Log, 16)
		for k := range ls {
			ls[k] = &raft.Log{Index: i + uint64(k), Term: 1, Type: raft.LogCommand, Data: bytes.Repeat([]byte{'x'}, 300)}
		}
		return ls
	}
	run := func(b *testing.B, s raft.LogStore) {
		b.ReportAllocs()
		next := uint64(1)
		for b.Loop() {
			if err := s.StoreLogs(batch(next)); err != nil {
				b.Fatal(err)
			}
			next += 16
		}
	}
	for name, opts := range map[string]Options{"raftlog": {}, "raftlog-stall-watched": {StallAfter: 2 * time.Second}} {
		b.Run(name, func(b *testing.B) {
			s, err := Open(b.TempDir(), opts)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			run(b, s)
		})
	}
	b.Run("bolt", func(b *testing.B) {
		s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), "raft.db"), MsgpackUseNewTimeFormat: true})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		run(b, s)
	})
}
