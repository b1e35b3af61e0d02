package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/raftlog"
	"github.com/holdfast/holdfast/internal/testutil"
	"github.com/holdfast/holdfast/test/faultfs"
)

// testHealth is a tracker logging into a buffer, with a clock the test moves.
func testHealth(t *testing.T) (*storageHealth, *testutil.SyncBuffer, *time.Time) {
	t.Helper()
	buf := &testutil.SyncBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Trace})
	now := time.Unix(1_800_000_000, 0)
	return newStorageHealth("/data/n1", log, func() time.Time { return now }), buf, &now
}

func noSpace(path string) error {
	return fmt.Errorf("raftlog: prepare %s: %w: %w", path, raftlog.ErrNoSpace, syscall.ENOSPC)
}

// TestStorageEpisodeLoggedOnce: repeated failures of one kind make one
// episode, logged once when it starts and once when it ends (with its
// duration and the library lines held back); the status, the write fault
// and the episode counts follow it.
func TestStorageEpisodeLoggedOnce(t *testing.T) {
	h, buf, now := testHealth(t)
	if st := h.status(); !st.OK || len(st.Faults) != 0 || st.DataDir != "/data/n1" {
		t.Fatalf("fresh status %+v", st)
	}
	for range 5 {
		h.report(StorageLog, noSpace("/data/n1/raft-log/next-segment.tmp"))
		*now = now.Add(time.Second)
	}
	if n := strings.Count(buf.String(), "storage fault:"); n != 1 {
		t.Fatalf("%d start lines for one episode:\n%s", n, buf)
	}
	for _, want := range []string{"data_dir=/data/n1", "kind=raft-log", "no space left on device"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the start line lacks %q:\n%s", want, buf)
		}
	}
	st := h.status()
	if st.OK || len(st.Faults) != 1 || st.Faults[0].Kind != StorageLog || st.Faults[0].SinceUnixMs != 1_800_000_000_000 {
		t.Fatalf("status during the episode %+v", st)
	}
	se := h.writeFault("n1")
	if se == nil || se.Kind != StorageLog || !errors.Is(se, ErrStorage) || !errors.Is(se, raftlog.ErrNoSpace) || se.Reason() != "no space left on device" {
		t.Fatalf("write fault %#v", se)
	}
	if !h.holdBack("failed to commit logs") || !h.holdBack("failed to append to logs") {
		t.Errorf("a failed append's library line is not held back during the episode")
	}
	h.report(StorageLog, nil)
	h.report(StorageLog, nil)
	if n := strings.Count(buf.String(), "storage fault over"); n != 1 {
		t.Fatalf("%d end lines for one episode:\n%s", n, buf)
	}
	for _, want := range []string{"duration=5s", "raft_lines_held_back=2"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the end line lacks %q:\n%s", want, buf)
		}
	}
	if st := h.status(); !st.OK || len(st.Faults) != 0 {
		t.Fatalf("status after the episode %+v", st)
	}
	if h.writeFault("n1") != nil || h.holdBack("failed to commit logs") {
		t.Errorf("the episode is over but writes are still refused or lines held back")
	}
	h.report(StorageLog, noSpace("x"))
	if c := h.episodeCounts(); c[StorageLog] != 2 || c[StorageStable] != 0 || c[StorageSnapshots] != 0 {
		t.Errorf("episode counts %v, want 2 of raft-log and every kind listed", c)
	}
}

// TestSnapshotFaultDoesNotBlockElections: a snapshot that cannot be written
// is reported, but the node can still write its log and stays electable.
func TestSnapshotFaultDoesNotBlockElections(t *testing.T) {
	h, _, _ := testHealth(t)
	h.report(StorageSnapshots, syscall.ENOSPC)
	if st := h.status(); st.OK || st.Faults[0].Kind != StorageSnapshots {
		t.Fatalf("status %+v", st)
	}
	if h.writeFault("n1") != nil {
		t.Errorf("a snapshot fault blocks writes")
	}
	if h.holdBack("failed to commit logs") {
		t.Errorf("an append's line held back during a snapshot fault")
	}
	if !h.holdBack("failed to take snapshot") {
		t.Errorf("the repeated snapshot line is not held back")
	}
	h.report(StorageStable, syscall.EIO)
	if se := h.writeFault("n1"); se == nil || se.Kind != StorageStable || se.Reason() != syscall.EIO.Error() {
		t.Errorf("raft.db fault: write fault %#v", se)
	}
}

// TestPoisonedStoreIsFatal: an error wrapping raftlog.ErrPoisoned closes the
// fatal channel once, with an error naming the data dir.
func TestPoisonedStoreIsFatal(t *testing.T) {
	h, _, _ := testHealth(t)
	select {
	case <-h.fatal:
		t.Fatal("fatal before any error")
	default:
	}
	h.report(StorageLog, noSpace("x"))
	select {
	case <-h.fatal:
		t.Fatal("a full disk is fatal")
	default:
	}
	poisoned := fmt.Errorf("raftlog: sync seg: %w: %w", raftlog.ErrPoisoned, syscall.EIO)
	h.report(StorageLog, poisoned)
	h.report(StorageLog, poisoned)
	select {
	case <-h.fatal:
	default:
		t.Fatal("a poisoned store is not fatal")
	}
	if !errors.Is(h.fatalErr, raftlog.ErrPoisoned) || !strings.Contains(h.fatalErr.Error(), "/data/n1") {
		t.Errorf("fatal error %v", h.fatalErr)
	}
}

