package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// sizedEntry is an entry whose data is size bytes, with or without
// extensions (Raft's own entries have none, so their records end in a
// zero byte).
func sizedEntry(i uint64, size int, ext bool) *raft.Log {
	l := &raft.Log{Index: i, Term: 3, Type: raft.LogCommand, AppendedAt: time.Unix(1700000000, int64(i)),
		Data: bytes.Repeat([]byte{byte('a' + i%26)}, size)}
	if ext {
		l.Extensions = []byte{byte(i), 7}
	}
	return l
}

// damageLog writes three appends to a fresh store (entries 1-5, 6-10, then
// 11-20 of varied sizes, the last crossing several sectors) and returns the
// directory, the newest segment's path, and the offsets of every record
// plus the end of the last.
func damageLog(t *testing.T, ext bool) (dir, path string, offs []int64) {
	t.Helper()
	dir = t.TempDir()
	s := open(t, dir, 0)
	var batches [][]*raft.Log
	for _, r := range [][2]uint64{{1, 5}, {6, 10}, {11, 20}} {
		var b []*raft.Log
		for i := r[0]; i <= r[1]; i++ {
			b = append(b, sizedEntry(i, 60+int(i*37)%300, ext))
		}
		batches = append(batches, b)
	}
	for _, b := range batches {
		if err := s.StoreLogs(b); err != nil {
			t.Fatal(err)
		}
	}
	g := s.segs[len(s.segs)-1]
	offs = append(slices.Clone(g.offs), g.size)
	_ = s.Close()
	// Keep the written records and some zeros after them: the tests copy
	// and reopen this file thousands of times.
	path = newestSegment(t, dir)
	must(t, os.Truncate(path, (g.size/4096+2)*4096))
	return dir, path, offs
}

