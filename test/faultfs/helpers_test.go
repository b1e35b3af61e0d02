package faultfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// requireFUSE skips a test that needs a mount where there can be none.
func requireFUSE(t *testing.T) {
	t.Helper()
	if err := Usable(); err != nil {
		t.Skip(err)
	}
}

// env is a mounted FS in a test's temporary directory, with helpers that
// go through the mount and fail the test on any error.
type env struct {
	t       *testing.T
	fs      *FS
	mnt     string
	backing string
}

// mountEnv mounts an FS over a backing directory that prepare may fill
// first.
func mountEnv(t *testing.T, prepare func(backing string)) *env {
	t.Helper()
	requireFUSE(t)
	base := t.TempDir()
	e := &env{t: t, mnt: filepath.Join(base, "mnt"), backing: filepath.Join(base, "backing")}
	for _, d := range []string{e.mnt, e.backing} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if prepare != nil {
		prepare(e.backing)
	}
	f, err := Mount(e.backing, e.mnt, filepath.Join(base, "shadow"), Options{})
	if err != nil {
		t.Fatalf("Mount: %v", err)
	}
	e.fs = f
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("Unmount: %v", err)
		}
	})
	var st unix.Statfs_t
	if err := unix.Statfs(e.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type != unix.FUSE_SUPER_MAGIC {
		t.Fatalf("%s is not a FUSE mount (file system type %#x)", e.mnt, st.Type)
	}
	return e
}

func (e *env) path(rel string) string { return filepath.Join(e.mnt, rel) }

// write replaces the contents of rel, creating it, without syncing.
func (e *env) write(rel, data string) {
	e.t.Helper()
	if err := os.WriteFile(e.path(rel), []byte(data), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// open opens rel with flags, closing it when the test ends.
func (e *env) open(rel string, flags int) *os.File {
	e.t.Helper()
	f, err := os.OpenFile(e.path(rel), flags, 0o644)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { f.Close() })
	return f
}

// fsync opens rel (a file or a directory) read-only and fsyncs it.
func (e *env) fsync(rel string) {
	e.t.Helper()
	f, err := os.Open(e.path(rel))
	if err != nil {
		e.t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		e.t.Fatalf("fsync %s: %v", rel, err)
	}
}

// fdatasync calls fdatasync on f.
func (e *env) fdatasync(f *os.File) {
	e.t.Helper()
	if err := fdatasync(f); err != nil {
		e.t.Fatalf("fdatasync %s: %v", f.Name(), err)
	}
}

// fdatasync calls fdatasync on f, again while it is interrupted, as
// os.File.Sync does for fsync: a held call ends with EINTR when a signal
// (the Go runtime sends them to its own threads) interrupts it.
func fdatasync(f *os.File) error {
	for {
		if err := unix.Fdatasync(int(f.Fd())); err != unix.EINTR {
			return err
		}
	}
}

// mkdir makes the directory rel without syncing.
func (e *env) mkdir(rel string) {
	e.t.Helper()
	if err := os.Mkdir(e.path(rel), 0o755); err != nil {
		e.t.Fatal(err)
	}
}

// rename renames old to new without syncing.
func (e *env) rename(old, new string) {
	e.t.Helper()
	if err := os.Rename(e.path(old), e.path(new)); err != nil {
		e.t.Fatal(err)
	}
}

// remove removes rel without syncing.
func (e *env) remove(rel string) {
	e.t.Helper()
	if err := os.Remove(e.path(rel)); err != nil {
		e.t.Fatal(err)
	}
}

// durable creates rel with data, syncs it and syncs its directory.
func (e *env) durable(rel, data string) {
	e.t.Helper()
	e.write(rel, data)
	e.fsync(rel)
	e.fsync(filepath.Dir(rel))
}

func (e *env) powerLoss() {
	e.t.Helper()
	if err := e.fs.PowerLoss(); err != nil {
		e.t.Fatalf("PowerLoss: %v", err)
	}
}

// wantFile checks that rel holds want.
func (e *env) wantFile(rel, want string) {
	e.t.Helper()
	got, err := os.ReadFile(e.path(rel))
	if err != nil {
		e.t.Errorf("%s: %v, want %q", rel, err, want)
		return
	}
	if string(got) != want {
		e.t.Errorf("%s holds %q, want %q", rel, got, want)
	}
}

// wantMissing checks that rel does not exist.
func (e *env) wantMissing(rel string) {
	e.t.Helper()
	if _, err := os.Lstat(e.path(rel)); !errors.Is(err, fs.ErrNotExist) {
		e.t.Errorf("%s: got %v, want it missing", rel, err)
	}
}

// wantNames checks the names in the directory rel.
func (e *env) wantNames(rel string, want ...string) {
	e.t.Helper()
	entries, err := os.ReadDir(e.path(rel))
	if err != nil {
		e.t.Errorf("read %s: %v", rel, err)
		return
	}
	var got []string
	for _, ent := range entries {
		got = append(got, ent.Name())
	}
	if !slices.Equal(got, want) {
		e.t.Errorf("%s holds %q, want %q", rel, got, want)
	}
}

// waitFor polls cond until it holds, failing the test after a few seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
