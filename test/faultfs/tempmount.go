package faultfs

import (
	"os"
	"path/filepath"
	"testing"
)

// TempMount mounts an FS over an empty backing directory in the test's
// temporary directory and returns it with its mount point. It unmounts it
// when the test ends, so every process using the mount must be stopped,
// and every file the test's own process opened on it closed, by then:
// register their cleanups after calling TempMount (a file of the mount
// still open when the test's process exits is flushed to the mount's
// server in that same exiting process, which never answers). It skips the
// test where there can be no mount (not root, or no /dev/fuse).
func TempMount(t testing.TB) (*FS, string) {
	t.Helper()
	if err := Usable(); err != nil {
		t.Skip(err)
	}
	base := t.TempDir()
	backing, mnt := filepath.Join(base, "backing"), filepath.Join(base, "mnt")
	for _, d := range []string{backing, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := Mount(backing, mnt, filepath.Join(base, "shadow"), Options{})
	if err != nil {
		t.Fatalf("mount a faultfs: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount the faultfs: %v", err)
		}
	})
	return f, mnt
}
