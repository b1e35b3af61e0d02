package faultfs

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// async runs call in a goroutine and returns where its error arrives.
func async(call func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	return done
}

// wantPending checks that a call has not returned within a moment.
func wantPending(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) while held", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

// wantReturn waits a few seconds at most for a call's error.
func wantReturn(t *testing.T, done <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s still held", what)
		return nil
	}
}

// promptly makes call, failing the test if it is held: a call of the test
// process held on its own mount must be released (Unmount does) before the
// process ends, or the kernel keeps the process waiting for an answer
// forever.
func promptly(t *testing.T, what string, call func() error) {
	t.Helper()
	if err := wantReturn(t, async(call), what); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (e *env) add(r Rule) RuleID {
	e.t.Helper()
	id, err := e.fs.Add(r)
	if err != nil {
		e.t.Fatalf("Add(%+v): %v", r, err)
	}
	return id
}

func (e *env) wantStats(id RuleID, want Stats) {
	e.t.Helper()
	got, ok := e.fs.Stats(id)
	if !ok || got != want {
		e.t.Errorf("rule %d: Stats = %+v, %v; want %+v", id, got, ok, want)
	}
}

func TestStallHoldsForItsTime(t *testing.T) {
	e := mountEnv(t, nil)
	e.mkdir("raft-log")
	e.durable("raft-log/1", "")
	e.durable("other", "")
	const stall = 300 * time.Millisecond
	id := e.add(Rule{Op: OpWrite, Path: "raft-log/*", Stall: stall})

	e.write("other", "x")
	e.wantStats(id, Stats{Active: true})

	start := time.Now()
	e.write("raft-log/1", "x")
	if held := time.Since(start); held < stall {
		t.Errorf("write returned after %v, want at least %v", held, stall)
	}
	e.wantStats(id, Stats{Hits: 1, Active: true})
}

func TestStallUntilCleared(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("raft.db", "")
	e.durable("other", "")
	id := e.add(Rule{Op: OpFsync, Path: "raft.db", Stall: UntilCleared})
	db := e.open("raft.db", os.O_RDWR)
	done := async(db.Sync)
	waitFor(t, "the fsync to be held", func() bool { s, _ := e.fs.Stats(id); return s.Held == 1 })
	wantPending(t, done, "fsync of raft.db")

	// Other files go on. (Writes and syncs of raft.db itself would wait:
	// the kernel holds the file's inode lock through a write or an fsync.)
	promptly(t, "write and fsync of another file", func() error { return writeSync(e.path("other"), "x") })
	wantPending(t, done, "fsync of raft.db")

	e.fs.Clear(id)
	if err := wantReturn(t, done, "fsync of raft.db"); err != nil {
		t.Errorf("fsync after Clear: %v", err)
	}
	e.wantStats(id, Stats{Hits: 1})
	e.fsync("raft.db")
	e.wantStats(id, Stats{Hits: 1})
}

func TestStallForTheNextCallsOnly(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f1", "")
	e.durable("f2", "")
	id := e.add(Rule{Op: OpWrite | OpFsync, Path: "f*", Stall: UntilCleared, Times: 1})
	f1 := e.open("f1", os.O_WRONLY)
	done := async(func() error { _, err := f1.WriteAt([]byte("x"), 0); return err })
	waitFor(t, "the write to be held", func() bool { s, _ := e.fs.Stats(id); return s.Held == 1 })
	// The rule is spent: the next calls pass while the first is held.
	promptly(t, "write and fsync of f2", func() error { return writeSync(e.path("f2"), "x") })
	e.wantStats(id, Stats{Hits: 1, Held: 1})
	e.fs.ClearAll()
	if err := wantReturn(t, done, "write"); err != nil {
		t.Errorf("write after ClearAll: %v", err)
	}
}

// TestReadStallReachesCachedPages: a read rule added after the file's pages
// were cached still holds the next read.
func TestReadStallReachesCachedPages(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("data", "payload")
	f := e.open("data", os.O_RDONLY)
	buf := make([]byte, 7)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	// A second name makes go-fuse meet the inode again.
	if err := os.Link(e.path("data"), e.path("alias")); err != nil {
		t.Fatal(err)
	}
	id := e.add(Rule{Op: OpRead, Path: "data", Stall: UntilCleared})
	done := async(func() error { _, err := f.ReadAt(buf, 0); return err })
	waitFor(t, "the read to be held", func() bool { s, _ := e.fs.Stats(id); return s.Held == 1 })
	e.fs.Clear(id)
	if err := wantReturn(t, done, "read"); err != nil {
		t.Fatal(err)
	}
	if string(buf) != "payload" {
		t.Errorf("read %q after the hold, want payload", buf)
	}
}

// writeSync replaces the contents of the file at p and fsyncs it.
func writeSync(p, data string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(data); err != nil {
		return err
	}
	return f.Sync()
}

// TestKilledProcessEndsItsHold: a process killed while a rule holds its
// call is not kept waiting, and PowerLoss can follow.
func TestKilledProcessEndsItsHold(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f", "")
	id := e.add(Rule{Op: OpWrite, Path: "f", Stall: UntilCleared})
	cmd := exec.Command("/bin/sh", "-c", `printf x >> "$0"`, e.path("f"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the write to be held", func() bool { s, _ := e.fs.Stats(id); return s.Held == 1 })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wantReturn(t, async(cmd.Wait), "the killed process")
	e.wantStats(id, Stats{Hits: 1, Active: true})
	e.powerLoss()
	e.wantFile("f", "")
}

func TestFailChosenCallsOfChosenFiles(t *testing.T) {
	e := mountEnv(t, nil)
	e.mkdir("raft-log")
	e.durable("raft-log/1", "")
	e.durable("raft-log/2", "")
	id := e.add(Rule{Op: OpWrite, Path: "raft-log/1", Err: syscall.EIO, Times: 2})
	f1 := e.open("raft-log/1", os.O_WRONLY)
	f2 := e.open("raft-log/2", os.O_WRONLY)
	for i, want := range []error{syscall.EIO, nil, syscall.EIO, nil, nil} {
		f := f1
		if i%2 == 1 {
			f = f2
		}
		_, err := f.WriteAt([]byte("x"), 0)
		if !errors.Is(err, want) {
			t.Errorf("write %d to %s: %v, want %v", i, f.Name(), err, want)
		}
	}
	e.wantStats(id, Stats{Hits: 2})
	// Only fsync is failed by a rule for fsync.
	sid := e.add(Rule{Op: OpFsync, Path: "raft-log/*", Err: syscall.ENOSPC})
	if _, err := f2.WriteAt([]byte("y"), 0); err != nil {
		t.Errorf("write under an fsync rule: %v", err)
	}
	if err := f2.Sync(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("fsync: %v, want ENOSPC", err)
	}
	e.fs.Clear(sid)
	e.wantStats(sid, Stats{Hits: 1})
}

// TestFailedFsyncMakesNothingDurable: data whose fsync failed is lost, and
// a later successful fsync makes it durable.
func TestFailedFsyncMakesNothingDurable(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f", "old")
	id := e.add(Rule{Op: OpFsync, Path: "f", Err: syscall.EIO})
	f := e.open("f", os.O_WRONLY)
	if _, err := f.WriteAt([]byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync: %v, want EIO", err)
	}
	f.Close()
	e.powerLoss()
	e.wantFile("f", "old")

	e.write("f", "new")
	e.fs.Clear(id)
	e.fsync("f")
	e.powerLoss()
	e.wantFile("f", "new")
}

func TestFailNamespaceCalls(t *testing.T) {
	e := mountEnv(t, nil)
	e.mkdir("snapshots")
	create := e.add(Rule{Op: OpCreate, Path: "snapshots/*", Err: syscall.ENOSPC})
	if err := os.Mkdir(e.path("snapshots/1.tmp"), 0o755); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("mkdir under a create rule: %v, want ENOSPC", err)
	}
	if err := os.WriteFile(e.path("snapshots/f"), nil, 0o644); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("create under a create rule: %v, want ENOSPC", err)
	}
	e.write("top", "T")
	e.wantStats(create, Stats{Hits: 2, Active: true})
	e.fs.Clear(create)

	// A rename matches by either name.
	rename := e.add(Rule{Op: OpRename, Path: "snapshots/1", Err: syscall.EIO})
	e.mkdir("snapshots/1.tmp")
	if err := os.Rename(e.path("snapshots/1.tmp"), e.path("snapshots/1")); !errors.Is(err, syscall.EIO) {
		t.Errorf("rename to snapshots/1: %v, want EIO", err)
	}
	e.rename("snapshots/1.tmp", "snapshots/2.tmp")
	if err := os.Rename(e.path("top"), e.path("snapshots/1")); !errors.Is(err, syscall.EIO) {
		t.Errorf("rename from top to snapshots/1: %v, want EIO", err)
	}
	e.wantStats(rename, Stats{Hits: 2, Active: true})

	remove := e.add(Rule{Op: OpRemove, Path: "top", Err: syscall.EIO})
	if err := syscall.Unlink(e.path("top")); !errors.Is(err, syscall.EIO) {
		t.Errorf("unlink: %v, want EIO", err)
	}
	e.remove("snapshots/2.tmp")
	e.wantStats(remove, Stats{Hits: 1, Active: true})
	e.wantFile("top", "T")
}

func TestGlobMatchesOneLevel(t *testing.T) {
	e := mountEnv(t, nil)
	e.mkdir("snapshots")
	e.mkdir("snapshots/1")
	id := e.add(Rule{Op: OpWrite, Path: "snapshots/*/state.bin", Err: syscall.EIO})
	for _, c := range []struct {
		rel  string
		fail bool
	}{
		{"snapshots/1/state.bin", true},
		{"snapshots/1/meta.json", false},
		{"snapshots/state.bin", false},
		{"state.bin", false},
	} {
		err := os.WriteFile(e.path(c.rel), []byte("x"), 0o644)
		if c.fail != errors.Is(err, syscall.EIO) {
			t.Errorf("write %s: %v (want EIO: %v)", c.rel, err, c.fail)
		}
	}
	e.wantStats(id, Stats{Hits: 1, Active: true})
}

func TestAddRejectsInvalidRules(t *testing.T) {
	var s ruleSet
	for _, r := range []Rule{
		{},
		{Op: OpAll + 1},
		{Op: OpRead, Path: "["},
		{Op: OpRead, Stall: -time.Second},
		{Op: OpRead, Times: -1},
	} {
		if _, err := s.add(r); !errors.Is(err, ErrInvalidRule) {
			t.Errorf("add(%+v): %v, want ErrInvalidRule", r, err)
		}
	}
	if _, ok := s.stats(1); ok {
		t.Error("a rejected rule has stats")
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[Op]string{
		0:                  "none",
		OpRead:             "read",
		OpWrite | OpFsync:  "write|fsync",
		OpAllocate | 1<<20: "allocate|0x100000",
	} {
		if got := op.String(); got != want {
			t.Errorf("Op(%#x).String() = %q, want %q", uint32(op), got, want)
		}
	}
}