func rewrite(t *testing.T, path string, change func(b []byte)) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	change(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTornTailAtEverySectorBoundary zeroes the last append from each
// 512-byte boundary inside it to its end, as a crash during its fdatasync
// can leave it: the store opens with every record before the tear, warns,
// and takes appends again.
func TestTornTailAtEverySectorBoundary(t *testing.T) {
	for _, ext := range []bool{true, false} {
		dir0, path0, offs := damageLog(t, ext)
		orig, err := os.ReadFile(path0)
		if err != nil {
			t.Fatal(err)
		}
		start, end := offs[10], offs[len(offs)-1] // the last append: entries 11-20
		cuts := []int64{start}                    // the whole append lost: a clean end
		for b := (start/sectorSize + 1) * sectorSize; b < end; b += sectorSize {
			cuts = append(cuts, b)
		}
		if len(cuts) < 4 {
			t.Fatalf("the last append spans too few sectors: %d-%d", start, end)
		}
		_ = dir0
		for _, cut := range cuts {
			t.Run(fmt.Sprintf("ext=%v/cut=%d", ext, cut), func(t *testing.T) {
				dir := t.TempDir()
				torn := slices.Clone(orig)
				clear(torn[cut:end])
				path := segmentPath(dir, 1)
				if err := os.WriteFile(path, torn, 0o600); err != nil {
					t.Fatal(err)
				}
				var warned bool
				s, err := Open(dir, Options{Warn: func(string, ...any) { warned = true }})
				if err != nil {
					t.Fatalf("open after a torn append: %v", err)
				}
				defer s.Close()
				want := uint64(0)
				for i, o := range offs[1:] {
					if o <= cut {
						want = uint64(i + 1)
					}
				}
				last, _ := s.LastIndex()
				if last != want {
					t.Fatalf("last %d, want %d", last, want)
				}
				if clean := cut == start || offs[want] == cut; warned == clean {
					t.Fatalf("warned %v, want %v", warned, !clean)
				}
				if err := s.StoreLogs([]*raft.Log{sizedEntry(want+1, 10, ext)}); err != nil {
					t.Fatalf("append after recovery: %v", err)
				}
				_ = s.Close()
				s2, err := Open(dir, Options{})
				if err != nil {
					t.Fatalf("reopen: %v", err)
				}
				defer s2.Close()
				if l, _ := s2.LastIndex(); l != want+1 {
					t.Fatalf("after reopening: last %d, want %d", l, want+1)
				}
			})
		}
	}
}

// recordFields names the byte ranges of the fields of the record at off
// (header, then payload fields), for messages.
func fieldAt(rec []byte, pos int) string {
	if pos < 4 {
		return "length"
	}
	if pos < headerSize {
		return "checksum"
	}
	p := rec[headerSize:]
	i := pos - headerSize
	names := []string{"index", "term"}
	at := 0
	for _, n := range names {
		_, k := uvarintLen(p[at:])
		if i < at+k {
			return n
		}
		at += k
	}
	if i == at {
		return "type"
	}
	at++
	_, k := uvarintLen(p[at:])
	if i < at+k {
		return "append time"
	}
	at += k
	d, k := uvarintLen(p[at:])
	if i < at+k {
		return "data length"
	}
	at += k
	if i < at+int(d) {
		return "data"
	}
	at += int(d)
	_, k = uvarintLen(p[at:])
	if i < at+k {
		return "extensions length"
	}
	return "extensions"
}

func uvarintLen(b []byte) (uint64, int) {
	var v uint64
	for i, c := range b {
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return v, len(b)
}

// TestBitFlipsAreRefused flips every bit, one at a time, of a record in the
// middle of the newest segment and of its last record: each is damage to an
// acknowledged record, never a torn append, so the store refuses to open,
// names the file, the offset and the entry, and leaves the file as it is.
func TestBitFlipsAreRefused(t *testing.T) {
	for _, ext := range []bool{true, false} {
		_, path0, offs := damageLog(t, ext)
		orig, err := os.ReadFile(path0)
		if err != nil {
			t.Fatal(err)
		}
		for _, which := range []int{7, 19} { // entry 8 (mid-segment), entry 20 (the last)
			from, to := offs[which], offs[which+1]
			rec := orig[from:to]
			fields := map[string]int{}
			for pos := range rec {
				for bit := range 8 {
					dir := t.TempDir()
					path := segmentPath(dir, 1)
					damaged := slices.Clone(orig)
					damaged[from+int64(pos)] ^= 1 << bit
					if err := os.WriteFile(path, damaged, 0o600); err != nil {
						t.Fatal(err)
					}
					s, err := Open(dir, Options{})
					if err == nil {
						_ = s.Close()
						t.Fatalf("ext=%v entry %d: a flip of bit %d at byte %d (%s) was accepted", ext, which+1, bit, pos, fieldAt(rec, pos))
					}
					msg := err.Error()
					if !errors.Is(err, ErrCorrupt) || !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprintf("offset %d", from)) ||
						!strings.Contains(msg, fmt.Sprintf("entry %d", which+1)) {
						t.Fatalf("ext=%v entry %d, bit %d at byte %d (%s): %v", ext, which+1, bit, pos, fieldAt(rec, pos), err)
					}
					after, _ := os.ReadFile(path)
					if !bytes.Equal(after, damaged) {
						t.Fatalf("the refused file was changed")
					}
					fields[fieldAt(rec, pos)]++
				}
			}
			if len(fields) < 9 {
				t.Fatalf("only the fields %v were flipped", fields)
			}
		}
	}
}

// TestOtherDamageIsRefused covers damage that is not one flipped bit.
func TestOtherDamageIsRefused(t *testing.T) {
	_, path0, offs := damageLog(t, false)
	orig, err := os.ReadFile(path0)
	if err != nil {
		t.Fatal(err)
	}
	end := offs[len(offs)-1]
	for name, damage := range map[string]func(b []byte){
		// A zeroed sector with acknowledged records after it.
		"zeroed sector mid-segment": func(b []byte) { clear(b[offs[3]/sectorSize*sectorSize : offs[3]/sectorSize*sectorSize+sectorSize]) },
		"zeroed record header":      func(b []byte) { clear(b[offs[12] : offs[12]+headerSize]) },
		"garbage after the records": func(b []byte) { copy(b[end:], bytes.Repeat([]byte{0xa5}, 40)) },
		"byte overwritten 2 KB before the end": func(b []byte) {
			b[end-2048] ^= 0x5a
		},
		"valid record of another entry": func(b []byte) {
			copy(b[offs[19]:], appendRecord(nil, sizedEntry(40, int(offs[20]-offs[19])-headerSize-12, false)))
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := segmentPath(dir, 1)
			b := slices.Clone(orig)
			damage(b)
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if s, err := Open(dir, Options{}); !errors.Is(err, ErrCorrupt) {
				if s != nil {
					_ = s.Close()
				}
				t.Fatalf("open: %v, want corruption", err)
			}
		})
	}
}

// memManifest is a Manifest in memory.
type memManifest struct{ b []byte }

func (m *memManifest) Load() ([]byte, error) { return slices.Clone(m.b), nil }
func (m *memManifest) Save(b []byte) error   { m.b = slices.Clone(b); return nil }

