package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/fsm"
)

// archiveOf writes files into a new directory and returns their archive.
func archiveOf(t *testing.T, files map[string]string, applied uint64) []byte {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	a, err := openArchive(dir, applied)
	if err != nil {
		t.Fatal(err)
	}
	size := a.size()
	var buf bytes.Buffer
	if err := a.writeTo(&buf); err != nil {
		t.Fatal(err)
	}
	if int64(buf.Len()) != size {
		t.Fatalf("the archive has %d bytes, its size said %d", buf.Len(), size)
	}
	return buf.Bytes()
}

// TestArchiveRoundTrip: a store's files come out of an archive as they
// went in, with the index it holds; reading without a directory only
// checks.
func TestArchiveRoundTrip(t *testing.T) {
	files := map[string]string{"000004.sst": strings.Repeat("x", 100_000), "MANIFEST-000001": "m", "OPTIONS-000003": "", "CURRENT": "MANIFEST-000001\n"}
	b := archiveOf(t, files, 77)
	if applied, err := readArchive(bytes.NewReader(b), ""); err != nil || applied != 77 {
		t.Fatalf("check: %d %v", applied, err)
	}
	dir := t.TempDir()
	applied, err := readArchive(bytes.NewReader(b), dir)
	if err != nil || applied != 77 {
		t.Fatalf("read: %d %v", applied, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(files) {
		t.Fatalf("%d files came out, %d went in", len(entries), len(files))
	}
	for name, body := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != body {
			t.Fatalf("%s: %d bytes (%v), want %d", name, len(got), err, len(body))
		}
	}
}

// TestArchiveDamageIsRefused: any changed byte, a cut anywhere, bytes
// after the end, a name that leaves the directory or repeats, fail the
// read as a damaged archive.
func TestArchiveDamageIsRefused(t *testing.T) {
	b := archiveOf(t, map[string]string{"000004.sst": "table", "MANIFEST-000001": "manifest"}, 9)
	for i := range b {
		d := bytes.Clone(b)
		d[i] ^= 0x10
		if _, err := readArchive(bytes.NewReader(d), t.TempDir()); !errors.Is(err, errArchive) {
			t.Fatalf("byte %d changed: %v, want a damaged archive", i, err)
		}
	}
	for n := range len(b) {
		if _, err := readArchive(bytes.NewReader(b[:n]), ""); !errors.Is(err, errArchive) {
			t.Fatalf("cut to %d bytes: %v, want a damaged archive", n, err)
		}
	}
	if _, err := readArchive(bytes.NewReader(append(bytes.Clone(b), 0)), ""); !errors.Is(err, errArchive) {
		t.Fatalf("a byte after the end: %v, want a damaged archive", err)
	}
	// Files whose own checksums hold: only the name can fail them.
	for _, names := range [][]string{{"../escape"}, {"a/b"}, {"."}, {".."}, {".hidden"}, {"same", "same"}} {
		var w bytes.Buffer
		w.WriteString(archiveMagic)
		for _, name := range names {
			w.Write(binary.AppendUvarint(nil, uint64(len(name))))
			w.WriteString(name)
			w.Write(binary.AppendUvarint(nil, 0))
			w.Write(binary.BigEndian.AppendUint32(nil, crc32.Checksum([]byte(name), castagnoli)))
		}
		dir := t.TempDir()
		if _, err := readArchive(&w, dir); !errors.Is(err, errArchive) {
			t.Fatalf("names %q: %v, want a damaged archive", names, err)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(dir), "escape")); err == nil {
			t.Fatalf("names %q: a file was written outside the directory", names)
		}
	}
}

// soloArchive starts a node alone, grants it ten keys and returns it with
// its snapshot as an archive (snapshotArchive).
func soloArchive(t *testing.T) (*Node, []byte) {
	t.Helper()
	n := open(t, testConfig(t, "solo", t.TempDir(), true))
	waitReadyLeader(t, n)
	grantKeys(t, n, 0, 10)
	return n, snapshotArchive(t, n)
}

// snapshotArchive takes a snapshot of n and returns it as Raft reads it
// to send a follower: an archive of the checkpoint's store files.
func snapshotArchive(t *testing.T, n *Node) []byte {
	t.Helper()
	if err := n.raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	metas, err := n.snaps.List()
	if err != nil {
		t.Fatal(err)
	}
	_, rc, err := n.snaps.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := io.ReadAll(rc)
	_ = rc.Close()
	if err != nil || !isArchive(archive) {
		t.Fatalf("raft reads the snapshot as %d bytes (%v), an archive: %v", len(archive), err, isArchive(archive))
	}
	return archive
}

// TestReceivedStoreFilesReplaceTheState: a node given a snapshot that is
// another store's files takes that state whole; given one damaged
// anywhere, it keeps its own and leaves its store as it was.
func TestReceivedStoreFilesReplaceTheState(t *testing.T) {
	n, archive := soloArchive(t)
	atSnapshot := n.fsm.StateHash()
	grantKeys(t, n, 10, 20)
	now, dir := n.fsm.StateHash(), n.state.Dir()
	d := durableFSM{FSM: n.fsm, state: n.state, log: n.log}
	for _, at := range []int{len(archiveMagic) + 3, len(archive) / 2, len(archive) - 2} {
		bad := bytes.Clone(archive)
		bad[at] ^= 0x01
		if err := d.Restore(io.NopCloser(bytes.NewReader(bad))); err == nil {
			t.Fatalf("a snapshot damaged at byte %d was installed", at)
		}
		if n.fsm.StateHash() != now || n.state.Dir() != dir {
			t.Fatalf("a refused snapshot (damaged at byte %d) changed the state", at)
		}
	}
	if err := d.Restore(io.NopCloser(bytes.NewReader(archive))); err != nil {
		t.Fatal(err)
	}
	if n.fsm.StateHash() != atSnapshot {
		t.Fatal("the installed store files do not hold the snapshot's state")
	}
}

// memSink is a snapshot sink in memory, holding no checkpoint: what
// persists into it is written in the state machine's format.
type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// TestASnapshotTakenBeforeAnInstallPersistsItsOwnState: Raft may persist
// a snapshot while the node installs one it received (Persist runs beside
// the state machine's goroutine); the snapshot taken first still writes
// the state it was taken of, read from the store the install replaced.
func TestASnapshotTakenBeforeAnInstallPersistsItsOwnState(t *testing.T) {
	n, archive := soloArchive(t)
	grantKeys(t, n, 10, 25)
	d := durableFSM{FSM: n.fsm, state: n.state, log: n.log}
	taken, err := d.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Release()
	if err := d.Restore(io.NopCloser(bytes.NewReader(archive))); err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := taken.Persist(&sink); err != nil {
		t.Fatalf("persist a snapshot taken before the install: %v", err)
	}
	sum, err := fsm.InspectSnapshot(sink.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if sum.Leases != 25 {
		t.Fatalf("the snapshot taken with 25 leases persisted %d", sum.Leases)
	}
	if got := n.fsm.Stats().Leases; got != 10 {
		t.Fatalf("after the install the state holds %d leases, want 10", got)
	}
}