// TestQuietLoggerHoldsBackRepeats: through the Raft library's logger (and
// loggers derived from it) the lines a fault repeats are held back while it
// lasts; other lines, and the same lines without a fault, pass.
func TestQuietLoggerHoldsBackRepeats(t *testing.T) {
	h, _, _ := testHealth(t)
	out := &testutil.SyncBuffer{}
	var log hclog.Logger = quietLogger{hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Trace}), h, nil}
	log = log.Named("raft").With("node", "n1")
	log.Error("failed to commit logs", "error", "x")
	h.report(StorageLog, noSpace("x"))
	for range 3 {
		log.Error("failed to commit logs", "error", "x")
		log.Info("entering candidate state", "term", 3)
		log.Log(hclog.Error, "failed to append to logs")
		log.ResetNamed("raft").Warn("heartbeat timeout reached, starting election")
	}
	log.Info("election won", "term", 3)
	h.report(StorageLog, nil)
	log.Error("failed to append to logs", "error", "y")
	got := out.String()
	if n := strings.Count(got, "failed to commit logs"); n != 1 {
		t.Errorf("%d 'failed to commit logs' lines, want the one before the fault:\n%s", n, got)
	}
	if n := strings.Count(got, "failed to append to logs"); n != 1 {
		t.Errorf("%d 'failed to append to logs' lines, want the one after the fault:\n%s", n, got)
	}
	for _, held := range []string{"entering candidate state", "heartbeat timeout reached"} {
		if strings.Contains(got, held) {
			t.Errorf("%q passed during the fault:\n%s", held, got)
		}
	}
	if !strings.Contains(got, "election won") || !strings.Contains(got, "raft: ") {
		t.Errorf("other lines or the logger's name lost:\n%s", got)
	}
}

// gatePair connects two in-memory transports, a's wrapped in a raftGate
// that refuses votes with refuse and holds everything with hold.
func gatePair(t *testing.T, refuse, hold func() error) (*raftGate, *raft.InmemTransport) {
	t.Helper()
	_, a := raft.NewInmemTransport("a")
	_, b := raft.NewInmemTransport("b")
	g := &raftGate{gatedTransport: a, refuse: refuse, hold: hold}
	g.Connect("b", b)
	b.Connect("a", a)
	t.Cleanup(func() {
		_ = g.Close()
		_ = b.Close()
	})
	return g, b
}

// answer replies to one RPC arriving at b, and reports whether one came.
func answer(b *raft.InmemTransport, resp interface{}) <-chan bool {
	got := make(chan bool, 1)
	go func() {
		select {
		case rpc := <-b.Consumer():
			rpc.Respond(resp, nil)
			got <- true
		case <-time.After(300 * time.Millisecond):
			got <- false
		}
	}()
	return got
}

// TestVoteGate: while storage fails no vote or pre-vote request leaves the
// node (each fails locally naming the fault); otherwise they pass, as do
// other RPCs; the wrapped transport's close, peers and pre-vote stay.
func TestVoteGate(t *testing.T) {
	var fault error = &StorageError{NodeID: "a", Kind: StorageLog, Err: syscall.ENOSPC}
	g, b := gatePair(t, func() error { return fault }, func() error { return nil })
	var tr raft.Transport = g
	if _, ok := tr.(raft.WithPreVote); !ok {
		t.Fatal("the gate hides pre-vote support")
	}
	if _, ok := tr.(raft.WithClose); !ok {
		t.Fatal("the gate hides Close")
	}
	if _, ok := tr.(raft.WithPeers); !ok {
		t.Fatal("the gate hides peer management")
	}

	got := answer(b, &raft.RequestVoteResponse{Granted: true})
	err := g.RequestVote("b", "b", &raft.RequestVoteRequest{Term: 2}, &raft.RequestVoteResponse{})
	if !errors.Is(err, errStayOut) || !errors.Is(err, ErrStorage) {
		t.Errorf("RequestVote while failing: %v", err)
	}
	if <-got {
		t.Errorf("a vote request reached the peer while storage fails")
	}
	got = answer(b, &raft.RequestPreVoteResponse{Granted: true})
	err = g.RequestPreVote("b", "b", &raft.RequestPreVoteRequest{Term: 2}, &raft.RequestPreVoteResponse{})
	if !errors.Is(err, errStayOut) || strings.Contains(err.Error(), "unexpected command") {
		// Raft counts a pre-vote failing with "unexpected command" as granted.
		t.Errorf("RequestPreVote while failing: %v", err)
	}
	if <-got {
		t.Errorf("a pre-vote request reached the peer while storage fails")
	}
	got = answer(b, &raft.AppendEntriesResponse{Success: true})
	var ae raft.AppendEntriesResponse
	if err := g.AppendEntries("b", "b", &raft.AppendEntriesRequest{Term: 2}, &ae); err != nil || !ae.Success || !<-got {
		t.Errorf("AppendEntries while failing: %v %+v", err, ae)
	}

	fault = nil
	got = answer(b, &raft.RequestVoteResponse{Granted: true})
	var vr raft.RequestVoteResponse
	if err := g.RequestVote("b", "b", &raft.RequestVoteRequest{Term: 3}, &vr); err != nil || !vr.Granted || !<-got {
		t.Errorf("RequestVote once writes work: %v %+v", err, vr)
	}
	got = answer(b, &raft.RequestPreVoteResponse{Granted: true})
	var pr raft.RequestPreVoteResponse
	if err := g.RequestPreVote("b", "b", &raft.RequestPreVoteRequest{Term: 3}, &pr); err != nil || !pr.Granted || !<-got {
		t.Errorf("RequestPreVote once writes work: %v %+v", err, pr)
	}
}

