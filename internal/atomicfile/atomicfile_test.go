package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/holdfast/holdfast/test/faultfs"
)

func TestWriteReplacesWholeAndLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, content := range []string{"first", "second, longer"} {
		if err := Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("read back %q, %v; want %q", b, err, content)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d files, want only the written one", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "f"), []byte("x")); err == nil {
		t.Error("a write into a missing directory succeeded")
	}
}

func powerLoss(t *testing.T, f *faultfs.FS) {
	t.Helper()
	if err := f.PowerLoss(); err != nil {
		t.Fatalf("power loss: %v", err)
	}
}

// countDirSyncs adds a rule that only counts the fsyncs of directories
// matching pattern.
func countDirSyncs(t *testing.T, f *faultfs.FS, pattern string) faultfs.RuleID {
	t.Helper()
	id, err := f.Add(faultfs.Rule{Op: faultfs.OpFsyncDir, Path: pattern})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func hits(t *testing.T, f *faultfs.FS, id faultfs.RuleID) int {
	t.Helper()
	s, ok := f.Stats(id)
	if !ok {
		t.Fatalf("no rule %d", id)
	}
	return s.Hits
}

// TestWriteSurvivesAPowerLoss: a written file is there after a power loss,
// whole, and no temporary file is.
func TestWriteSurvivesAPowerLoss(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	path := filepath.Join(mnt, "node-id")
	for _, content := range []string{"first\n", "second, longer\n"} {
		if err := Write(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		powerLoss(t, f)
		if b, err := os.ReadFile(path); err != nil || string(b) != content {
			t.Fatalf("after a power loss: %q, %v; want %q", b, err, content)
		}
		if entries, err := os.ReadDir(mnt); err != nil || len(entries) != 1 {
			t.Fatalf("after a power loss the directory holds %v (%v), want only the written file", entries, err)
		}
	}
}

// TestWriteReturnsTheDirectorysSyncError: until the directory is synced
// the new name may not survive a power loss, so a failed sync fails Write.
func TestWriteReturnsTheDirectorysSyncError(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	if _, err := f.Add(faultfs.Rule{Op: faultfs.OpFsyncDir, Path: ".", Err: syscall.EIO, Times: 1}); err != nil {
		t.Fatal(err)
	}
	err := Write(filepath.Join(mnt, "f"), []byte("x"))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("Write with a failing directory sync: %v, want EIO", err)
	}
}

// TestSyncDirMakesEntriesDurable: a file made in a directory survives a
// power loss once the directory is synced, and only then.
func TestSyncDirMakesEntriesDurable(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	for _, name := range []string{"synced", "not-synced"} {
		if err := os.WriteFile(filepath.Join(mnt, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if name == "synced" {
			if err := SyncDir(mnt); err != nil {
				t.Fatal(err)
			}
		}
	}
	powerLoss(t, f)
	if _, err := os.Stat(filepath.Join(mnt, "synced")); err != nil {
		t.Errorf("the file whose directory was synced: %v", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "not-synced")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the file whose directory was not synced survived the power loss (%v): the model keeps too much for this test to mean anything", err)
	}
	if err := SyncDir(filepath.Join(mnt, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("SyncDir of a missing directory: %v", err)
	}
}

// expectDirSyncs counts the directory syncs from now on; the function it
// returns checks that each of dirs (relative to the mount point) was
// synced once and no other directory was, and stops counting.
func expectDirSyncs(t *testing.T, f *faultfs.FS, dirs ...string) func() {
	t.Helper()
	ids := map[string]faultfs.RuleID{}
	for _, dir := range dirs {
		ids[dir] = countDirSyncs(t, f, dir)
	}
	// Every directory; the rules above count theirs first.
	others := countDirSyncs(t, f, "")
	return func() {
		t.Helper()
		for dir, id := range ids {
			if n := hits(t, f, id); n != 1 {
				t.Errorf("%s synced %d times, want once", dir, n)
			}
		}
		if n := hits(t, f, others); n != 0 {
			t.Errorf("%d syncs of other directories than %q", n, dirs)
		}
		f.ClearAll()
	}
}

// TestMkdirAllSurvivesAPowerLoss: every directory MkdirAll made is there
// after a power loss; it syncs only the directories it made new entries
// in, and a failed sync fails it.
func TestMkdirAllSurvivesAPowerLoss(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	deep := filepath.Join(mnt, "a", "b", "c")
	check := expectDirSyncs(t, f, ".", "a", "a/b")
	if err := MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	check()
	powerLoss(t, f)
	if st, err := os.Stat(deep); err != nil || !st.IsDir() {
		t.Fatalf("after a power loss: %v", err)
	}

	check = expectDirSyncs(t, f)
	if err := MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	check()
	check = expectDirSyncs(t, f, "a/b/c")
	if err := MkdirAll(filepath.Join(deep, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	check()

	if _, err := f.Add(faultfs.Rule{Op: faultfs.OpFsyncDir, Path: "a/b/c/d", Err: syscall.EIO, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(deep, "d", "e"), 0o700); !errors.Is(err, syscall.EIO) {
		t.Errorf("MkdirAll with a failing sync: %v, want EIO", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(mnt, "file", "x"), 0o700); err == nil {
		t.Error("MkdirAll below a regular file succeeded")
	}
}
