package faultfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSyncedWritesSurviveAndLaterOnesDoNot(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f", "")
	f := e.open("f", os.O_WRONLY)
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	e.fdatasync(f)
	if _, err := f.WriteAt([]byte(" world"), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("J"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e.wantFile("f", "Jello world")
	e.powerLoss()
	e.wantFile("f", "hello")

	// fsync makes the same writes durable as fdatasync.
	e.write("f", "fsynced")
	e.fsync("f")
	e.write("f", "lost")
	e.powerLoss()
	e.wantFile("f", "fsynced")
}

func TestSizeChangesNeedASync(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f", "0123456789")
	truncate := func(size int64) {
		t.Helper()
		if err := os.Truncate(e.path("f"), size); err != nil {
			t.Fatal(err)
		}
	}
	truncate(3)
	e.wantFile("f", "012")
	e.powerLoss()
	e.wantFile("f", "0123456789")

	truncate(20)
	e.powerLoss()
	e.wantFile("f", "0123456789")

	// Cut, grown back and partly rewritten: the bytes cut read as zeros.
	truncate(1)
	truncate(5)
	f := e.open("f", os.O_WRONLY)
	if _, err := f.WriteAt([]byte("x"), 3); err != nil {
		t.Fatal(err)
	}
	e.fdatasync(f)
	f.Close()
	e.powerLoss()
	e.wantFile("f", "0\x00\x00x\x00")
}

func TestFallocateNeedsASync(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f", "abcdef")
	f := e.open("f", os.O_RDWR)
	fallocate := func(mode uint32, off, n int64) {
		t.Helper()
		if err := unix.Fallocate(int(f.Fd()), mode, off, n); err != nil {
			t.Fatalf("fallocate(%#x, %d, %d): %v", mode, off, n, err)
		}
	}
	fallocate(0, 0, 10)
	fallocate(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1, 2)
	f.Close()
	e.wantFile("f", "a\x00\x00def\x00\x00\x00\x00")
	e.powerLoss()
	e.wantFile("f", "abcdef")

	f = e.open("f", os.O_RDWR)
	fallocate(unix.FALLOC_FL_ZERO_RANGE, 4, 4)
	e.fdatasync(f)
	f.Close()
	e.powerLoss()
	e.wantFile("f", "abcd\x00\x00\x00\x00")
}

func TestNewFileNeedsItsDirectorySynced(t *testing.T) {
	e := mountEnv(t, nil)
	e.write("synced-data", "data")
	e.fsync("synced-data")
	e.powerLoss()
	e.wantMissing("synced-data")

	// A durable name without synced data is an empty file.
	e.write("synced-name", "data")
	e.fsync(".")
	e.powerLoss()
	e.wantFile("synced-name", "")
}

func TestRenameNeedsItsDirectoriesSynced(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("a", "A")
	e.rename("a", "b")
	e.powerLoss()
	e.wantFile("a", "A")
	e.wantMissing("b")

	e.rename("a", "b")
	e.fsync(".")
	e.powerLoss()
	e.wantMissing("a")
	e.wantFile("b", "A")

	// Across directories each one counts alone: with only the target
	// synced the file has both names, with only the source neither.
	e.mkdir("d1")
	e.mkdir("d2")
	e.fsync(".")
	e.durable("d1/x", "X")
	e.durable("d1/y", "Y")
	e.rename("d1/x", "d2/x")
	e.rename("d1/y", "d2/y")
	e.fsync("d2")
	e.powerLoss()
	e.wantFile("d1/x", "X")
	e.wantFile("d2/x", "X")
	e.durable("d1/w", "W")
	e.rename("d1/w", "d2/w")
	e.fsync("d1")
	e.powerLoss()
	e.wantMissing("d1/w")
	e.wantMissing("d2/w")
}

func TestUnlinkNeedsItsDirectorySynced(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f", "F")
	e.remove("f")
	e.powerLoss()
	e.wantFile("f", "F")

	// Data synced through a descriptor after the unlink is what the
	// returning name holds.
	f := e.open("f", os.O_WRONLY)
	e.remove("f")
	if _, err := f.WriteAt([]byte("G"), 0); err != nil {
		t.Fatal(err)
	}
	e.fdatasync(f)
	f.Close()
	e.powerLoss()
	e.wantFile("f", "G")

	e.remove("f")
	e.fsync(".")
	e.powerLoss()
	e.wantMissing("f")
}

// TestDirectoryRename follows a snapshot store that writes a snapshot into
// ID.tmp and renames it to ID.
func TestDirectoryRename(t *testing.T) {
	e := mountEnv(t, nil)
	e.mkdir("snapshots")
	e.fsync(".")

	// The whole protocol: every file, ID.tmp and the parent synced.
	e.mkdir("snapshots/1.tmp")
	e.fsync("snapshots")
	e.durable("snapshots/1.tmp/state.bin", "S1")
	e.rename("snapshots/1.tmp", "snapshots/1")
	e.powerLoss()
	e.wantNames("snapshots", "1.tmp")
	e.wantFile("snapshots/1.tmp/state.bin", "S1")
	e.rename("snapshots/1.tmp", "snapshots/1")
	e.fsync("snapshots")
	e.powerLoss()
	e.wantNames("snapshots", "1")
	e.wantFile("snapshots/1/state.bin", "S1")

	// ID.tmp itself never synced: the renamed directory is there, empty.
	e.mkdir("snapshots/2.tmp")
	e.write("snapshots/2.tmp/state.bin", "S2")
	e.fsync("snapshots/2.tmp/state.bin")
	e.rename("snapshots/2.tmp", "snapshots/2")
	e.fsync("snapshots")
	e.powerLoss()
	e.wantNames("snapshots", "1", "2")
	e.wantNames("snapshots/2")

	// Never in a synced parent: gone, whatever is synced inside.
	e.mkdir("snapshots/3.tmp")
	e.durable("snapshots/3.tmp/state.bin", "S3")
	e.rename("snapshots/3.tmp", "snapshots/3")
	e.powerLoss()
	e.wantNames("snapshots", "1", "2")
}

func TestTempFileRenamePattern(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("cfg", "old")

	e.write("cfg.tmp", "new")
	e.fsync("cfg.tmp")
	e.rename("cfg.tmp", "cfg")
	e.fsync(".")
	e.powerLoss()
	e.wantFile("cfg", "new")
	e.wantMissing("cfg.tmp")

	// Renamed without syncing: the old contents stay.
	e.write("cfg.tmp", "newer")
	e.fsync("cfg.tmp")
	e.rename("cfg.tmp", "cfg")
	e.powerLoss()
	e.wantFile("cfg", "new")
	e.wantMissing("cfg.tmp")

	// The temporary file's data never synced: an empty file replaced it.
	e.write("cfg.tmp", "newest")
	e.rename("cfg.tmp", "cfg")
	e.fsync(".")
	e.powerLoss()
	e.wantFile("cfg", "")
}

func TestNewDirectoriesNeedEachParentSynced(t *testing.T) {
	e := mountEnv(t, nil)
	e.mkdir("a")
	e.mkdir("a/b")
	e.mkdir("a/b/c")
	e.durable("a/b/c/f", "F")
	e.fsync("a/b")
	e.fsync("a")
	e.powerLoss()
	e.wantMissing("a")

	e.mkdir("a")
	e.mkdir("a/b")
	e.mkdir("a/b/c")
	e.durable("a/b/c/f", "F")
	e.fsync("a")
	e.fsync(".")
	e.powerLoss()
	e.wantNames("a", "b")
	e.wantNames("a/b")

	e.mkdir("a/b/c")
	e.durable("a/b/c/f", "F")
	e.fsync("a/b")
	e.powerLoss()
	e.wantFile("a/b/c/f", "F")
}

func TestTreePresentAtMountIsDurable(t *testing.T) {
	e := mountEnv(t, func(backing string) {
		write := func(rel, data string) {
			if err := os.WriteFile(filepath.Join(backing, rel), []byte(data), 0o640); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Mkdir(filepath.Join(backing, "dir"), 0o750); err != nil {
			t.Fatal(err)
		}
		write("keep", "K")
		write("dir/sub", "S")
		if err := os.Link(filepath.Join(backing, "dir/sub"), filepath.Join(backing, "dir/link")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("keep", filepath.Join(backing, "sym")); err != nil {
			t.Fatal(err)
		}
	})
	e.write("keep", "changed")
	e.remove("dir/sub")
	e.write("dir/link", "L")
	e.fsync("dir/link")
	e.write("new", "N")
	e.powerLoss()
	e.wantFile("keep", "K")
	e.wantFile("dir/sub", "L")
	e.wantFile("dir/link", "L")
	e.wantMissing("new")
	if target, err := os.Readlink(e.path("sym")); err != nil || target != "keep" {
		t.Errorf("sym links to %q (%v), want keep", target, err)
	}
	var sub, link syscall.Stat_t
	if err := syscall.Stat(e.path("dir/sub"), &sub); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(e.path("dir/link"), &link); err != nil {
		t.Fatal(err)
	}
	if sub.Ino != link.Ino || sub.Nlink != 2 {
		t.Errorf("dir/sub (ino %d, %d links) and dir/link (ino %d) are not one file", sub.Ino, sub.Nlink, link.Ino)
	}
	if st, err := os.Stat(e.path("dir")); err != nil || st.Mode().Perm() != 0o750 {
		t.Errorf("dir: %v, %v, want mode 0750", st.Mode(), err)
	}
}

func TestHardLinkNeedsItsDirectorySynced(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("a", "A")
	link := func() {
		t.Helper()
		if err := os.Link(e.path("a"), e.path("b")); err != nil {
			t.Fatal(err)
		}
	}
	link()
	e.powerLoss()
	e.wantMissing("b")

	link()
	e.fsync(".")
	f := e.open("b", os.O_WRONLY)
	if _, err := f.WriteAt([]byte("B"), 0); err != nil {
		t.Fatal(err)
	}
	e.fdatasync(f)
	f.Close()
	e.powerLoss()
	e.wantFile("a", "B")
	e.wantFile("b", "B")
}

func TestAppendsThroughSeveralHandles(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("log", "")
	w1 := e.open("log", os.O_WRONLY|os.O_APPEND)
	w2 := e.open("log", os.O_WRONLY|os.O_APPEND)
	r := e.open("log", os.O_RDONLY)
	for _, step := range []struct {
		w    *os.File
		data string
	}{{w1, "one\n"}, {w2, "two\n"}, {w1, "three\n"}} {
		if _, err := step.w.WriteString(step.data); err != nil {
			t.Fatal(err)
		}
	}
	// A sync through any descriptor covers every write to the file.
	if err := r.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := w2.WriteString("four\n"); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{w1, w2, r} {
		f.Close()
	}
	e.wantFile("log", "one\ntwo\nthree\nfour\n")
	e.powerLoss()
	e.wantFile("log", "one\ntwo\nthree\n")
}

func TestPowerLossAfterPowerLoss(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f", "1")
	e.powerLoss()
	e.write("f", "2")
	e.fsync("f")
	e.durable("g", "G")
	e.powerLoss()
	e.write("f", "3")
	e.remove("g")
	e.powerLoss()
	e.wantFile("f", "2")
	e.wantFile("g", "G")
	e.wantNames(".", "f", "g")
}