// TestStableGuardRefusesOnlyTheSelfVote: while the log fails, raft.db
// refuses to record a vote for the node itself and records one for
// another candidate; a failed raft.db write is a StorageStable fault that
// the next working write ends.
func TestStableGuardRefusesOnlyTheSelfVote(t *testing.T) {
	h, _, _ := testHealth(t)
	inner := raft.NewInmemStore()
	failing := false
	g := &stableGuard{StableStore: &flakyStable{StableStore: inner, fail: &failing}, self: []byte("127.0.0.1:7071"), health: h,
		refuse: func() error {
			if f := h.writeFault("n1"); f != nil {
				return f
			}
			return nil
		}}
	key := []byte(keyLastVoteCand)
	if err := g.Set(key, []byte("127.0.0.1:7071")); err != nil {
		t.Fatalf("self vote while healthy: %v", err)
	}
	h.report(StorageLog, noSpace("x"))
	if err := g.Set(key, []byte("127.0.0.1:7071")); !errors.Is(err, errStayOut) {
		t.Errorf("self vote while the log fails: %v", err)
	}
	if err := g.Set(key, []byte("127.0.0.2:7071")); err != nil {
		t.Errorf("a vote for another candidate while the log fails: %v", err)
	}
	if v, _ := inner.Get(key); string(v) != "127.0.0.2:7071" {
		t.Errorf("recorded vote %q", v)
	}
	h.report(StorageLog, nil)

	failing = true
	if err := g.SetUint64([]byte("LastVoteTerm"), 4); err == nil {
		t.Fatal("the failing write succeeded")
	}
	if se := h.writeFault("n1"); se == nil || se.Kind != StorageStable {
		t.Fatalf("a failed raft.db write: write fault %#v", se)
	}
	failing = false
	if err := g.SetUint64([]byte("LastVoteTerm"), 4); err != nil {
		t.Fatal(err)
	}
	if !h.status().OK {
		t.Errorf("a working raft.db write does not end its episode: %+v", h.status())
	}

	// Raft panics when it cannot save a new term: the node stops instead,
	// and the call never returns (its goroutine waits for the process to
	// end, so this one is left waiting).
	failing = true
	returned := make(chan error, 1)
	go func() { returned <- g.SetUint64(keyCurrentTerm, 5) }()
	select {
	case <-h.fatal:
		if !strings.Contains(h.fatalErr.Error(), "save the current term 5") {
			t.Errorf("halted with %v", h.fatalErr)
		}
	case err := <-returned:
		t.Fatalf("a failed save of the current term returned (%v) instead of stopping the node", err)
	case <-time.After(5 * time.Second):
		t.Fatal("a failed save of the current term did not stop the node")
	}
	select {
	case err := <-returned:
		t.Fatalf("the failed save of the current term returned to Raft: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
}

// flakyStable fails every write while *fail is set.
type flakyStable struct {
	raft.StableStore
	fail *bool
}

func (f *flakyStable) Set(k, v []byte) error {
	if *f.fail {
		return syscall.ENOSPC
	}
	return f.StableStore.Set(k, v)
}

func (f *flakyStable) SetUint64(k []byte, v uint64) error {
	if *f.fail {
		return syscall.ENOSPC
	}
	return f.StableStore.SetUint64(k, v)
}

// failingLog fails every append with err.
type failingLog struct {
	raft.LogStore
	err error
}

func (f *failingLog) StoreLogs([]*raft.Log) error { return f.err }

// TestTypedLogKeepsTheStoreError: raft's LogCache turns an append's error
// into text; typedLog gives Raft the store's own error, so a proposal
// learns that nothing was written, and proposalError maps it.
func TestTypedLogKeepsTheStoreError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		unknown bool
	}{
		{"no space", noSpace("seg"), false},
		{"poisoned", fmt.Errorf("raftlog: sync: %w: %w", raftlog.ErrPoisoned, syscall.EIO), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			below := &watchedLog{LogStore: &failingLog{LogStore: raft.NewInmemStore(), err: tc.err}}
			cache, err := raft.NewLogCache(16, below)
			if err != nil {
				t.Fatal(err)
			}
			logs := &typedLog{LogStore: cache, below: below}
			got := logs.StoreLog(&raft.Log{Index: 1, Term: 1})
			if !errors.Is(got, tc.err) {
				t.Fatalf("StoreLog: %v, want the store's error %v", got, tc.err)
			}
			n := &Node{cfg: Config{NodeID: "n1"}, storage: newStorageHealth(t.TempDir(), hclog.NewNullLogger(), time.Now)}
			mapped := n.proposalError(got)
			var se *StorageError
			if !errors.As(mapped, &se) || se.NodeID != "n1" || se.Kind != StorageLog || errors.Is(mapped, ErrOutcomeUnknown) != tc.unknown {
				t.Errorf("proposalError: %v (outcome unknown %v, want %v)", mapped, errors.Is(mapped, ErrOutcomeUnknown), tc.unknown)
			}
		})
	}
}

