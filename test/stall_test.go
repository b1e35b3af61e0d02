//go:build linux

package test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/faultfs"
	"github.com/holdfast/holdfast/test/harness"
)

// The stall tests serve each node's data directory through faultfs from
// this process (the nodes are other processes: this one must never map a
// file of a mount it serves) and hold the fdatasyncs of one node's Raft
// log, as a disk that hangs instead of failing does.

// stallBound is the nodes' default stall bound (cluster.Config's
// LogStallAfter with the harness's 500 ms heartbeat timeout).
const stallBound = 2 * time.Second

// stallCluster is a three-node cluster whose data directories are faultfs
// mounts.
type stallCluster struct {
	t  *testing.T
	c  *harness.Cluster
	fs map[string]*faultfs.FS // by node id
}

// newStallCluster forms a three-node cluster on faultfs mounts and waits
// until every node is ready. It skips the test where a FUSE file system
// cannot be mounted.
func newStallCluster(t *testing.T) *stallCluster {
	t.Helper()
	if err := faultfs.Usable(); err != nil {
		t.Skipf("the stall tests serve data directories through faultfs: %v", err)
	}
	s := &stallCluster{t: t, c: env.NewCluster(t, 3, harness.Options{}), fs: map[string]*faultfs.FS{}}
	for _, n := range s.c.Nodes() {
		s.mount(n)
	}
	s.c.StartBootstrap()
	s.c.WaitLeader()
	s.c.WaitAllReady()
	// A node whose log stalls applies nothing meanwhile: it forwards
	// writes to a new leader only if it already knows its address.
	s.c.Eventually("every node knowing every member's HTTP address", func() error {
		sts, err := s.c.Statuses(false)
		if err != nil {
			return err
		}
		for id, st := range sts {
			for _, m := range st.Nodes {
				if m.HTTPAddr == "" {
					return fmt.Errorf("%s does not know %s's HTTP address yet", id, m.ID)
				}
			}
		}
		return nil
	})
	return s
}

// mount serves n's data directory through faultfs, over a backing
// directory beside it, until the test ends (the node is killed first, which
// ends any call a rule still holds).
func (s *stallCluster) mount(n *harness.Node) {
	s.t.Helper()
	backing := n.DataDir + "-backing"
	for _, d := range []string{backing, n.DataDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			s.t.Fatal(err)
		}
	}
	f, err := faultfs.Mount(backing, n.DataDir, n.DataDir+"-shadow", faultfs.Options{})
	if err != nil {
		s.t.Fatalf("mount faultfs on %s: %v", n.DataDir, err)
	}
	s.fs[n.ID] = f
	s.t.Cleanup(func() {
		if n.Alive() {
			_ = n.Kill()
		}
		if err := f.Unmount(); err != nil {
			s.t.Errorf("unmount %s: %v", n.DataDir, err)
		}
	})
}

// stall holds every fdatasync of victim's Raft log segments until release
// clears the rule; held reports how many calls the rule holds now.
func (s *stallCluster) stall(victim *harness.Node) (release func(), held func() int) {
	s.t.Helper()
	f := s.fs[victim.ID]
	id, err := f.Add(faultfs.Rule{Op: faultfs.OpFsync, Path: "raft-log/*", Stall: faultfs.UntilCleared})
	if err != nil {
		s.t.Fatal(err)
	}
	return func() { f.Clear(id) }, func() int { st, _ := f.Stats(id); return st.Held }
}

// stallWrite is one acquire of a new lease key and its answer.
type stallWrite struct {
	key, via   string
	sent, done time.Time
	status     int    // 0: no answer
	outcome    string // of an error answer
	storage    string // the storage a 507 names, with its node
	err        error
}

// stallWriter sends a trickle of writes (acquires of new lease keys)
// through the given nodes, from a few clients at once, and keeps every
// answer.
type stallWriter struct {
	ns    string
	nodes []*harness.Node
	next  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	writes []stallWrite
}

// startWrites starts clients that each send a write every 50 ms through
// the nodes in turn until stopped.
func startWrites(t *testing.T, clients int, nodes ...*harness.Node) *stallWriter {
	t.Helper()
	w := &stallWriter{ns: mintNamespace(t, nodes[0]), nodes: nodes, stop: make(chan struct{})}
	for range clients {
		w.wg.Add(1)
		go w.client()
	}
	t.Cleanup(w.halt)
	return w
}

