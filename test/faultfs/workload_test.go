package faultfs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestAppendLoopSurvivesToItsLastFdatasync: a log appended to and synced
// with fdatasync keeps exactly what its last fdatasync covered.
func TestAppendLoopSurvivesToItsLastFdatasync(t *testing.T) {
	e := mountEnv(t, nil)
	f := e.open("log", os.O_WRONLY|os.O_CREATE|os.O_APPEND)
	e.fsync(".")
	rng := rand.New(rand.NewPCG(1, 2))
	var written []byte
	durable := 0
	for i := range 400 {
		rec := fmt.Appendf(nil, "%d:%s\n", i, bytes.Repeat([]byte{'a' + byte(i%26)}, rng.IntN(300)))
		if _, err := f.Write(rec); err != nil {
			t.Fatal(err)
		}
		written = append(written, rec...)
		// Most appends are synced, some only by a later one, the last
		// few never.
		if i < 390 && rng.IntN(4) > 0 {
			e.fdatasync(f)
			durable = len(written)
		}
	}
	f.Close()
	got, err := os.ReadFile(e.path("log"))
	if err != nil || !bytes.Equal(got, written) {
		t.Fatalf("log holds %d bytes (%v) before the power loss, want the %d written", len(got), err, len(written))
	}
	e.powerLoss()
	got, err = os.ReadFile(e.path("log"))
	if err != nil || !bytes.Equal(got, written[:durable]) {
		t.Fatalf("log holds %d bytes (%v) after the power loss, want the %d synced", len(got), err, durable)
	}
}

// TestConcurrentWritersAndRules: writers syncing their own files while
// rules come and go; each file keeps what was synced.
func TestConcurrentWritersAndRules(t *testing.T) {
	e := mountEnv(t, nil)
	const writers, rounds = 4, 40
	files := make([]*os.File, writers)
	for i := range files {
		files[i] = e.open(fmt.Sprintf("w%d", i), os.O_WRONLY|os.O_CREATE|os.O_APPEND)
	}
	e.fsync(".")
	stop := make(chan struct{})
	var nemesis sync.WaitGroup
	nemesis.Add(1)
	go func() {
		defer nemesis.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			id, err := e.fs.Add(Rule{Op: OpWrite | OpFsync, Path: "w*", Stall: time.Millisecond})
			if err != nil {
				t.Error(err)
				return
			}
			e.fs.Stats(id)
			time.Sleep(time.Millisecond)
			e.fs.Clear(id)
		}
	}()
	synced := make([][]byte, writers)
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for i, f := range files {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var data []byte
			for r := range rounds {
				rec := fmt.Appendf(nil, "%d.%d;", i, r)
				if _, err := f.Write(rec); err != nil {
					errs <- err
					return
				}
				data = append(data, rec...)
				if err := fdatasync(f); err != nil {
					errs <- err
					return
				}
				synced[i] = bytes.Clone(data)
			}
			_, err := f.Write([]byte("unsynced"))
			errs <- err
		}()
	}
	wg.Wait()
	close(stop)
	nemesis.Wait()
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		f.Close()
	}
	e.powerLoss()
	for i := range writers {
		e.wantFile(fmt.Sprintf("w%d", i), string(synced[i]))
	}
}

// TestEveryCallPassesThrough: what the mount shows is what the backing
// directory holds.
func TestEveryCallPassesThrough(t *testing.T) {
	e := mountEnv(t, nil)
	e.mkdir("d")
	e.write("d/f", "data")
	if err := os.Symlink("d/f", e.path("s")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(e.path("d/f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(e.path("fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(e.backing + "/d/f")
	if err != nil || string(got) != "data" {
		t.Errorf("backing d/f holds %q (%v)", got, err)
	}
	if st, err := os.Stat(e.backing + "/d/f"); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("backing d/f: %v %v, want mode 0600", st.Mode(), err)
	}
	if target, err := os.Readlink(e.backing + "/s"); err != nil || target != "d/f" {
		t.Errorf("backing s links to %q (%v)", target, err)
	}
	if st, err := os.Lstat(e.backing + "/fifo"); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("backing fifo: %v (%v)", st.Mode(), err)
	}
	e.fsync(".")
	e.fsync("d")
	e.powerLoss()
	e.wantFile("s", "")
	if st, err := os.Stat(e.path("d/f")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("d/f after the power loss: %v %v, want mode 0600", st.Mode(), err)
	}
	if st, err := os.Lstat(e.path("fifo")); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("fifo after the power loss: %v (%v)", st.Mode(), err)
	}
}
