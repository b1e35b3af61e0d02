package statestore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

func openT(t *testing.T, root string) *Store {
	t.Helper()
	s, err := Open(root, Options{MemTableBytes: 1 << 20, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustGet(t *testing.T, get func([]byte) ([]byte, bool, error), key string) (string, bool) {
	t.Helper()
	v, ok, err := get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return string(v), ok
}

func keys(t *testing.T, scan func(lower, upper []byte, fn func(k, v []byte) bool) error, lower, upper string) []string {
	t.Helper()
	var out []string
	if err := scan([]byte(lower), []byte(upper), func(k, v []byte) bool {
		out = append(out, string(k)+"="+string(v))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOthersSeeABatchAtItsCommit(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()

	b := s.Begin()
	for _, kv := range [][2]string{{"b", "2"}, {"a", "1"}, {"c", "3"}} {
		if err := b.Set([]byte(kv[0]), []byte(kv[1])); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := mustGet(t, s.Get, "a"); ok {
		t.Fatal("the store shows a batch's write before its commit")
	}
	if err := b.Commit(7); err != nil {
		t.Fatal(err)
	}
	if s.Applied() != 7 {
		t.Fatalf("applied = %d, want 7", s.Applied())
	}

	b = s.Begin()
	if err := b.Delete([]byte("b")); err != nil {
		t.Fatal(err)
	}
	if err := b.Set([]byte("bb"), []byte("22")); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(keys(t, s.Scan, "a", "z")), "[a=1 b=2 c=3]"; got != want {
		t.Fatalf("store scan before commit = %s, want %s", got, want)
	}
	b.Discard()
	if got, want := fmt.Sprint(keys(t, s.Scan, "a", "z")), "[a=1 b=2 c=3]"; got != want {
		t.Fatalf("store scan after a discarded batch = %s, want %s", got, want)
	}
	if err := s.Begin().Commit(7); err == nil {
		t.Fatal("a commit at an index already applied was taken")
	}
}

func TestReservedKeysAreRefused(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	b := s.Begin()
	defer b.Discard()
	for _, k := range [][]byte{nil, {0}, appliedKey} {
		if err := b.Set(k, []byte("x")); !errors.Is(err, ErrReservedKey) {
			t.Errorf("Set(%q) = %v, want ErrReservedKey", k, err)
		}
		if err := b.Delete(k); !errors.Is(err, ErrReservedKey) {
			t.Errorf("Delete(%q) = %v, want ErrReservedKey", k, err)
		}
	}
	if err := s.Scan([]byte{0}, nil, func(k, v []byte) bool { return true }); !errors.Is(err, ErrReservedKey) {
		t.Errorf("a scan from 0x00 = %v, want ErrReservedKey", err)
	}
}

func TestCloseKeepsEverythingCommitted(t *testing.T) {
	root := t.TempDir()
	s := openT(t, root)
	for i := 1; i <= 3; i++ {
		b := s.Begin()
		if err := b.Set(fmt.Appendf(nil, "k%d", i), bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(uint64(i * 10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openT(t, root)
	defer s.Close()
	if s.Applied() != 30 {
		t.Fatalf("applied after a reopen = %d, want 30", s.Applied())
	}
	if got := len(keys(t, s.Scan, "k", "l")); got != 3 {
		t.Fatalf("%d records after a reopen, want 3", got)
	}
}

func TestCheckpointOpensAsAStoreOfItsOwn(t *testing.T) {
	root := t.TempDir()
	s := openT(t, root)
	defer s.Close()
	commit(t, s, 5, "a", "1")
	dir := filepath.Join(root, "cp")
	if err := s.Checkpoint(dir); err != nil {
		t.Fatal(err)
	}
	commit(t, s, 6, "b", "2")

	cp := installFrom(t, openT(t, t.TempDir()), dir)
	defer cp.Close()
	if cp.Applied() != 5 {
		t.Fatalf("the checkpoint's applied index = %d, want 5", cp.Applied())
	}
	if got, want := fmt.Sprint(keys(t, cp.Scan, "a", "z")), "[a=1]"; got != want {
		t.Fatalf("checkpoint holds %s, want %s", got, want)
	}
}

// installFrom installs the database files of dir into s.
func installFrom(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	in, err := s.InstallDir()
	if err != nil {
		t.Fatal(err)
	}
	copyDir(t, dir, in)
	if err := s.Install(in); err != nil {
		t.Fatal(err)
	}
	return s
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func commit(t *testing.T, s *Store, index uint64, kv ...string) {
	t.Helper()
	b := s.Begin()
	for i := 0; i < len(kv); i += 2 {
		if err := b.Set([]byte(kv[i]), []byte(kv[i+1])); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(index); err != nil {
		t.Fatal(err)
	}
}

// checkpointOf makes a store holding kv at index and returns the
// directory of its checkpoint.
func checkpointOf(t *testing.T, index uint64, kv ...string) string {
	t.Helper()
	src := openT(t, t.TempDir())
	defer src.Close()
	commit(t, src, index, kv...)
	cp := filepath.Join(t.TempDir(), "cp")
	if err := src.Checkpoint(cp); err != nil {
		t.Fatal(err)
	}
	return cp
}

func TestInstallReplacesTheStore(t *testing.T) {
	cp := checkpointOf(t, 40, "new", "yes")

	root := t.TempDir()
	s := openT(t, root)
	commit(t, s, 90, "old", "yes")
	installFrom(t, s, cp)
	if s.Applied() != 40 {
		t.Fatalf("applied after install = %d, want 40", s.Applied())
	}
	if got, want := fmt.Sprint(keys(t, s.Scan, "a", "z")), "[new=yes]"; got != want {
		t.Fatalf("after install the store holds %s, want %s", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, root); got != "[CURRENT store-000002]" {
		t.Fatalf("after install the root holds %s", got)
	}
	s = openT(t, root)
	defer s.Close()
	if got, want := fmt.Sprint(keys(t, s.Scan, "a", "z")), "[new=yes]"; got != want || s.Applied() != 40 {
		t.Fatalf("reopened after install: %s at %d, want %s at 40", got, s.Applied(), want)
	}
}

// TestReplaceFilesChecksBeforeInstalling: a database whose files were
// written in is handed to the check read-only, and installed only if the
// check passes; a failed check keeps the old contents and leaves no
// directory behind.
func TestReplaceFilesChecksBeforeInstalling(t *testing.T) {
	cp := checkpointOf(t, 40, "new", "yes")

	root := t.TempDir()
	s := openT(t, root)
	defer s.Close()
	commit(t, s, 90, "old", "yes")
	refused := errors.New("refused")
	err := s.ReplaceFiles(func(dir string) error { copyDir(t, cp, dir); return nil }, func(fz *Frozen) error {
		if v, ok := mustGet(t, fz.Get, "new"); !ok || v != "yes" || fz.Applied() != 40 {
			t.Errorf("the check reads new=%q (%v) at %d, want yes at 40", v, ok, fz.Applied())
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("ReplaceFiles with a failing check: %v", err)
	}
	if got := fmt.Sprint(keys(t, s.Scan, "a", "z")); got != "[old=yes]" || s.Applied() != 90 {
		t.Fatalf("after a refused replace the store holds %s at %d", got, s.Applied())
	}
	if got := dirNames(t, root); got != "[CURRENT store-000001]" {
		t.Fatalf("after a refused replace the root holds %s", got)
	}
	if err := s.ReplaceFiles(func(dir string) error { copyDir(t, cp, dir); return nil }, func(*Frozen) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(keys(t, s.Scan, "a", "z")); got != "[new=yes]" || s.Applied() != 40 {
		t.Fatalf("after the replace the store holds %s at %d", got, s.Applied())
	}
}

func dirNames(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return fmt.Sprint(names)
}

// TestOpenFinishesAnInterruptedInstall makes, by hand, the directory as an
// Install interrupted at each of its steps leaves it, and checks that Open
// serves the database CURRENT names and removes the other.
func TestOpenFinishesAnInterruptedInstall(t *testing.T) {
	for _, tc := range []struct {
		name    string
		current string            // what CURRENT names when the crash comes
		dirs    map[string]string // the directories left, and what each holds
		want    string
	}{
		{"filling the install directory", "store-000001", map[string]string{"store-000001": "old", "install-123": "new"}, "old"},
		{"moved in, CURRENT not yet written", "store-000001", map[string]string{"store-000001": "old", "store-000002": "new"}, "old"},
		{"CURRENT written, old not yet removed", "store-000002", map[string]string{"store-000001": "old", "store-000002": "new"}, "new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for name, value := range tc.dirs {
				makeStore(t, filepath.Join(root, name), value)
			}
			if err := os.WriteFile(filepath.Join(root, currentFile), []byte(tc.current+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			s := openT(t, root)
			defer s.Close()
			if v, _ := mustGet(t, s.Get, "which"); v != tc.want {
				t.Fatalf("the store serves %q, want %q", v, tc.want)
			}
			if got, want := dirNames(t, root), fmt.Sprintf("[%s %s]", currentFile, tc.current); got != want {
				t.Fatalf("root holds %s, want %s", got, want)
			}
		})
	}
}

// makeStore makes a database in dir holding which=value.
func makeStore(t *testing.T, dir, value string) {
	t.Helper()
	s := openT(t, t.TempDir())
	commit(t, s, 1, "which", value)
	if err := s.Checkpoint(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestOpenRefusesAStrangeCurrent(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, currentFile), []byte("../elsewhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root, Options{}); err == nil {
		t.Fatal("a CURRENT naming no store directory was taken")
	}
}

func TestInstallTakesOnlyItsOwnDirectories(t *testing.T) {
	root := t.TempDir()
	s := openT(t, root)
	defer s.Close()
	other := t.TempDir()
	if err := s.Install(other); err == nil {
		t.Fatal("Install took a directory InstallDir did not make")
	}
	if err := s.Install(filepath.Join(root, "store-000001")); err == nil {
		t.Fatal("Install took the live database")
	}
}

func TestOpenWithoutCurrentNeverDropsADatabase(t *testing.T) {
	root := t.TempDir()
	makeStore(t, filepath.Join(root, "store-000003"), "kept")
	if _, err := Open(root, Options{}); err == nil {
		t.Fatal("a root with a database but no CURRENT was opened as a new store")
	}
	root = t.TempDir()
	makeStore(t, filepath.Join(root, "store-000001"), "kept")
	if _, err := Open(root, Options{}); err == nil {
		t.Fatal("a first database holding commits but no CURRENT was opened as a new store")
	}
	if got := dirNames(t, root); got != "[store-000001]" {
		t.Fatalf("the refused root now holds %s", got)
	}
}

func TestOpenRefusesAMissingDatabase(t *testing.T) {
	root := t.TempDir()
	s := openT(t, root)
	commit(t, s, 3, "a", "1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "store-000001")); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(root, Options{}); err == nil {
		t.Fatal("a CURRENT naming a missing database opened an empty store")
	}
}

func TestViewKeepsItsState(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	commit(t, s, 1, "a", "1")
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, 2, "a", "2", "b", "2")
	if got, want := fmt.Sprint(keys(t, v.Scan, "a", "z")), "[a=1]"; got != want {
		t.Fatalf("the view shows %s after a later commit, want %s", got, want)
	}
	if got, _ := mustGet(t, v.Get, "a"); got != "1" {
		t.Fatalf("the view reads a = %q, want 1", got)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestReplace(t *testing.T) {
	root := t.TempDir()
	s := openT(t, root)
	commit(t, s, 9, "old", "1")
	boom := errors.New("boom")
	if err := s.Replace(0, func(w *Writer) error {
		if err := w.Set([]byte("new"), []byte("x")); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("a failed fill: %v", err)
	}
	if got := fmt.Sprint(keys(t, s.Scan, "a", "z")); got != "[old=1]" || s.Applied() != 9 {
		t.Fatalf("after a failed fill the store holds %s at %d", got, s.Applied())
	}
	big := bytes.Repeat([]byte("v"), 1<<20)
	if err := s.Replace(0, func(w *Writer) error {
		for i := range 10 { // more than one commit of the filling
			if err := w.Set(fmt.Appendf(nil, "new%d", i), big); err != nil {
				return err
			}
		}
		return w.Delete([]byte("new9"))
	}); err != nil {
		t.Fatal(err)
	}
	if n := len(keys(t, s.Scan, "a", "z")); n != 9 || s.Applied() != 0 {
		t.Fatalf("after Replace the store holds %d keys at %d, want 9 at 0", n, s.Applied())
	}
	commit(t, s, 1, "next", "1")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, root); got != "[CURRENT store-000002]" {
		t.Fatalf("after Replace the root holds %s", got)
	}
}

// TestOpenRemakesAnInterruptedCreation: a first database without CURRENT
// that pebble cannot open (a power loss in the middle of its creation) is
// made again; nothing was ever committed to it.
func TestOpenRemakesAnInterruptedCreation(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "store-000001")
	makeStore(t, dir, "never committed")
	manifests, err := filepath.Glob(filepath.Join(dir, "MANIFEST-*"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no MANIFEST in a new database: %v", err)
	}
	for _, m := range manifests {
		if err := os.Truncate(m, 0); err != nil {
			t.Fatal(err)
		}
	}
	s := openT(t, root)
	defer s.Close()
	if s.Applied() != 0 || len(keys(t, s.Scan, "a", "z")) != 0 {
		t.Fatalf("the remade store is at %d with keys %v, want an empty one", s.Applied(), keys(t, s.Scan, "a", "z"))
	}
	if got := dirNames(t, root); got != "[CURRENT store-000001]" {
		t.Fatalf("root holds %s", got)
	}
}

// TestTheLastWriteOfAKeyInABatchWins: a batch hands its writes to pebble
// in key order, and of a key written more than once only the last counts.
func TestTheLastWriteOfAKeyInABatchWins(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	b := s.Begin()
	for _, k := range []string{"d", "c", "b", "a"} {
		must(b.Set([]byte(k), []byte("old")))
	}
	must(b.Commit(1))

	b = s.Begin()
	must(b.Set([]byte("z"), []byte("1")))
	must(b.Delete([]byte("a"))) // deleted, then set again
	must(b.Set([]byte("a"), []byte("new")))
	must(b.Set([]byte("b"), []byte("x"))) // set, then deleted
	must(b.Delete([]byte("b")))
	must(b.Set([]byte("c"), []byte("1"))) // set three times
	must(b.Set([]byte("c"), []byte("2")))
	must(b.Set([]byte("c"), []byte("3")))
	must(b.Set([]byte("e"), []byte("x"))) // a new key set, then deleted
	must(b.Delete([]byte("e")))
	must(b.Commit(2))
	if got, want := fmt.Sprint(keys(t, s.Scan, "a", "zz")), "[a=new c=3 d=old z=1]"; got != want {
		t.Fatalf("after the batch: %s, want %s", got, want)
	}
}

// TestABatchIsDoneAtItsCommit: a batch's buffers go to the next batch, so
// a batch used after its Commit or Discard must refuse, not write into them.
func TestABatchIsDoneAtItsCommit(t *testing.T) {
	s := openT(t, t.TempDir())
	defer s.Close()
	b := s.Begin()
	must(b.Set([]byte("a"), []byte("1")))
	must(b.Commit(1))
	next := s.Begin() // takes over b's buffers
	if err := b.Set([]byte("b"), []byte("2")); err == nil {
		t.Fatal("a committed batch took a write")
	}
	if err := b.Commit(2); err == nil {
		t.Fatal("a committed batch committed again")
	}
	must(next.Set([]byte("c"), []byte("3")))
	must(next.Commit(2))
	d := s.Begin()
	d.Discard()
	if err := d.Set([]byte("d"), []byte("4")); err == nil {
		t.Fatal("a discarded batch took a write")
	}
	if got, want := fmt.Sprint(keys(t, s.Scan, "a", "z")), "[a=1 c=3]"; got != want {
		t.Fatalf("store = %s, want %s", got, want)
	}
}

// TestFlushesAndCompactionsAreLogged: each flush and compaction that ends
// is logged at debug level with its sizes and duration, and no key it
// held.
func TestFlushesAndCompactionsAreLogged(t *testing.T) {
	var logs bytes.Buffer
	l := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Debug})
	s, err := Open(t.TempDir(), Options{MemTableBytes: 1 << 20, CacheBytes: 1 << 20, Logger: l})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const secretKey = "key-that-must-not-be-logged"
	for i := range 4 {
		b := s.Begin()
		if err := b.Set(fmt.Appendf(nil, "%s-%d", secretKey, i), bytes.Repeat([]byte{1}, 100)); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(uint64(i + 1)); err != nil {
			t.Fatal(err)
		}
		if err := s.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.live.Load().Compact(context.Background(), []byte("a"), []byte("z"), true); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, want := range []string{"state store flushed: job=", "table_bytes=", "state store compacted: job=", "output_bytes="} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the store's log:\n%s", want, out)
		}
	}
	if strings.Contains(out, secretKey) {
		t.Errorf("a key is in the store's log:\n%s", out)
	}
}

// TestAViewOutlivesAnInstall: a view taken before an install (a backup or
// a key filter build reading while a snapshot is installed) goes on
// reading the old database, which is closed and removed only when the
// last view of it is closed; the install itself neither waits for it nor
// fails.
func TestAViewOutlivesAnInstall(t *testing.T) {
	cp := checkpointOf(t, 40, "new", "yes")

	root := t.TempDir()
	s := openT(t, root)
	defer s.Close()
	commit(t, s, 90, "old", "yes", "older", "yes")
	v, err := s.View()
	if err != nil {
		t.Fatal(err)
	}
	// A scan in progress across the install.
	inScan, resume := make(chan struct{}), make(chan struct{})
	scanned := make(chan string, 1)
	go func() {
		var got []string
		first := true
		err := v.Scan([]byte("a"), []byte("z"), func(k, _ []byte) bool {
			if first {
				first = false
				close(inScan)
				<-resume
			}
			got = append(got, string(k))
			return true
		})
		scanned <- fmt.Sprint(got, err)
	}()
	<-inScan
	installFrom(t, s, cp)
	close(resume)
	if got, want := <-scanned, "[old older] <nil>"; got != want {
		t.Fatalf("the scan across the install read %s, want %s", got, want)
	}
	if got, _ := mustGet(t, v.Get, "old"); got != "yes" {
		t.Fatalf("the view reads old = %q after the install, want yes", got)
	}
	if got, want := fmt.Sprint(keys(t, s.Scan, "a", "z")), "[new=yes]"; got != want {
		t.Fatalf("after install the store holds %s, want %s", got, want)
	}
	if got := dirNames(t, root); got != "[CURRENT store-000001 store-000002]" {
		t.Fatalf("with a view of the old database open the root holds %s", got)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, root); got != "[CURRENT store-000002]" {
		t.Fatalf("after the last view of the old database closed the root holds %s", got)
	}
}

// TestReadsRaceInstalls: views, gets and scans taken while installs
// replace the database each read one whole database or the other, never
// a closed one, and every replaced database is gone once its readers are.
func TestReadsRaceInstalls(t *testing.T) {
	cps := []string{checkpointOf(t, 40, "k", "a"), checkpointOf(t, 41, "k", "b")}
	root := t.TempDir()
	s := openT(t, root)
	defer s.Close()
	commit(t, s, 1, "k", "0")
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for r := 0; r < 2; r++ {
		go func() {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				v, err := s.View()
				if err != nil {
					errs <- err
					return
				}
				n := 0
				err = v.Scan([]byte("a"), []byte("z"), func(_, _ []byte) bool { n++; return true })
				if cerr := v.Close(); err == nil {
					err = cerr
				}
				if _, ok, gerr := s.Get([]byte("k")); err == nil && (gerr != nil || !ok) {
					err = fmt.Errorf("get k: %v, found %v", gerr, ok)
				}
				if err == nil && n != 1 {
					err = fmt.Errorf("a view held %d keys, want 1", n)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := 0; i < 20; i++ {
		installFrom(t, s, cps[i%2])
	}
	close(stop)
	for r := 0; r < 2; r++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := dirNames(t, root); got != "[CURRENT store-000021]" {
		t.Fatalf("after the installs and their readers the root holds %s", got)
	}
}