func (w *stallWriter) client() {
	defer w.wg.Done()
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
		i := w.next.Add(1)
		w.record(w.acquire(w.nodes[int(i)%len(w.nodes)], fmt.Sprintf("stall-%d", i)))
	}
}

// acquire sends one acquire of key through node. The client waits up to
// 25 s: the service answers every request within its 10 s request
// timeout, so a write without an answer is a write that hung.
func (w *stallWriter) acquire(node *harness.Node, key string) stallWrite {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	a := stallWrite{key: key, via: node.ID, sent: time.Now()}
	r, err := node.Do(ctx, harness.Request{Method: http.MethodPost, Path: apiPrefix + "/lease",
		JSON: map[string]any{"namespace": w.ns, "key": key, "ttl_seconds": 600}})
	a.done = time.Now()
	if err != nil {
		a.err = err
		return a
	}
	a.status = r.Status
	var body struct {
		Outcome string `json:"outcome"`
		NodeID  string `json:"node_id"`
		Storage string `json:"storage"`
	}
	_ = r.Decode(&body)
	a.outcome = body.Outcome
	if body.Storage != "" {
		a.storage = body.NodeID + " " + body.Storage
	}
	return a
}

func (w *stallWriter) record(a stallWrite) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, a)
}

// halt stops the clients and waits for their last answers.
func (w *stallWriter) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	w.wg.Wait()
}

// answers returns the writes answered so far, in the order they ended.
func (w *stallWriter) answers() []stallWrite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.writes)
}

// firstAckSentAfter returns the end of the first write sent after t and
// acknowledged.
func (w *stallWriter) firstAckSentAfter(t time.Time) (time.Time, bool) {
	var first time.Time
	for _, a := range w.answers() {
		if a.status == http.StatusCreated && a.sent.After(t) && (first.IsZero() || a.done.Before(first)) {
			first = a.done
		}
	}
	return first, !first.IsZero()
}

// check stops the writes and checks every answer: an acknowledgement, or a
// refusal that says nothing was changed (503 not_applied, or 507 naming
// victim's raft-log), or 503 outcome unknown; never another status, never
// no answer. Every acknowledged key must be held now, checked through
// via. It returns the writes of unknown outcome.
func (w *stallWriter) check(t *testing.T, victim, via *harness.Node) (unknown []stallWrite) {
	t.Helper()
	w.halt()
	var acked []string
	slowest := time.Duration(0)
	for _, a := range w.answers() {
		slowest = max(slowest, a.done.Sub(a.sent))
		switch {
		case a.err != nil:
			t.Errorf("write %s via %s sent at %s got no answer after %v: %v", a.key, a.via, a.sent.Format("15:04:05.000"), a.done.Sub(a.sent), a.err)
		case a.status == http.StatusCreated:
			acked = append(acked, a.key)
		case a.status == http.StatusServiceUnavailable && a.outcome == "unknown":
			unknown = append(unknown, a)
		case a.status == http.StatusServiceUnavailable && a.outcome == "not_applied":
		case a.status == http.StatusInsufficientStorage && a.outcome == "not_applied" && a.storage == victim.ID+" raft-log":
		default:
			t.Errorf("write %s via %s: HTTP %d outcome %q storage %q: want 201, 503 or a 507 naming %s's raft-log", a.key, a.via, a.status, a.outcome, a.storage, victim.ID)
		}
	}
	t.Logf("%d writes, %d acknowledged, %d of unknown outcome; the slowest answer took %v", len(w.answers()), len(acked), len(unknown), slowest.Round(time.Millisecond))
	for _, key := range acked {
		if r := w.acquire(via, key); r.status != http.StatusConflict {
			t.Errorf("acknowledged key %s is not held: a new acquire got HTTP %d %v", key, r.status, r.err)
		}
	}
	return unknown
}

