//go:build linux

package statestore

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/test/faultfs"
)

// The power-loss tests run the writer in a child process (this test binary
// again) on a faultfs mount, let it exit without closing the store, as a
// killed node does, cut the power, and open what is left.

const childEnv = "HOLDFAST_STATESTORE_CHILD"

// powerBatches is how many batches the child commits; it flushes after
// powerFlushed of them. Each batch writes one 2 KiB record, so the small
// memtable of the child also flushes on its own many times.
const (
	powerBatches = 600
	powerFlushed = 200
)

func record(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 2048) }

func recordKey(i int) []byte { return fmt.Appendf(nil, "r%05d", i) }

// TestPowerLossChild is the child's side; it does nothing in a normal run.
func TestPowerLossChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("run by the power-loss tests only")
	}
	mode, root, _ := strings.Cut(spec, ":")
	opts := Options{MemTableBytes: 256 << 10, CacheBytes: 1 << 20}
	if mode == "flush" {
		opts.MemTableBytes, opts.CacheBytes = 64<<20, 256<<20 // never full: only Flush writes
	}
	s, err := Open(root, opts)
	if err != nil {
		fmt.Println("child:", err)
		os.Exit(2)
	}
	switch mode {
	case "fill", "flush":
		for i := 1; i <= powerBatches; i++ {
			b := s.Begin()
			must(b.Set(recordKey(i), record(i)))
			must(b.Set([]byte("last"), []byte(strconv.Itoa(i))))
			must(b.Commit(uint64(i)))
			if i == powerFlushed {
				must(s.Flush())
			}
		}
	case "install":
		in, err := s.InstallDir()
		must(err)
		src, err := os.ReadDir(filepath.Join(root, "..", "source"))
		must(err)
		for _, e := range src {
			b, err := os.ReadFile(filepath.Join(root, "..", "source", e.Name()))
			must(err)
			must(os.WriteFile(filepath.Join(in, e.Name()), b, 0o600))
		}
		must(s.Install(in))
	}
	fmt.Println("child: done")
	os.Exit(0) // without closing the store, as a killed node
}

func must(err error) {
	if err != nil {
		fmt.Println("child:", err)
		os.Exit(2)
	}
}

func runChild(t *testing.T, mode, root string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPowerLossChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+mode+":"+root)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "child: done") {
		t.Fatalf("child %s: %v\n%s", mode, err, out)
	}
}

func TestPowerLossKeepsAPrefixOfTheBatches(t *testing.T) {
	// The child's memtable fills many times: pebble flushes on its own.
	a := fillAndCutPower(t, "fill")
	if a < powerFlushed || a > powerBatches {
		t.Fatalf("applied after a power loss = %d, want from %d (flushed) to %d", a, powerFlushed, powerBatches)
	}
	t.Logf("%d of %d batches survived the power loss (%d flushed by hand)", a, powerBatches, powerFlushed)
}

func TestPowerLossKeepsWhatFlushMadeDurable(t *testing.T) {
	// The child's memtable never fills: exactly what Flush wrote survives.
	if a := fillAndCutPower(t, "flush"); a != powerFlushed {
		t.Fatalf("applied after a power loss = %d, want %d, the index of the last Flush", a, powerFlushed)
	}
}

// fillAndCutPower runs the child's fill, cuts the power, opens the store
// and checks that it holds exactly the batches up to its applied index,
// which it returns.
func fillAndCutPower(t *testing.T, mode string) int {
	t.Helper()
	f, mnt := faultfs.TempMount(t)
	root := filepath.Join(mnt, "data", "state")
	runChild(t, mode, root)
	if err := f.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(root, Options{})
	if err != nil {
		t.Fatalf("open after a power loss: %v", err)
	}
	defer s.Close()
	a := int(s.Applied())
	if v, _ := mustGet(t, s.Get, "last"); v != strconv.Itoa(a) {
		t.Fatalf("the record of the last batch says %q, but the applied index is %d", v, a)
	}
	n := 0
	err = s.Scan([]byte("r"), []byte("s"), func(k, v []byte) bool {
		n++
		if want := recordKey(n); !bytes.Equal(k, want) || !bytes.Equal(v, record(n)) {
			t.Errorf("record %d is %q (%d bytes), want %q", n, k, len(v), want)
			return false
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != a {
		t.Fatalf("%d records survived with applied index %d: a batch was split", n, a)
	}
	return a
}

func TestPowerLossAfterInstallKeepsTheNewStore(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	root := filepath.Join(mnt, "data", "state")
	s, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, 90, "which", "old")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The source is made off the mount: only the install is under test.
	src := t.TempDir()
	makeStore(t, filepath.Join(src, "cp"), "new")
	if err := os.Mkdir(filepath.Join(mnt, "data", "source"), 0o700); err != nil {
		t.Fatal(err)
	}
	copyDir(t, filepath.Join(src, "cp"), filepath.Join(mnt, "data", "source"))

	runChild(t, "install", root)
	if err := f.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(root, Options{})
	if err != nil {
		t.Fatalf("open after a power loss: %v", err)
	}
	defer s.Close()
	if v, _ := mustGet(t, s.Get, "which"); v != "new" || s.Applied() != 1 {
		t.Fatalf("after install and a power loss the store serves %q at %d, want the installed one", v, s.Applied())
	}
}
