package raftlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLevelMarks: a mark is durable text named like a segment, which the
// store skips; the highest mark is reported.
func TestLevelMarks(t *testing.T) {
	dir := t.TempDir()
	if l, err := MarkedLevel(filepath.Join(dir, "absent")); err != nil || l != 0 {
		t.Fatalf("MarkedLevel of a missing directory: %d %v", l, err)
	}
	s := open(t, dir, 512)
	must(t, s.StoreLogs(entries(1, 20)))
	must(t, MarkLevel(dir, 1))
	must(t, MarkLevel(dir, 3))
	must(t, MarkLevel(dir, 2))
	must(t, s.StoreLogs(entries(21, 40)))
	must(t, s.Close())
	if l, err := MarkedLevel(dir); err != nil || l != 3 {
		t.Fatalf("MarkedLevel: %d %v, want 3", l, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "needs-cluster-level-3.seg"))
	if err != nil || !strings.Contains(string(b), "cluster level 3") {
		t.Fatalf("mark: %q %v", b, err)
	}
	s = open(t, dir, 512)
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 1 || last != 40 {
		t.Fatalf("range %d-%d with marks in the directory, want 1-40", first, last)
	}
	for _, name := range []string{"needs-cluster-level-0.seg", "needs-cluster-level-x.seg", "needs-cluster-level-1.tmp"} {
		if _, ok := parseLevelMark(name); ok {
			t.Errorf("%s parsed as a mark", name)
		}
	}
}
