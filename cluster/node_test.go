package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/raftlog"
	"github.com/holdfast/holdfast/internal/secret"
)

// testConfig returns a fast-timing configuration for an in-process node
// with real TCP on loopback and real log, stable-store and snapshot files. Nodes that must not
// bootstrap themselves get an unreachable join address and are added with
// Join on the leader.
func testConfig(t *testing.T, id, dir string, bootstrap bool) Config {
	t.Helper()
	c := Config{
		NodeID:             id,
		DataDir:            dir,
		RaftBind:           "127.0.0.1:0",
		HTTPAdvertise:      "127.0.0.1:9",
		Logger:             hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testWriter{t}}),
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		SweepInterval:      20 * time.Millisecond,
		ProposeTimeout:     5 * time.Second,
	}
	if !bootstrap {
		c.Join = []string{"127.0.0.1:9"}
	}
	return c
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func open(t *testing.T, c Config) *Node {
	t.Helper()
	n, err := Open(c)
	if err != nil {
		t.Fatalf("Open %s: %v", c.NodeID, err)
	}
	t.Cleanup(func() { _ = n.Kill() })
	return n
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitReadyLeader(t *testing.T, nodes ...*Node) *Node {
	t.Helper()
	var leader *Node
	waitFor(t, "a ready leader", 15*time.Second, func() bool {
		for _, n := range nodes {
			if n.IsLeader() && n.lead.isReady() {
				leader = n
				return true
			}
		}
		return false
	})
	return leader
}

func acquire(ctx context.Context, n *Node, key, owner string) (*fsm.LeaseResult, error) {
	res, err := n.Propose(ctx, &fsm.LeaseAcquire{
		Now:         n.Now(),
		Lease:       secret.LeaseID("ns", key),
		Fingerprint: secret.FingerprintHash("ns", key, ""),
		Owner:       secret.OwnerTokenHash(owner),
		TTLSeconds:  1,
	})
	if err != nil {
		return nil, err
	}
	return res.(*fsm.LeaseResult), nil
}

// listenHTTP opens a loopback listener to stand for a node's HTTP
// listener.
func listenHTTP(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// serveStatus answers GET StatusPath on ln with n's status, as the server
// package does, until n stops: the leader asks a joiner there which level
// its build speaks, and members sample each other's clocks there.
func serveStatus(t *testing.T, ln net.Listener, n *Node) {
	mux := http.NewServeMux()
	mux.HandleFunc(StatusPath, func(w http.ResponseWriter, _ *http.Request) {
		select {
		case <-n.shutdownCh:
			http.Error(w, "the node stopped", http.StatusServiceUnavailable)
			return
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(n.Status())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// waitLevelSnapshot waits until n, a node that has just bootstrapped its
// cluster, has taken the snapshot a node takes within a second of its
// cluster's level rising, which a new cluster's does as it starts: a test
// that takes or counts snapshots waits for it first.
func waitLevelSnapshot(t *testing.T, n *Node) {
	t.Helper()
	waitFor(t, "the snapshot of the cluster's level", 10*time.Second, func() bool {
		metas, err := n.snaps.List()
		return err == nil && len(metas) > 0
	})
}

// olderBuild is a Config.testLevel: the node stands for a member whose
// build speaks only level.
func olderBuild(level uint32) *uint32 { return &level }

// threeNodes forms a three-node cluster in process: the first node
// bootstraps alone and the others join it, each answering its status on an
// HTTP listener of its own.
func threeNodes(t *testing.T, tweak func(*Config)) ([]*Node, []Config) {
	t.Helper()
	var nodes []*Node
	var cfgs []Config
	for i := 0; i < 3; i++ {
		ln := listenHTTP(t)
		c := testConfig(t, fmt.Sprintf("n%d", i), t.TempDir(), i == 0)
		c.HTTPAdvertise = ln.Addr().String()
		if tweak != nil {
			tweak(&c)
		}
		cfgs = append(cfgs, c)
		n := open(t, c)
		serveStatus(t, ln, n)
		nodes = append(nodes, n)
	}
	leader := waitReadyLeader(t, nodes[0])
	ctx := context.Background()
	for _, n := range nodes[1:] {
		if err := leader.Join(ctx, JoinRequest{NodeID: n.ID(), RaftAddr: n.RaftAddr(), HTTPAddr: n.HTTPAddr(), Fresh: true}); err != nil {
			t.Fatalf("join %s: %v", n.ID(), err)
		}
	}
	// Keep each config's raft address so restarts bind the same port.
	for i, n := range nodes {
		cfgs[i].RaftBind = n.RaftAddr()
		cfgs[i].Join = nil
	}
	waitConverged(t, nodes...)
	return nodes, cfgs
}

// waitConverged waits until every node has applied the same index and
// reports the same state hash.
func waitConverged(t *testing.T, nodes ...*Node) {
	t.Helper()
	waitFor(t, "replicas to converge", 20*time.Second, func() bool {
		first := nodes[0]
		for _, n := range nodes[1:] {
			if n.raft.AppliedIndex() != first.raft.AppliedIndex() {
				return false
			}
		}
		h := first.fsm.StateHash()
		for _, n := range nodes[1:] {
			if n.fsm.StateHash() != h {
				return false
			}
		}
		return true
	})
}

func TestSingleNodeProposeAndRead(t *testing.T) {
	n := open(t, testConfig(t, "solo", t.TempDir(), true))
	waitReadyLeader(t, n)
	r, err := acquire(context.Background(), n, "k", "A")
	if err != nil {
		t.Fatalf("propose: %v", err)
	}
	if r.Outcome != fsm.LeaseGranted || r.FencingToken != 1 {
		t.Fatalf("result %+v", *r)
	}
	var counter uint64
	if err := n.ReadLinearizable(context.Background(), func() { counter = n.fsm.FencingCounter() }); err != nil || counter != 1 {
		t.Fatalf("linearizable read: %d, %v", counter, err)
	}
	if ok, why := n.Ready(); !ok {
		t.Fatalf("not ready: %s", why)
	}
	st := n.Status()
	if st.State != "leader" || st.LeaderID != "solo" || len(st.Nodes) != 1 || !st.Nodes[0].Voter || st.LeaderHTTPAddr != "127.0.0.1:9" {
		t.Fatalf("status %+v", st)
	}
	if got := n.Counters().Proposals["applied"]; got < 2 { // the directory entry and the acquire
		t.Fatalf("applied proposals %d", got)
	}
}

// TestSweeperCommitsOnlyWhenDue checks that an idle leader appends nothing
// and that an expired deadline is swept by a committed entry.
func TestSweeperCommitsOnlyWhenDue(t *testing.T) {
	n := open(t, testConfig(t, "solo", t.TempDir(), true))
	waitReadyLeader(t, n)
	ctx := context.Background()
	one := int64(1)
	if _, err := n.Propose(ctx, &fsm.SetSettings{Now: n.Now(), Patch: fsm.SettingsPatch{LeaseLifecycleSeconds: &one}}); err != nil {
		t.Fatal(err)
	}
	idle := n.raft.LastIndex()
	time.Sleep(300 * time.Millisecond) // 15 sweep intervals with nothing due
	if got := n.raft.LastIndex(); got != idle {
		t.Fatalf("idle leader appended %d entries", got-idle)
	}
	if _, err := acquire(ctx, n, "k", "A"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the lease to be swept", 5*time.Second, func() bool { return n.Counters().Swept.LeasesRemoved == 1 })
	if st := n.fsm.Stats(); st.Leases != 0 {
		t.Fatalf("lease still present: %+v", st)
	}
	after := n.raft.LastIndex()
	time.Sleep(300 * time.Millisecond)
	if got := n.raft.LastIndex(); got != after {
		t.Fatalf("leader kept appending after the sweep: %d entries", got-after)
	}
	if c := n.Counters(); c.Sweeps != 1 {
		t.Fatalf("sweeps %d, want exactly 1", c.Sweeps)
	}
}

// TestFailoverFencingAndCatchUp kills the leader of three nodes, checks the
// new leader grants higher fencing tokens, restarts the old leader from its
// data and checks every replica ends with the same state.
func TestFailoverFencingAndCatchUp(t *testing.T) {
	nodes, cfgs := threeNodes(t, nil)
	ctx := context.Background()
	leader := waitReadyLeader(t, nodes...)
	var last uint64
	grant := func(n *Node, key string) {
		t.Helper()
		r, err := acquire(ctx, n, key, "owner-"+key)
		if err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		if r.Outcome != fsm.LeaseGranted || r.FencingToken <= last {
			t.Fatalf("acquire %s: %v token %d after %d", key, r.Outcome, r.FencingToken, last)
		}
		last = r.FencingToken
	}
	for i := 0; i < 20; i++ {
		grant(leader, fmt.Sprint("before-", i))
	}
	old := -1
	for i, n := range nodes {
		if n == leader {
			old = i
		}
	}
	if err := leader.Kill(); err != nil {
		t.Fatalf("kill leader: %v", err)
	}
	var rest []*Node
	for i, n := range nodes {
		if i != old {
			rest = append(rest, n)
		}
	}
	newLeader := waitReadyLeader(t, rest...)
	for i := 0; i < 20; i++ {
		grant(newLeader, fmt.Sprint("after-", i))
	}
	// The lease on a key granted before failover, re-acquired after, gets a higher token.
	time.Sleep(1100 * time.Millisecond) // let the 1 s leases lapse
	grant(newLeader, "before-0")

	restarted := open(t, cfgs[old])
	nodes[old] = restarted
	waitConverged(t, nodes...)
	if restarted.fsm.FencingCounter() != last {
		t.Fatalf("restarted node's counter %d, want %d", restarted.fsm.FencingCounter(), last)
	}
}

// TestSnapshotInstallCatchUp stops a follower, lets the leader compact its
// log past the follower's position, and checks the follower catches up by
// installing a snapshot: from ArchiveLevel on, the leader's store files,
// which the follower keeps as its snapshot and installs as its store;
// below it (a member of a build of the level before), the state machine's
// format, written into the follower's store record by record.
func TestSnapshotInstallCatchUp(t *testing.T) {
	for _, c := range []struct {
		name  string
		speak *uint32 // the first member's build level
		magic string  // how the snapshot the follower received starts
	}{
		{"this build", nil, archiveMagic},
		{"a member of the level before", olderBuild(ArchiveLevel - 1), "HOLDFAST-SNAP"},
	} {
		t.Run(c.name, func(t *testing.T) {
			snapshotInstallCatchUp(t, c.speak, c.magic)
		})
	}
}

func snapshotInstallCatchUp(t *testing.T, speak *uint32, magic string) {
	i := 0
	nodes, cfgs := threeNodes(t, func(c *Config) {
		c.SnapshotThreshold = 16
		c.TrailingLogs = 4
		c.SnapshotInterval = 50 * time.Millisecond
		if i++; i == 1 {
			c.testLevel = speak
		}
	})
	ctx := context.Background()
	leader := waitReadyLeader(t, nodes...)
	fi := 0
	for i, n := range nodes {
		if n != leader {
			fi = i
			break
		}
	}
	if err := nodes[fi].Kill(); err != nil {
		t.Fatal(err)
	}
	stoppedAt := leader.raft.LastIndex()
	for i := 0; i < 200; i++ {
		if _, err := acquire(ctx, leader, fmt.Sprint("k", i), "A"); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a leader snapshot past the stopped follower", 10*time.Second, func() bool {
		idx, _ := strconv.ParseUint(leader.raft.Stats()["last_snapshot_index"], 10, 64)
		return idx > stoppedAt+16
	})
	// The follower takes no snapshot of its own, so the one it keeps is
	// the one it was sent.
	cfgs[fi].SnapshotThreshold, cfgs[fi].SnapshotInterval = 1<<30, time.Hour
	restarted := open(t, cfgs[fi])
	nodes[fi] = restarted
	waitConverged(t, nodes...)
	if got := leader.raft.ReloadableConfig().SnapshotInterval; got != 50*time.Millisecond {
		t.Fatalf("the leader's snapshot interval at level %d: %v, want the 50ms it was given", leader.fsm.Level(), got)
	}
	idx, _ := strconv.ParseUint(restarted.raft.Stats()["last_snapshot_index"], 10, 64)
	if idx <= stoppedAt {
		t.Fatalf("follower caught up without installing a snapshot (last snapshot index %d, stopped at %d)", idx, stoppedAt)
	}
	// The snapshot it received, as its file store keeps it.
	w := restarted.snaps.(*watchedSnapshots)
	metas, err := w.List()
	if err != nil || len(metas) == 0 {
		t.Fatalf("the follower's snapshots: %v %v", metas, err)
	}
	_, rc, err := w.SnapshotStore.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, len(magic))
	_, err = io.ReadFull(rc, head)
	_ = rc.Close()
	if err != nil || string(head) != magic {
		t.Fatalf("the follower's snapshot %s starts %q (%v), want %q", metas[0].ID, head, err, magic)
	}
	// Its state store holds the state after a restart too.
	want := restarted.fsm.StateHash()
	if err := restarted.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	again := open(t, cfgs[fi])
	if got := again.fsm.StateHash(); got != want {
		t.Fatalf("after a restart the follower's state hash is %x, it was %x", got, want)
	}
}

// TestMinorityRefuses stops two of three nodes: the survivor, whether it
// was the leader or a follower, must neither commit a write nor answer a
// linearizable read.
func TestMinorityRefuses(t *testing.T) {
	for _, survivorWasLeader := range []bool{true, false} {
		t.Run(fmt.Sprintf("survivor_was_leader=%v", survivorWasLeader), func(t *testing.T) {
			nodes, _ := threeNodes(t, nil)
			leader := waitReadyLeader(t, nodes...)
			before := leader.fsm.FencingCounter()
			var survivor *Node
			for _, n := range nodes {
				if survivor == nil && (n == leader) == survivorWasLeader {
					survivor = n
					continue
				}
				if err := n.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 5; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				r, err := acquire(ctx, survivor, fmt.Sprint("m", i), "A")
				if err == nil {
					cancel()
					t.Fatalf("survivor granted a lease without quorum: %+v", *r)
				}
				if !errors.Is(err, ErrNotLeader) && !errors.Is(err, ErrOutcomeUnknown) {
					cancel()
					t.Fatalf("unexpected error class: %v", err)
				}
				if err := survivor.ReadLinearizable(ctx, func() {}); err == nil {
					cancel()
					t.Fatal("survivor answered a linearizable read without quorum")
				}
				cancel()
			}
			if survivor.fsm.FencingCounter() != before {
				t.Fatal("the survivor's state changed")
			}
			waitFor(t, "the survivor to stop being ready", 5*time.Second, func() bool { ok, _ := survivor.Ready(); return !ok })
		})
	}
}

// TestFollowerReadyNeedsItsLeadersAddress: a follower that has not applied
// its leader's entry in the node directory cannot forward anything, so it
// is not ready, saying why; the leader records itself again, and the
// follower is ready once it has applied that.
func TestFollowerReadyNeedsItsLeadersAddress(t *testing.T) {
	nodes, _ := threeNodes(t, nil)
	leader := waitReadyLeader(t, nodes...)
	follower := nodes[0]
	if follower == leader {
		follower = nodes[1]
	}
	waitFor(t, "the follower ready", 5*time.Second, func() bool { ok, _ := follower.Ready(); return ok })
	// The leader records itself again within a second, so the window in
	// which the follower lacks the entry can be missed: a few tries.
	unready := ""
	for try := 0; try < 5 && unready == ""; try++ {
		if _, err := leader.Propose(context.Background(), &fsm.RemoveNode{Now: leader.Now(), ID: leader.ID()}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(1500 * time.Millisecond)
		for unready == "" && time.Now().Before(deadline) {
			if ok, why := follower.Ready(); !ok && strings.Contains(why, "the leader's address is not known") {
				unready = why
			}
			time.Sleep(time.Millisecond)
		}
	}
	if unready == "" {
		t.Fatal("the follower stayed ready without its leader's entry in the directory")
	}
	waitFor(t, "the leader to record itself again and the follower to be ready", 5*time.Second, func() bool {
		ok, _ := follower.Ready()
		return ok
	})
	if info, ok := follower.fsm.Node(leader.ID()); !ok || info.HTTPAddr != leader.HTTPAddr() {
		t.Fatalf("the follower is ready with the leader's entry %+v (%v), want %s", info, ok, leader.HTTPAddr())
	}
}

func TestProposalErrorMapping(t *testing.T) {
	n := &Node{storage: newStorageHealth(t.TempDir(), hclog.NewNullLogger(), time.Now)}
	cases := []struct {
		in   error
		want error
	}{
		{raft.ErrNotLeader, ErrNotLeader},
		{raft.ErrLeadershipTransferInProgress, ErrNotLeader},
		{raft.ErrEnqueueTimeout, ErrBusy},
		{raft.ErrLeadershipLost, ErrOutcomeUnknown},
		{raft.ErrRaftShutdown, ErrOutcomeUnknown},
		{raft.ErrAbortedByRestore, ErrOutcomeUnknown},
		{errors.New("something else"), ErrOutcomeUnknown},
	}
	for _, c := range cases {
		got := n.proposalError(c.in)
		if !errors.Is(got, c.want) || !errors.Is(got, c.in) && c.in.Error() != "something else" {
			t.Errorf("proposalError(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if c := n.Counters(); c.Proposals["outcome_unknown"] != 4 || c.Proposals["not_leader"] != 2 || c.Proposals["busy"] != 1 {
		t.Fatalf("counters %+v", c.Proposals)
	}
}

func TestLeadershipGenerations(t *testing.T) {
	var l leadership
	_, g1 := l.gain()
	if !l.markReady(g1) || !l.isReady() {
		t.Fatal("first term not ready")
	}
	l.lose()
	if l.isReady() {
		t.Fatal("ready after losing leadership")
	}
	if l.markReady(g1) {
		t.Fatal("an old term's barrier marked the node ready")
	}
	ctx, g2 := l.gain()
	_, g3 := l.gain() // true delivered twice
	if ctx.Err() == nil {
		t.Fatal("the superseded term's context was not cancelled")
	}
	if l.markReady(g2) || !l.markReady(g3) {
		t.Fatal("generation check wrong after a repeated gain")
	}
}

// TestConcurrentProposalsShareEntries checks group commit: many concurrent
// proposals all apply, with distinct fencing tokens, in fewer log entries
// than proposals.
func TestConcurrentProposalsShareEntries(t *testing.T) {
	n := open(t, testConfig(t, "solo", t.TempDir(), true))
	waitReadyLeader(t, n)
	const count = 500
	before := n.raft.LastIndex()
	tokens := make(chan uint64, count)
	errs := make(chan error, count)
	for i := 0; i < count; i++ {
		go func() {
			r, err := acquire(context.Background(), n, fmt.Sprint("k", i), "A")
			if err != nil {
				errs <- err
				return
			}
			tokens <- r.FencingToken
		}()
	}
	seen := map[uint64]bool{}
	for i := 0; i < count; i++ {
		select {
		case err := <-errs:
			t.Fatalf("proposal failed: %v", err)
		case tok := <-tokens:
			if seen[tok] {
				t.Fatalf("fencing token %d issued twice", tok)
			}
			seen[tok] = true
		case <-time.After(30 * time.Second):
			t.Fatal("proposals did not finish")
		}
	}
	entries := n.raft.LastIndex() - before
	if entries >= count {
		t.Fatalf("%d proposals took %d log entries; concurrent writes should share entries", count, entries)
	}
	t.Logf("%d proposals in %d entries", count, entries)
}

func TestWithdrawnProposalIsNeverApplied(t *testing.T) {
	n := &Node{}
	queued := &proposal{}
	if err := n.giveUp(queued, ErrBusy, context.DeadlineExceeded); !errors.Is(err, ErrBusy) {
		t.Fatalf("withdrawing a queued proposal: %v", err)
	}
	if queued.state.CompareAndSwap(proposalQueued, proposalTaken) {
		t.Fatal("a flusher could still take a withdrawn proposal")
	}
	taken := &proposal{}
	taken.state.Store(proposalTaken)
	if err := n.giveUp(taken, ErrBusy, context.DeadlineExceeded); !errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("giving up on a taken proposal: %v", err)
	}
}

// TestBoltLogOfAnOlderDataDirIsKept opens a data dir whose Raft log is in
// bolt, as data dirs made before the segment log are: the node keeps that
// log, with its state, and makes no segment log beside it.
func TestBoltLogOfAnOlderDataDirIsKept(t *testing.T) {
	cfg := stoppedSoloNode(t)
	dir := cfg.DataDir

	// Move the log into bolt, the layout of an older data dir.
	wal, err := raftlog.Open(cfg.logPath(), raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := wal.FirstIndex()
	last, _ := wal.LastIndex()
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		l := new(raft.Log)
		if err := wal.GetLog(i, l); err != nil {
			t.Fatalf("read entry %d: %v", i, err)
		}
		logs = append(logs, l)
	}
	_ = wal.Close()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: cfg.boltPath(), MsgpackUseNewTimeFormat: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	_ = bolt.Close()
	if err := os.RemoveAll(cfg.logPath()); err != nil {
		t.Fatal(err)
	}

	n := open(t, testConfig(t, "solo", dir, true))
	waitReadyLeader(t, n)
	if n.wal != nil || n.logs != raft.LogStore(n.store) {
		t.Fatal("the node did not keep the bolt log")
	}
	if _, err := os.Stat(cfg.logPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a segment log was made beside the bolt log: %v", err)
	}
	r, err := acquire(context.Background(), n, "k2", "B")
	if err != nil || r.Outcome != fsm.LeaseGranted || r.FencingToken != 2 {
		t.Fatalf("acquire after reopening: %+v, %v (want fencing token 2: the state came back)", r, err)
	}
}

// stoppedSoloNode runs a single-node cluster in a new data dir, grants one
// lease (fence 1) and shuts the node down; it returns the node's config.
func stoppedSoloNode(t *testing.T) Config {
	t.Helper()
	cfg := testConfig(t, "solo", t.TempDir(), true)
	n := open(t, cfg)
	waitReadyLeader(t, n)
	if _, err := acquire(context.Background(), n, "k", "A"); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	return cfg
}

// TestDataDirInUse: a second node on a data directory another holds is
// refused, saying so.
func TestDataDirInUse(t *testing.T) {
	cfg := testConfig(t, "solo", t.TempDir(), true)
	open(t, cfg)
	second, err := Open(cfg)
	if err == nil {
		_ = second.Kill()
		t.Fatal("a second node opened a data directory in use")
	}
	if !errors.Is(err, ErrDataDirInUse) || !strings.Contains(err.Error(), "another holdfast") {
		t.Fatalf("second open: %v, want ErrDataDirInUse naming another holdfast", err)
	}
}

// TestMovedAddress: a node whose Raft address is not the one its cluster
// of several holds is noticed.
func TestMovedAddress(t *testing.T) {
	c := raft.Configuration{Servers: []raft.Server{{ID: "a", Address: "127.0.0.1:1"}, {ID: "b", Address: "127.0.0.1:2"}}}
	if was, moved := movedAddress(c, "a", "127.0.0.1:9"); !moved || was != "127.0.0.1:1" {
		t.Errorf("moved a: %q %v", was, moved)
	}
	if _, moved := movedAddress(c, "b", "127.0.0.1:2"); moved {
		t.Error("b did not move")
	}
	if _, moved := movedAddress(raft.Configuration{Servers: c.Servers[:1]}, "a", "127.0.0.1:9"); moved {
		t.Error("a node alone elects itself wherever it listens")
	}
}

// TestStatusNamesOwnAddressBeforeReplay: before a node has replayed the
// directory (at start, before it leads or hears from a leader), its own
// member entry carries its configured HTTP address, not an empty one.
func TestStatusNamesOwnAddressBeforeReplay(t *testing.T) {
	cfg := testConfig(t, "solo", t.TempDir(), true)
	n := open(t, cfg)
	check := func(when string) {
		t.Helper()
		for _, m := range n.Status().Nodes {
			if m.ID == "solo" && m.HTTPAddr != cfg.HTTPAdvertise {
				t.Fatalf("%s: own member entry has http_addr %q, want %q", when, m.HTTPAddr, cfg.HTTPAdvertise)
			}
		}
	}
	check("at start")
	waitReadyLeader(t, n)
	check("once leading")
}

// TestHoldTarget: the flusher holds an entry back only for callers it
// expects: never for a lone caller, nor for callers that alternate, and
// under load for most of the last entry's callers, within maxBatch.
func TestHoldTarget(t *testing.T) {
	for _, tc := range []struct {
		answered, waiting int
		held              bool
	}{
		{0, 1, false},  // the first write after a quiet spell
		{1, 1, false},  // a lone caller, back after its answer
		{1, 0, false},  // (never asked: the flusher holds a proposal first)
		{2, 1, true},   // two callers answered together: wait for the other
		{27, 27, true}, // 64 callers in two halves: merge them
		{56, 8, true},  // the 56 answered are expected back
		{8, 56, false}, // most callers are here already
		{100, 100, true},
	} {
		want := holdTarget(tc.answered, tc.waiting)
		if held := tc.waiting < want; held != tc.held {
			t.Errorf("answered %d, waiting %d: target %d, held %v, want %v", tc.answered, tc.waiting, want, held, tc.held)
		}
		if want > maxBatch {
			t.Errorf("answered %d, waiting %d: target %d beyond maxBatch", tc.answered, tc.waiting, want)
		}
	}
}

// TestMembersReachEachOtherByName: members that advertise a host name are
// recorded under it, replicate to each other through it, and a follower
// restarted under the same name catches up.
func TestMembersReachEachOtherByName(t *testing.T) {
	nodes, cfgs := threeNodes(t, func(c *Config) {
		port := strconv.Itoa(freePort(t))
		c.RaftBind = net.JoinHostPort("127.0.0.1", port)
		c.RaftAdvertise = net.JoinHostPort("localhost", port)
	})
	leader := waitReadyLeader(t, nodes...)
	f := leader.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.Configuration().Servers {
		if !strings.HasPrefix(string(s.Address), "localhost:") {
			t.Fatalf("member %s recorded at %s, not by its name", s.ID, s.Address)
		}
	}
	follower := 0
	for nodes[follower] == leader {
		follower++
	}
	if err := nodes[follower].Kill(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		if _, err := acquire(ctx, leader, fmt.Sprint("while-down-", i), "o"); err != nil {
			t.Fatalf("acquire with a follower down: %v", err)
		}
	}
	cfgs[follower].RaftBind = strings.Replace(cfgs[follower].RaftBind, "localhost", "127.0.0.1", 1)
	nodes[follower] = open(t, cfgs[follower])
	waitConverged(t, nodes...)
}