// flakySnapshots fails Create while *fail is set.
type flakySnapshots struct {
	raft.SnapshotStore
	fail *bool
}

func (f *flakySnapshots) Create(v raft.SnapshotVersion, index, term uint64, c raft.Configuration, ci uint64, tr raft.Transport) (raft.SnapshotSink, error) {
	if *f.fail {
		return nil, fmt.Errorf("create snapshot: %w", syscall.ENOSPC)
	}
	return f.SnapshotStore.Create(v, index, term, c, ci, tr)
}

// TestSnapshotEpisode: a snapshot that cannot be made starts a snapshots
// fault, and the next snapshot closed successfully ends it.
func TestSnapshotEpisode(t *testing.T) {
	h, buf, _ := testHealth(t)
	fail := true
	s := &watchedSnapshots{SnapshotStore: &flakySnapshots{SnapshotStore: raft.NewInmemSnapshotStore(), fail: &fail}, health: h}
	if _, err := s.Create(raft.SnapshotVersionMax, 10, 1, raft.Configuration{}, 1, nil); err == nil {
		t.Fatal("the failing Create succeeded")
	}
	if st := h.status(); st.OK || st.Faults[0].Kind != StorageSnapshots {
		t.Fatalf("status after a failed snapshot %+v", st)
	}
	fail = false
	sink, err := s.Create(raft.SnapshotVersionMax, 11, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.status().OK {
		t.Fatalf("a snapshot being written ends the fault before it is closed")
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if st := h.status(); !st.OK {
		t.Fatalf("status after a snapshot closed successfully %+v", st)
	}
	if !strings.Contains(buf.String(), "kind=snapshots") || !strings.Contains(buf.String(), "storage fault over") {
		t.Errorf("the snapshots episode is not logged:\n%s", buf)
	}
}

// TestOtherAppendFailureIsUnknown: an append that failed for another reason
// than space (it may have written part of the entry) is of unknown outcome,
// and names the node's storage while its log fails.
func TestOtherAppendFailureIsUnknown(t *testing.T) {
	h, _, _ := testHealth(t)
	n := &Node{cfg: Config{NodeID: "n1"}, storage: h}
	eio := fmt.Errorf("raftlog: append: %w: %w", raftlog.ErrStorage, syscall.EIO)
	h.report(StorageLog, eio)
	got := n.proposalError(errors.New("unable to store logs within log store, err: \"...\""))
	var se *StorageError
	if !errors.Is(got, ErrOutcomeUnknown) || !errors.As(got, &se) || se.Reason() != syscall.EIO.Error() {
		t.Errorf("proposalError during a log fault: %v", got)
	}
	if c := n.Counters(); c.Proposals["outcome_unknown"] != 1 || c.Proposals["storage"] != 0 {
		t.Errorf("counters %v", c.Proposals)
	}
}

// TestNodeReportsStorage: on a running node, a storage fault shows in
// Ready (naming the data dir), Status and WriteFault, and ends with the
// store's report that it writes again; a poisoned log closes Fatal.
func TestNodeReportsStorage(t *testing.T) {
	dir := t.TempDir()
	n := open(t, testConfig(t, "n1", dir, true))
	waitReadyLeader(t, n)
	if st := n.Status().Storage; !st.OK || st.DataDir != dir || len(st.Faults) != 0 {
		t.Fatalf("healthy status %+v", st)
	}
	n.storage.report(StorageLog, noSpace(dir+"/raft-log/next-segment.tmp"))
	ok, why := n.Ready()
	if ok || !strings.Contains(why, "storage fault") || !strings.Contains(why, dir) || !strings.Contains(why, StorageLog) {
		t.Errorf("Ready during a fault: %v %q", ok, why)
	}
	if st := n.Status(); st.Ready || st.Storage.OK || st.Storage.Faults[0].Kind != StorageLog {
		t.Errorf("status during a fault %+v", st)
	}
	if se := n.WriteFault(); se == nil || se.NodeID != "n1" {
		t.Errorf("write fault %#v", se)
	}
	n.storage.report(StorageLog, nil)
	waitFor(t, "ready again", 5*time.Second, func() bool { ok, _ := n.Ready(); return ok })
	select {
	case <-n.Fatal():
		t.Fatal("fatal without a poisoned store")
	default:
	}
	n.storage.report(StorageLog, fmt.Errorf("raftlog: sync: %w: %w", raftlog.ErrPoisoned, syscall.EIO))
	select {
	case <-n.Fatal():
	default:
		t.Fatal("a poisoned log does not stop the node")
	}
	if err := n.FatalErr(); !errors.Is(err, raftlog.ErrPoisoned) {
		t.Errorf("FatalErr %v", err)
	}
	if ok, why := n.Ready(); ok || !strings.Contains(why, "stopping") {
		t.Errorf("Ready after poisoning: %v %q", ok, why)
	}
}

// TestSnapshotFaultEndsWithoutNewEntries: a snapshots fault is retried on
// its own, so it ends once writes work, not only after SnapshotThreshold
// more entries: by a snapshot taken again, or, with nothing new to
// snapshot, by a probe of the directory.
func TestSnapshotFaultEndsWithoutNewEntries(t *testing.T) {
	cfg := testConfig(t, "n1", t.TempDir(), true)
	cfg.SnapshotRetry = 50 * time.Millisecond
	n := open(t, cfg)
	waitReadyLeader(t, n)
	if _, err := acquire(context.Background(), n, "k", "A"); err != nil {
		t.Fatal(err)
	}
	for _, phase := range []string{"a snapshot taken again", "a probe with nothing new"} {
		before := n.raft.Stats()["last_snapshot_index"]
		n.storage.report(StorageSnapshots, noSpace(cfg.DataDir+"/snapshots/1-2-3.tmp"))
		if ok, _ := n.Ready(); ok {
			t.Fatalf("%s: ready during a snapshots fault", phase)
		}
		waitFor(t, phase, 5*time.Second, func() bool { return n.Storage().OK })
		after := n.raft.Stats()["last_snapshot_index"]
		if took := after != before; took != (phase == "a snapshot taken again") {
			t.Errorf("%s: last snapshot index %s, then %s", phase, before, after)
		}
	}
}

// leakySnapshots fails Create after making its temporary directory, as the
// file snapshot store does when it cannot write the snapshot's meta file.
type leakySnapshots struct {
	raft.SnapshotStore
	dir string
}

func (l *leakySnapshots) Create(raft.SnapshotVersion, uint64, uint64, raft.Configuration, uint64, raft.Transport) (raft.SnapshotSink, error) {
	if err := os.MkdirAll(filepath.Join(l.dir, "2-9-1796000000001.tmp"), 0o700); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("write meta.json: %w", syscall.ENOSPC)
}

// TestFailedCreateLeavesNoTemporaryDir: a snapshot that could not be
// created does not leave its temporary directory behind (a full disk would
// otherwise collect one per attempt); one that was there before stays.
func TestFailedCreateLeavesNoTemporaryDir(t *testing.T) {
	h, _, _ := testHealth(t)
	dir := t.TempDir()
	other := filepath.Join(dir, "2-8-1796000000000.tmp")
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	s := &watchedSnapshots{SnapshotStore: &leakySnapshots{SnapshotStore: raft.NewInmemSnapshotStore(), dir: dir}, health: h, dir: dir}
	if _, err := s.Create(raft.SnapshotVersionMax, 9, 2, raft.Configuration{}, 1, nil); err == nil {
		t.Fatal("the failing Create succeeded")
	}
	names, err := unfinishedSnapshots(dir)
	if err != nil || len(names) != 1 || names[0] != filepath.Base(other) {
		t.Fatalf("temporary dirs after a failed Create: %v, %v; want only the one made before", names, err)
	}
	if h.status().OK {
		t.Error("a failed Create is not a snapshots fault")
	}
}

// TestSnapshotSinkPacesItsFile checks that the sink over Raft's file
// snapshot store finds the file the state is written to (its pacing relies
// on the store's layout, ID.tmp/state.bin), that a snapshot written through
// it reads back whole, and that closing it lets go of the file.
func TestSnapshotSinkPacesItsFile(t *testing.T) {
	h, _, _ := testHealth(t)
	base := t.TempDir()
	store, err := raft.NewFileSnapshotStore(base, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := &watchedSnapshots{SnapshotStore: store, health: h, dir: filepath.Join(base, StorageSnapshots)}
	sink, err := s.Create(raft.SnapshotVersionMax, 9, 2, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := sink.(*watchedSink)
	if w.file == nil {
		t.Fatal("the sink did not open the snapshot's state file: its pacing is off")
	}
	want := make([]byte, 3*snapshotWriteOut+123)
	for i := range want {
		want[i] = byte(i * 7)
	}
	for b := want; len(b) > 0; b = b[min(len(b), 64<<10):] {
		if _, err := sink.Write(b[:min(len(b), 64<<10)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if w.file != nil {
		t.Error("the sink kept the state file open after Close")
	}
	_, rc, err := store.Open(sink.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the snapshot read back %d bytes (%v), want the %d written", len(got), err, len(want))
	}
}

// unreadableLog holds its entries but cannot read them back.
type unreadableLog struct {
	raft.LogStore
	err error
}

func (u *unreadableLog) GetLog(index uint64, log *raft.Log) error {
	if index > 10 {
		return raft.ErrLogNotFound
	}
	return u.err
}

// TestWatchedLogReportsAnEntryItCannotReadBack: an entry the store holds
// but cannot read is reported (the node stops on it); one that is not
// there is Raft's ordinary ErrLogNotFound.
func TestWatchedLogReportsAnEntryItCannotReadBack(t *testing.T) {
	eio := fmt.Errorf("raftlog: read entry 3: %w", syscall.EIO)
	var seen []error
	l := &watchedLog{LogStore: &unreadableLog{LogStore: raft.NewInmemStore(), err: eio}, unreadable: func(err error) { seen = append(seen, err) }}
	var e raft.Log
	if err := l.GetLog(3, &e); !errors.Is(err, syscall.EIO) {
		t.Fatalf("GetLog: %v", err)
	}
	if err := l.GetLog(11, &e); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a missing entry: %v", err)
	}
	if len(seen) != 1 || !errors.Is(seen[0], syscall.EIO) {
		t.Fatalf("reported %v, want the one read error", seen)
	}
}

// TestSnapshotSurvivesAPowerLoss: a snapshot whose Close returned is whole
// after a power loss (test/faultfs keeps only what was synced), in a
// snapshots directory made below a new data directory; a snapshot whose
// directory cannot be synced fails to close and leaves nothing.
func TestSnapshotSurvivesAPowerLoss(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	h, _, _ := testHealth(t)
	dataDir := filepath.Join(mnt, "data")
	s, err := openSnapshots(dataDir, hclog.NewNullLogger(), h)
	if err != nil {
		t.Fatal(err)
	}
	write := func(index uint64, data []byte) (raft.SnapshotSink, error) {
		sink, err := s.Create(raft.SnapshotVersionMax, index, 2, raft.Configuration{}, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.Write(data); err != nil {
			t.Fatal(err)
		}
		return sink, sink.Close()
	}
	// check requires the store to hold kept alone, with want in it.
	check := func(when string, kept raft.SnapshotSink, want []byte) {
		t.Helper()
		metas, err := s.List()
		if err != nil || len(metas) != 1 || metas[0].ID != kept.ID() {
			t.Fatalf("snapshots %s: %v, %v; want %s alone", when, metas, err, kept.ID())
		}
		_, rc, err := s.Open(kept.ID())
		if err != nil {
			t.Fatalf("open %s %s: %v", kept.ID(), when, err)
		}
		defer rc.Close()
		if got, err := io.ReadAll(rc); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s %s: %d bytes (%v), want the %d written", kept.ID(), when, len(got), err, len(want))
		}
		if names, err := unfinishedSnapshots(filepath.Join(dataDir, StorageSnapshots)); err != nil || len(names) != 0 {
			t.Fatalf("unfinished snapshots %s: %v, %v", when, names, err)
		}
	}
	want := bytes.Repeat([]byte("holdfast state "), 1000)
	kept, err := write(9, want)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	if s, err = openSnapshots(dataDir, hclog.NewNullLogger(), h); err != nil {
		t.Fatal(err)
	}
	check("after a power loss", kept, want)

	if _, err := f.Add(faultfs.Rule{Op: faultfs.OpFsyncDir, Path: "data/snapshots/*.tmp", Err: syscall.EIO, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := write(12, []byte("never finished")); !errors.Is(err, syscall.EIO) {
		t.Fatalf("close of a snapshot whose directory cannot be synced: %v, want EIO", err)
	}
	check("after a failed close", kept, want)
}

// stalled is the condition the log store reports while an append hangs.
func stalled(dir string) error {
	return fmt.Errorf("%w: an append or deletion in %s has not returned after 2s", raftlog.ErrStalled, dir)
}

// TestGateHoldsEverythingWhileStalled: while the log is stalled the gate
// sends nothing (heartbeats and appends, appends of a pipeline opened
// before, new pipelines, snapshots, TimeoutNow, votes), each failing locally
// with an error naming the stall; the library's lines about those failures
// are held back as repeats of the stall. A fault that is not a stall holds
// only votes, and once the stalled write returns everything passes again,
// on the old pipeline too.
func TestGateHoldsEverythingWhileStalled(t *testing.T) {
	h, buf, _ := testHealth(t)
	g, b := gatePair(t, func() error {
		if f := h.writeFault("a"); f != nil {
			return f
		}
		return nil
	}, func() error { return h.stallFault("a") })
	pipe, err := g.AppendEntriesPipeline("b", "b")
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	type send struct {
		name string
		call func() error
	}
	sends := []send{
		{"AppendEntries", func() error {
			return g.AppendEntries("b", "b", &raft.AppendEntriesRequest{Term: 2}, &raft.AppendEntriesResponse{})
		}},
		{"pipeline AppendEntries", func() error {
			f, err := pipe.AppendEntries(&raft.AppendEntriesRequest{Term: 2}, &raft.AppendEntriesResponse{})
			if err != nil {
				return err
			}
			select {
			case <-pipe.Consumer():
				return f.Error()
			case <-time.After(time.Second):
				return errors.New("no answer on the pipeline")
			}
		}},
		{"new pipeline", func() error {
			p, err := g.AppendEntriesPipeline("b", "b")
			if err == nil {
				err = p.Close()
			}
			return err
		}},
		{"InstallSnapshot", func() error {
			return g.InstallSnapshot("b", "b", &raft.InstallSnapshotRequest{Term: 2}, &raft.InstallSnapshotResponse{}, strings.NewReader(""))
		}},
		{"TimeoutNow", func() error {
			return g.TimeoutNow("b", "b", &raft.TimeoutNowRequest{}, &raft.TimeoutNowResponse{})
		}},
	}
	// expect runs every send, answered by b when it reaches it, and
	// checks which ones were held.
	expect := func(phase string, held bool) {
		t.Helper()
		for _, s := range sends {
			got := make(chan bool, 1)
			go func() {
				select {
				case rpc := <-b.Consumer():
					var resp interface{}
					switch rpc.Command.(type) {
					case *raft.AppendEntriesRequest:
						resp = &raft.AppendEntriesResponse{Success: true}
					case *raft.InstallSnapshotRequest:
						resp = &raft.InstallSnapshotResponse{Success: true}
					case *raft.TimeoutNowRequest:
						resp = &raft.TimeoutNowResponse{}
					}
					rpc.Respond(resp, nil)
					got <- true
				case <-time.After(300 * time.Millisecond):
					got <- false
				}
			}()
			err := s.call()
			reached := <-got
			if s.name == "new pipeline" {
				reached = err == nil // opening one sends nothing
			}
			switch {
			case held && (reached || !errors.Is(err, errLogStalled) || !errors.Is(err, ErrStorage)):
				t.Errorf("%s: %s while stalled: reached the peer %v, error %v", phase, s.name, reached, err)
			case !held && (!reached || err != nil):
				t.Errorf("%s: %s: reached the peer %v, error %v", phase, s.name, reached, err)
			}
		}
	}

	expect("healthy", false)
	h.report(StorageLog, noSpace("/data/n1/raft-log/next-segment.tmp"))
	expect("no space", false)
	if h.stallFault("a") != nil {
		t.Fatal("a full disk counts as a stall")
	}
	h.report(StorageLog, nil)

	h.report(StorageLog, stalled("/data/n1/raft-log"))
	expect("stalled", true)
	err = g.RequestVote("b", "b", &raft.RequestVoteRequest{Term: 3}, &raft.RequestVoteResponse{})
	if !errors.Is(err, errStayOut) {
		t.Errorf("RequestVote while stalled: %v", err)
	}
	var se *StorageError
	if f := h.stallFault("a"); !errors.As(f, &se) || !se.Stalled() || se.Kind != StorageLog || !strings.Contains(se.Reason(), "does not answer") {
		t.Errorf("stall fault %#v", f)
	}
	// Raft's lines about the held messages repeat the stall.
	log := quietLogger{hclog.New(&hclog.LoggerOptions{Output: buf, Level: hclog.Trace}), h, newPeerLogs(hclog.New(&hclog.LoggerOptions{Output: buf}), nil)}
	log.Error("failed to heartbeat to", "peer", raft.ServerAddress("b"), "backoff time", time.Second, "error", g.AppendEntries("b", "b", &raft.AppendEntriesRequest{}, &raft.AppendEntriesResponse{}))
	log.Error("failed to appendEntries to", "peer", raft.Server{ID: "b", Address: "b"}, "error", fmt.Errorf("wrapped: %w", g.held()))
	log.Error("failed to appendEntries to", "peer", raft.Server{ID: "c", Address: "c"}, "error", errors.New("connection refused"))

	h.report(StorageLog, nil)
	expect("the write returned", false)
	out := buf.String()
	if strings.Contains(out, "failed to heartbeat to") || !strings.Contains(out, "raft_lines_held_back=2") {
		t.Errorf("the held messages' lines are not held back as repeats of the stall:\n%s", out)
	}
	if !strings.Contains(out, "lost contact with a peer") || !strings.Contains(out, "connection refused") {
		t.Errorf("a failure that is not the gate's is held back:\n%s", out)
	}
}

// TestStalledNodeRefusesWritesAndReads: while its log is stalled a leader
// proposes nothing (a StorageError naming the stall: nothing was written)
// and confirms no read (as a node that does not lead), and reports the
// stall in Ready; once the write returns it serves again.
func TestStalledNodeRefusesWritesAndReads(t *testing.T) {
	dir := t.TempDir()
	n := open(t, testConfig(t, "n1", dir, true))
	waitReadyLeader(t, n)
	n.storage.report(StorageLog, stalled(dir+"/raft-log"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := acquire(ctx, n, "k", "A")
	var se *StorageError
	if !errors.As(err, &se) || !se.Stalled() || se.NodeID != "n1" || errors.Is(err, ErrOutcomeUnknown) {
		t.Errorf("a proposal while stalled: %v, want a StorageError naming the stall", err)
	}
	err = n.ReadLinearizable(ctx, func() { t.Error("read ran while stalled") })
	if !errors.Is(err, ErrNotLeader) || errors.As(err, &se) || !strings.Contains(err.Error(), "stalled") {
		t.Errorf("a read while stalled: %v, want ErrNotLeader naming the stall", err)
	}
	if ok, why := n.Ready(); ok || !strings.Contains(why, "stalled") || !strings.Contains(why, dir) {
		t.Errorf("Ready while stalled: %v %q", ok, why)
	}
	if c := n.Counters(); c.Proposals["storage"] != 1 {
		t.Errorf("counters %v", c.Proposals)
	}
	n.storage.report(StorageLog, nil)
	if _, err := acquire(ctx, n, "k", "A"); err != nil {
		t.Fatalf("a proposal once the write returned: %v", err)
	}
	if err := n.ReadLinearizable(ctx, func() {}); err != nil {
		t.Fatalf("a read once the write returned: %v", err)
	}
}

// TestStallReleasesWaitingProposals: the channel proposals wait on closes
// when the log stalls and is open again once it is over; a proposal given
// up for the stall while still queued is refused as not written (a
// StorageError, counted as such), one already taken as of unknown outcome
// naming the stall.
func TestStallReleasesWaitingProposals(t *testing.T) {
	h, _, _ := testHealth(t)
	n := &Node{cfg: Config{NodeID: "n1"}, storage: h}
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	before := h.stallBegins()
	h.report(StorageLog, noSpace("x"))
	if closed(before) {
		t.Fatal("a full disk released the waiting proposals")
	}
	h.report(StorageLog, stalled("/data/n1/raft-log"))
	if !closed(before) || !closed(h.stallBegins()) {
		t.Fatal("the stall did not release the waiting proposals")
	}
	h.report(StorageLog, nil)
	if closed(h.stallBegins()) {
		t.Fatal("after the stall, proposals are released at once")
	}

	h.report(StorageLog, stalled("/data/n1/raft-log"))
	fault := n.logStall()
	var se *StorageError
	queued := &proposal{}
	err := n.giveUp(queued, fault, fault)
	if !errors.As(err, &se) || !se.Stalled() || errors.Is(err, ErrOutcomeUnknown) || queued.state.Load() != proposalWithdrawn {
		t.Errorf("a queued proposal given up for the stall: %v, want a StorageError (nothing written)", err)
	}
	taken := &proposal{}
	taken.state.Store(proposalTaken)
	err = n.giveUp(taken, fault, fault)
	if !errors.Is(err, ErrOutcomeUnknown) || !errors.As(err, &se) || !se.Stalled() {
		t.Errorf("a proposal in the stalled append given up: %v, want outcome unknown naming the stall", err)
	}
	if c := n.Counters(); c.Proposals["storage"] != 1 || c.Proposals["outcome_unknown"] != 1 || c.Proposals["busy"] != 0 {
		t.Errorf("counters %v", c.Proposals)
	}
}

// TestHeartbeatsReachTheMainLoop: a heartbeat received over the network
// transport goes to the consumer (Raft's main loop), never to a handler
// Raft set on the transport, which would run it beside the main loop
// (hashicorp/raft issue 695: the term on disk could go back).
func TestHeartbeatsReachTheMainLoop(t *testing.T) {
	recv, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	send, err := raft.NewTCPTransport("127.0.0.1:0", nil, 2, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	g := &raftGate{gatedTransport: recv, refuse: func() error { return nil }, hold: func() error { return nil }}
	t.Cleanup(func() {
		_ = g.Close()
		_ = send.Close()
	})
	fastPath := make(chan struct{}, 1)
	g.SetHeartbeatHandler(func(rpc raft.RPC) {
		fastPath <- struct{}{}
		rpc.Respond(&raft.AppendEntriesResponse{}, nil)
	})
	consumed := make(chan struct{}, 1)
	go func() {
		select {
		case rpc := <-g.Consumer():
			consumed <- struct{}{}
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
		case <-time.After(10 * time.Second):
		}
	}()
	heartbeat := &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{Addr: send.EncodePeer("leader", send.LocalAddr()), ID: []byte("leader")},
		Term:      7,
	}
	var resp raft.AppendEntriesResponse
	if err := send.AppendEntries("follower", g.LocalAddr(), heartbeat, &resp); err != nil {
		t.Fatal(err)
	}
	select {
	case <-consumed:
	default:
		t.Fatal("the heartbeat did not reach the consumer")
	}
	select {
	case <-fastPath:
		t.Fatal("the heartbeat was handled beside the main loop")
	default:
	}
	if !resp.Success || resp.Term != 7 {
		t.Fatalf("the main loop's answer was not the one sent back: %+v", resp)
	}
}