// TestLostSegmentsAreRefused deletes and truncates segments of a log whose
// segment list is recorded: the store refuses to open rather than start with
// less than it acknowledged.
func TestLostSegmentsAreRefused(t *testing.T) {
	build := func(t *testing.T) (string, *memManifest, []string) {
		dir := t.TempDir()
		m := &memManifest{}
		s, err := Open(dir, Options{SegmentSize: 512, Manifest: m})
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(1); i <= 60; i += 5 {
			if err := s.StoreLogs(entries(i, i+4)); err != nil {
				t.Fatal(err)
			}
		}
		_ = s.Close()
		segs, _ := listSegments(dir)
		if len(segs) < 3 {
			t.Fatalf("segments %v: want several", segs)
		}
		var paths []string
		for _, b := range segs {
			paths = append(paths, segmentPath(dir, b))
		}
		return dir, m, paths
	}
	for name, damage := range map[string]func(t *testing.T, dir string, segs []string){
		"newest segment deleted":   func(t *testing.T, _ string, segs []string) { must(t, os.Remove(segs[len(segs)-1])) },
		"a middle segment deleted": func(t *testing.T, _ string, segs []string) { must(t, os.Remove(segs[1])) },
		"every segment deleted": func(t *testing.T, _ string, segs []string) {
			for _, p := range segs {
				must(t, os.Remove(p))
			}
		},
		"newest segment truncated": func(t *testing.T, _ string, segs []string) {
			must(t, os.Truncate(segs[len(segs)-1], 100))
		},
		"segment truncated to nothing": func(t *testing.T, _ string, segs []string) { must(t, os.Truncate(segs[1], 0)) },
		"log directory removed":        func(t *testing.T, dir string, _ []string) { must(t, os.RemoveAll(dir)) },
	} {
		t.Run(name, func(t *testing.T) {
			dir, m, segs := build(t)
			damage(t, dir, segs)
			s, err := Open(dir, Options{SegmentSize: 512, Manifest: m})
			if !errors.Is(err, ErrCorrupt) {
				if s != nil {
					_ = s.Close()
				}
				t.Fatalf("open: %v, want corruption", err)
			}
		})
	}
	// A build that keeps no segment list (one an upgrade was rolled back
	// to) compacts the log's front away: the log starts later and ends
	// where it did; the node's start-up checks that a snapshot covers what
	// is gone.
	t.Run("oldest segments gone", func(t *testing.T) {
		dir, m, segs := build(t)
		second := openBase(t, segs[1])
		must(t, os.Remove(segs[0]))
		var warned []string
		s, err := Open(dir, Options{SegmentSize: 512, Manifest: m, Warn: func(msg string, _ ...any) { warned = append(warned, msg) }})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		first, _ := s.FirstIndex()
		last, _ := s.LastIndex()
		_ = s.Close()
		if first != second || last != 60 {
			t.Fatalf("range %d-%d, want %d-60", first, last, second)
		}
		if len(warned) != 1 || !strings.Contains(warned[0], "front of the log are gone") {
			t.Fatalf("warnings %q, want one about the log's front", warned)
		}
		// The list now matches the disk: losing the newest segment is still refused.
		must(t, os.Remove(segs[len(segs)-1]))
		if s, err := Open(dir, Options{SegmentSize: 512, Manifest: m}); !errors.Is(err, ErrCorrupt) {
			if s != nil {
				_ = s.Close()
			}
			t.Fatalf("open without the newest segment: %v, want corruption", err)
		}
	})
	t.Run("intact log reopens and compacts", func(t *testing.T) {
		dir, m, _ := build(t)
		s, err := Open(dir, Options{SegmentSize: 512, Manifest: m})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRange(1, 30); err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteRange(50, 60); err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		s = open(t, dir, 512)
		_ = s.Close()
		s2, err := Open(dir, Options{SegmentSize: 512, Manifest: m})
		if err != nil {
			t.Fatalf("reopen after compaction: %v", err)
		}
		defer s2.Close()
		first, _ := s2.FirstIndex()
		last, _ := s2.LastIndex()
		if first > 31 || last != 49 {
			t.Fatalf("range %d-%d after compaction, want ..31-49", first, last)
		}
	})
}

// openBase returns the first index a segment file's name gives.
func openBase(t *testing.T, path string) uint64 {
	t.Helper()
	bases, err := listSegments(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bases {
		if segmentPath(filepath.Dir(path), b) == path {
			return b
		}
	}
	t.Fatalf("%s is not a segment", path)
	return 0
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
