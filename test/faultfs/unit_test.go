package faultfs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestSpans(t *testing.T) {
	var s spans
	for _, r := range []span{{10, 20}, {30, 40}, {0, 5}, {20, 25}, {5, 5}, {38, 50}, {60, 70}} {
		s = s.add(r.start, r.end)
	}
	if want := (spans{{0, 5}, {10, 25}, {30, 50}, {60, 70}}); !slices.Equal(s, want) {
		t.Fatalf("spans = %v, want %v", s, want)
	}
	if got, want := s.add(4, 61), (spans{{0, 70}}); !slices.Equal(got, want) {
		t.Errorf("add(4, 61) = %v, want %v", got, want)
	}
	if got, want := s.clip(35), (spans{{0, 5}, {10, 25}, {30, 35}}); !slices.Equal(got, want) {
		t.Errorf("clip(35) = %v, want %v", got, want)
	}
	if got := s.clip(0); len(got) != 0 {
		t.Errorf("clip(0) = %v, want none", got)
	}
}

func TestMountRefusesOverlappingOrUsedDirectories(t *testing.T) {
	base := t.TempDir()
	dir := func(rel string) string {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	backing, mnt, used := dir("backing"), dir("mnt"), dir("used")
	if err := os.WriteFile(filepath.Join(used, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, backing, mnt, shadow string }{
		{"mount point inside backing", backing, dir("backing/mnt"), filepath.Join(base, "s1")},
		{"shadow inside the mount point", backing, mnt, filepath.Join(mnt, "shadow")},
		{"shadow is backing", backing, mnt, backing + "/"},
		{"shadow not empty", backing, mnt, used},
		{"backing missing", filepath.Join(base, "none"), mnt, filepath.Join(base, "s2")},
	}
	for _, c := range cases {
		if f, err := Mount(c.backing, c.mnt, c.shadow, Options{}); err == nil {
			f.Unmount()
			t.Errorf("%s: Mount succeeded", c.name)
		}
	}
	if _, err := os.Stat(filepath.Join(mnt, "shadow")); err == nil {
		t.Error("a refused Mount made its shadow directory")
	}
}