// expectStallReported checks that victim reports its stalled log: /readyz
// 503 naming the stall, its Raft log and its data directory; a raft-log
// fault in /cluster/status; the storage metrics.
func expectStallReported(t *testing.T, victim *harness.Node) {
	t.Helper()
	r, err := victim.Get("/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := r.ErrorBody()
	for _, want := range []string{"storage fault", "raft-log", victim.DataDir, "stalled"} {
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(body.Error, want) {
			t.Errorf("%s /readyz during the stall does not say %q: %s", victim.ID, want, r)
		}
	}
	if ok, kinds, err := storageOf(victim); err != nil || ok || kinds != "raft-log" {
		t.Errorf("%s status during the stall: storage ok=%v faults=%q (%v), want a raft-log fault", victim.ID, ok, kinds, err)
	}
	m, err := victim.Get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"holdfast_storage_ok 0", `holdfast_storage_errors_total{kind="raft-log"} 1`} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("%s metrics during the stall lack %q", victim.ID, want)
		}
	}
}

// expectRecovered waits until victim can write again, stops the writes
// and waits until the cluster has converged, and checks that victim said
// so once and was not restarted.
func (s *stallCluster) expectRecovered(victim *harness.Node, pid int, w *stallWriter) {
	s.t.Helper()
	s.c.Eventually(victim.ID+" writes again", func() error {
		if ok, kinds, err := storageOf(victim); err != nil || !ok {
			return fmt.Errorf("storage ok=%v faults=%q (%v)", ok, kinds, err)
		}
		return nil
	})
	w.halt()
	s.c.WaitAllReady()
	s.c.WaitSameState()
	if victim.Pid() != pid {
		s.t.Errorf("%s was restarted (pid %d, was %d)", victim.ID, victim.Pid(), pid)
	}
	log := victim.Log()
	if n := len(storageFaultLine.FindAllString(log, -1)); n != 1 || !strings.Contains(log, "raftlog: stalled") {
		s.t.Errorf("%s logged %d storage fault lines, want one naming the stall", victim.ID, n)
	}
	if !strings.Contains(log, "storage fault over: writes work again") {
		s.t.Errorf("%s did not log the end of its stall", victim.ID)
	}
}

// awaitFollowing waits until victim, its disk answering again, follows
// leader.
func (s *stallCluster) awaitFollowing(victim, leader *harness.Node) {
	s.c.EventuallyWithin(10*time.Second, victim.ID+" following "+leader.ID+" once its disk answered", func() error {
		st, err := victim.Status()
		if err != nil {
			return err
		}
		if st.State != "follower" || st.LeaderID != leader.ID {
			return fmt.Errorf("%s is %s, leader %q", victim.ID, st.State, st.LeaderID)
		}
		return nil
	})
}

