package raftlog

import (
	"path/filepath"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/test/faultfs"
)

// openOnMount opens a store with 512-byte segments on a faultfs mount,
// closing it before the mount goes (a file of the mount open when the
// test's process exits would wait for the process itself to answer).
func openOnMount(t *testing.T, dir string, m Manifest) *Store {
	t.Helper()
	s, err := Open(dir, Options{SegmentSize: 512, Manifest: m})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// TestAppendsSurviveAPowerLoss: every append that returned is in the log
// after a power loss (test/faultfs keeps only what was synced): in a log
// directory the store made below a new directory, across segment rolls
// (each a spare renamed into place, or a new file) and the removal of the
// oldest segments, with a level mark written on the way.
func TestAppendsSurviveAPowerLoss(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	dir := filepath.Join(mnt, "data", "raft-log")
	m := &memManifest{} // raft.db's list, whose writes are durable when they return
	s := openOnMount(t, dir, m)
	for i := uint64(1); i <= 30; i++ {
		must(t, s.StoreLogs(entries(i, i)))
	}
	must(t, MarkLevel(dir, 1))
	must(t, s.DeleteRange(1, 20))
	must(t, s.StoreLogs(entries(31, 40)))
	first, _ := s.FirstIndex()
	bases, err := listSegments(dir)
	must(t, err)
	if len(bases) < 2 || bases[0] == 1 {
		t.Fatalf("segments %v: the test means to roll several and remove the oldest", bases)
	}
	must(t, s.Close())
	if err := f.PowerLoss(); err != nil {
		t.Fatal(err)
	}

	s = openOnMount(t, dir, m)
	if last, _ := s.LastIndex(); last != 40 {
		t.Fatalf("the log ends at %d after a power loss; appends up to 40 returned", last)
	}
	if f, _ := s.FirstIndex(); f > first {
		t.Fatalf("the log starts at %d after a power loss; it held entries from %d", f, first)
	}
	for i := first; i <= 40; i++ {
		var l raft.Log
		if err := s.GetLog(i, &l); err != nil || string(l.Data) != string(entry(i).Data) {
			t.Fatalf("entry %d after a power loss: %q, %v", i, l.Data, err)
		}
	}
	if l, err := MarkedLevel(dir); err != nil || l != 1 {
		t.Fatalf("level mark after a power loss: %d, %v; want 1", l, err)
	}
}
