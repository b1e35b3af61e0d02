package faultfs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// childEnv marks the test binary run as a child process: code that reads
// files of the mount through a mapping must not run in the process that
// serves the mount. A page fault on the mount blocks its thread without
// the Go runtime knowing, and a garbage collection that then stops the
// world waits for that thread while the fault waits for the stopped FUSE
// server: both hang for good.
const childEnv = "FAULTFS_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := runChild(os.Args[1:], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// child starts the test binary as a child process doing what args say,
// killed if the test outlives a minute.
func child(t *testing.T, args ...string) (cmd *exec.Cmd, stdin io.WriteCloser, stdout *bufio.Reader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cmd = exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd, stdin, bufio.NewReader(out)
}

// runChildToEnd runs a child process and fails the test if it fails.
func runChildToEnd(t *testing.T, args ...string) {
	t.Helper()
	cmd, stdin, _ := child(t, args...)
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child %q: %v", args, err)
	}
}

// runChild does in a child process what args say.
func runChild(args []string, in io.Reader, out io.Writer) error {
	if len(args) < 2 {
		return fmt.Errorf("child arguments %q", args)
	}
	role, p := args[0], args[1]
	var nums []int
	for _, a := range args[2:] {
		n, err := strconv.Atoi(a)
		if err != nil {
			return fmt.Errorf("child arguments %q: %w", args, err)
		}
		nums = append(nums, n)
	}
	switch {
	case role == "bolt-write" && len(nums) == 2:
		return boltWrite(p, nums[0], nums[1])
	case role == "bolt-check" && len(nums) == 1:
		return boltCheck(p, nums[0])
	case role == "map" && len(nums) == 0:
		return mapAndRead(p, in, out)
	}
	return fmt.Errorf("child arguments %q", args)
}

const boltBucket = "b"

func boltValue(i int) []byte { return bytes.Repeat([]byte{byte(i)}, 100+i%300) }

func boltOpen(dir string) (*bolt.DB, error) {
	return bolt.Open(dir+"/raft.db", 0o600, &bolt.Options{Timeout: time.Second})
}

// boltWrite commits keys 0 to synced-1, one a transaction, and then, with
// syncing turned off, the next unsynced keys.
func boltWrite(dir string, synced, unsynced int) error {
	db, err := boltOpen(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	// bbolt syncs its file but not the directory that names it.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return err
	}
	for i := range synced + unsynced {
		if i == synced {
			db.NoSync, db.NoGrowSync = true, true
		}
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte(boltBucket))
			if err != nil {
				return err
			}
			return b.Put(fmt.Appendf(nil, "k%04d", i), boltValue(i))
		})
		if err != nil {
			return err
		}
	}
	return db.Close()
}

// boltCheck checks the database's consistency, and that it holds keys 0
// to keys-1 with their values and nothing else.
func boltCheck(dir string, keys int) error {
	db, err := boltOpen(dir)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *bolt.Tx) error {
		var errs []error
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		b := tx.Bucket([]byte(boltBucket))
		if b == nil {
			return errors.Join(append(errs, errors.New("no bucket"))...)
		}
		n := 0
		err := b.ForEach(func(k, v []byte) error {
			if want := fmt.Sprintf("k%04d", n); string(k) != want || !bytes.Equal(v, boltValue(n)) {
				return fmt.Errorf("entry %d is %s with %d bytes, want %s with %d", n, k, len(v), want, len(boltValue(n)))
			}
			n++
			return nil
		})
		if err == nil && n != keys {
			err = fmt.Errorf("%d keys, want %d", n, keys)
		}
		return errors.Join(append(errs, err)...)
	})
}

// mapAndRead maps the file p (its first page at least) and answers each
// line "OFFSET LENGTH" read from in with the mapped bytes, quoted.
func mapAndRead(p string, in io.Reader, out io.Writer) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	defer unix.Munmap(m)
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		var off, n int
		if _, err := fmt.Sscan(lines.Text(), &off, &n); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "%q\n", m[off:off+n]); err != nil {
			return err
		}
	}
	return lines.Err()
}

// TestBoltSurvivesPowerLoss: a bbolt database (pwrite and fdatasync to
// write, a mapping to read) keeps every commit it synced and none it did
// not.
func TestBoltSurvivesPowerLoss(t *testing.T) {
	e := mountEnv(t, nil)
	const synced, unsynced = 300, 50
	runChildToEnd(t, "bolt-write", e.mnt, strconv.Itoa(synced), strconv.Itoa(unsynced))
	e.powerLoss()
	runChildToEnd(t, "bolt-check", e.mnt, strconv.Itoa(synced))
}

// TestMappedReadsSeeWrites: a shared mapping sees what pwrite writes
// through another process's descriptor, and after a power loss what was
// synced.
func TestMappedReadsSeeWrites(t *testing.T) {
	e := mountEnv(t, nil)
	e.durable("f", string(make([]byte, 8192)))
	cmd, stdin, stdout := child(t, "map", e.path("f"))
	read := func(off, n int) string {
		t.Helper()
		if _, err := fmt.Fprintln(stdin, off, n); err != nil {
			t.Fatal(err)
		}
		line, err := stdout.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the mapping: %v", err)
		}
		s, err := strconv.Unquote(line[:len(line)-1])
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if got := read(5000, 6); got != "\x00\x00\x00\x00\x00\x00" {
		t.Fatalf("mapped bytes at 5000 are %q before the write", got)
	}
	w := e.open("f", os.O_RDWR)
	if _, err := w.WriteAt([]byte("synced"), 5000); err != nil {
		t.Fatal(err)
	}
	e.fdatasync(w)
	if _, err := w.WriteAt([]byte("lost"), 100); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if got := read(5000, 6) + read(100, 4); got != "syncedlost" {
		t.Fatalf("the mapping reads %q, want syncedlost", got)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	e.powerLoss()
	_, stdin, stdout = child(t, "map", e.path("f"))
	if got := read(5000, 6) + read(100, 4); got != "synced\x00\x00\x00\x00" {
		t.Errorf("after the power loss the mapping reads %q", got)
	}
	stdin.Close()
}