// TestLeaderLogStall holds the leader's log fdatasyncs for 13 s (longer
// than the 10 s request timeout, so a write left waiting on the stalled
// leader would show) under a trickle of writes through every node. Within
// the stall bound plus an election another node leads and acknowledges
// writes while the stalled fdatasync is still held; the stalled node
// reports the stall in /readyz, /cluster/status and its metrics, and
// refuses the writes sent to it (507, nothing written). The writes in the
// append that hangs are answered outcome unknown; none fails, none goes
// unanswered. Once the disk answers the node learns of the new leader
// (Raft handles every message, heartbeats included, on its main loop,
// which waits on the stalled append), replaces the entries of that append
// with the new leader's and catches up without a restart, the state hashes
// converge and every acknowledged write is there.
func TestLeaderLogStall(t *testing.T) {
	t.Parallel()
	s := newStallCluster(t)
	victim := s.c.WaitLeader()
	others := harness.Except(s.c.Nodes(), victim)
	pid := victim.Pid()
	w := startWrites(t, 3, s.c.Nodes()...)
	s.c.EventuallyWithin(10*time.Second, "writes acknowledged before the stall", func() error {
		if _, ok := w.firstAckSentAfter(time.Time{}); !ok {
			return errors.New("none yet")
		}
		return nil
	})

	release, held := s.stall(victim)
	stalled := time.Now()
	var leader *harness.Node
	s.c.EventuallyWithin(30*time.Second, "another node leading and acknowledging writes while the stall lasts", func() error {
		l, err := s.c.LeaderOf(others...)
		if err != nil {
			return err
		}
		if _, ok := w.firstAckSentAfter(stalled); !ok {
			return fmt.Errorf("%s leads, but no write sent since the stall began is acknowledged", l.ID)
		}
		leader = l
		return nil
	})
	served, _ := w.firstAckSentAfter(stalled)
	if held() == 0 {
		t.Fatalf("no fdatasync of %s's log is held: the stall did not last until another node served", victim.ID)
	}
	t.Logf("STALL-RESULT leader stall: %s leads; the first write sent after the stall began was acknowledged %v after it (bound %v)",
		leader.ID, served.Sub(stalled).Round(time.Millisecond), stallBound)
	expectStallReported(t, victim)

	for time.Since(stalled) < 13*time.Second {
		time.Sleep(100 * time.Millisecond)
	}
	if held() == 0 {
		t.Fatalf("the stall of %s's log ended before it was cleared", victim.ID)
	}
	release()
	cleared := time.Now()
	s.awaitFollowing(victim, leader)
	var during int
	for _, a := range w.answers() {
		if a.status == http.StatusCreated && a.sent.After(served) && a.done.Before(cleared) {
			during++
		}
	}
	if during < 10 {
		t.Errorf("only %d writes acknowledged between the new leader's first and the end of the stall", during)
	}
	s.expectRecovered(victim, pid, w)
	unknown := w.check(t, victim, others[0])
	if len(unknown) == 0 {
		t.Errorf("no write was answered outcome unknown: the stalled append held none")
	}
	// The stalled append's entries, of the old term, are replaced by the
	// new leader's, as Raft does with a follower's conflicting entries.
	if !strings.Contains(victim.Log(), "clearing log suffix") {
		t.Errorf("%s never replaced the entries of its stalled append (no \"clearing log suffix\" in its log)", victim.ID)
	}
	applied := 0
	for _, a := range unknown {
		if r := w.acquire(others[0], a.key); r.status == http.StatusConflict {
			applied++
		}
	}
	t.Logf("STALL-RESULT %d writes of unknown outcome, %d of them applied; %d acknowledged while %s's log was stalled", len(unknown), applied, during, victim.ID)
}

// TestFollowerLogStall holds a follower's log fdatasyncs for 6 s under a
// trickle of writes through every node: every write is acknowledged, the
// leader keeps its term, the follower reports the stall and never stands
// for election, and once its disk answers it catches up without a restart.
func TestFollowerLogStall(t *testing.T) {
	t.Parallel()
	s := newStallCluster(t)
	leader := s.c.WaitLeader()
	victim := harness.Except(s.c.Nodes(), leader)[0]
	pid := victim.Pid()
	before, err := leader.Status()
	if err != nil {
		t.Fatal(err)
	}
	w := startWrites(t, 3, s.c.Nodes()...)
	release, held := s.stall(victim)
	stalled := time.Now()
	s.c.EventuallyWithin(10*time.Second, victim.ID+" reporting its stall", func() error {
		if ok, _, err := storageOf(victim); err != nil || ok {
			return fmt.Errorf("storage ok=%v (%v)", ok, err)
		}
		return nil
	})
	expectStallReported(t, victim)
	for time.Since(stalled) < 6*time.Second {
		if st, err := victim.Status(); err != nil || st.State != "follower" {
			t.Fatalf("%s during its stall: %+v %v, want a follower", victim.ID, st, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if held() == 0 {
		t.Fatalf("the stall of %s's log ended before it was cleared", victim.ID)
	}
	release()
	cleared := time.Now()
	s.awaitFollowing(victim, leader)
	if now, err := s.c.LeaderOf(leader, harness.Except(s.c.Nodes(), leader, victim)[0]); err != nil || now != leader {
		t.Errorf("leadership moved during a follower's stall: %v %v", now, err)
	} else if st, err := leader.Status(); err != nil || st.Term != before.Term {
		t.Errorf("the term moved during a follower's stall: %+v %v", st, err)
	}
	acked := 0
	for _, a := range w.answers() {
		if a.sent.After(stalled) && a.done.Before(cleared) {
			if a.status != http.StatusCreated {
				t.Errorf("write %s via %s during a follower's stall: HTTP %d outcome %q (%v)", a.key, a.via, a.status, a.outcome, a.err)
			}
			acked++
		}
	}
	t.Logf("STALL-RESULT follower stall: %d writes acknowledged while %s's log was stalled", acked, victim.ID)
	s.expectRecovered(victim, pid, w)
	w.check(t, victim, leader)
}
