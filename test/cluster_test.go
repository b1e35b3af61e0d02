//go:build unix

package test

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// formCluster starts n nodes that bootstrap one cluster together and waits
// until they agree on a leader, list each other with their addresses and
// are all ready. It returns the cluster and its leader.
func formCluster(t *testing.T, n int, opts harness.Options) (*harness.Cluster, *harness.Node) {
	t.Helper()
	c := env.NewCluster(t, n, opts)
	c.StartBootstrap()
	c.WaitLeader()
	c.WaitMembers(c.Nodes())
	c.WaitAllReady()
	return c, c.WaitLeader()
}

// put makes one PUT /cluster/settings through n and requires a 200 whose
// settings include the patch.
func put(t *testing.T, n *harness.Node, patch harness.Settings, key string) harness.Settings {
	t.Helper()
	r, err := n.PutSettings(patch, key)
	if err != nil {
		t.Fatal(err)
	}
	s, err := settingsAnswer(r, patch)
	if err != nil {
		t.Fatalf("PUT settings %v via %s: %v", patch, n.ID, err)
	}
	return s
}

func settingsAnswer(r *harness.Response, patch harness.Settings) (harness.Settings, error) {
	if r.Status != http.StatusOK {
		return nil, fmt.Errorf("want 200, got %s", r)
	}
	var a harness.SettingsAnswer
	if err := r.Decode(&a); err != nil {
		return nil, err
	}
	if !a.OK {
		return nil, fmt.Errorf("ok is false: %s", r)
	}
	for k, v := range patch {
		if a.Settings[k] != v {
			return nil, fmt.Errorf("answer has %s=%d, want %d: %s", k, a.Settings[k], v, r)
		}
	}
	return a.Settings, nil
}

// putEventually retries a PUT /cluster/settings through n while the
// cluster answers 503 with Retry-After (an election). Setting the same
// values again is idempotent, so retrying is safe whatever the outcome of
// an earlier attempt.
func putEventually(t *testing.T, c *harness.Cluster, n *harness.Node, patch harness.Settings, timeout time.Duration) harness.Settings {
	t.Helper()
	var s harness.Settings
	c.EventuallyWithin(timeout, fmt.Sprintf("PUT settings %v via %s to succeed", patch, n.ID), func() error {
		r, err := n.PutSettings(patch, "")
		if err != nil {
			return err
		}
		if r.Status == http.StatusServiceUnavailable {
			if _, ok := r.RetryAfter(); !ok {
				return fmt.Errorf("%w: 503 without Retry-After: %s", harness.ErrPermanent, r)
			}
			return fmt.Errorf("still unavailable: %s", r)
		}
		s, err = settingsAnswer(r, patch)
		if err != nil {
			return fmt.Errorf("%w: %w", harness.ErrPermanent, err)
		}
		return nil
	})
	return s
}

// mustSettings reads settings through n: linearizable (forwarded to the
// leader by a follower) unless stale.
func mustSettings(t *testing.T, n *harness.Node, stale bool) harness.Settings {
	t.Helper()
	s, _, err := n.GetSettings(stale)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func diffSettings(got, want harness.Settings) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			d = append(d, fmt.Sprintf("%s: got %d, want %d", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, fmt.Sprintf("%s: unexpected", k))
		}
	}
	slices.Sort(d)
	return strings.Join(d, "; ")
}

func with(base harness.Settings, patch harness.Settings) harness.Settings {
	out := maps.Clone(base)
	maps.Copy(out, patch)
	return out
}

// expectUnavailable checks a refusal: 503, a Retry-After of at least one
// second that matches the body, and a JSON error.
func expectUnavailable(t *testing.T, what string, r *harness.Response) harness.ErrorBody {
	t.Helper()
	if r.Status != http.StatusServiceUnavailable {
		t.Fatalf("%s: want 503, got %s", what, r)
	}
	ra, ok := r.RetryAfter()
	if !ok || ra < 1 {
		t.Errorf("%s: want a Retry-After of whole seconds >= 1, got %q", what, r.Header.Get("Retry-After"))
	}
	e := expectJSONError(t, what, r)
	if e.RetryAfterSeconds != ra {
		t.Errorf("%s: retry_after_seconds %d differs from Retry-After %d", what, e.RetryAfterSeconds, ra)
	}
	return e
}

func expectJSONError(t *testing.T, what string, r *harness.Response) harness.ErrorBody {
	t.Helper()
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json (%s)", what, ct, r)
	}
	e, err := r.ErrorBody()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if e.OK || e.Error == "" {
		t.Errorf("%s: want {ok:false, error:...}, got %s", what, r)
	}
	return e
}

// checkFormed verifies every field of every node's status for a formed,
// settled cluster of exactly nodes.
func checkFormed(c *harness.Cluster, nodes []*harness.Node) error {
	leader, err := c.LeaderOf(nodes...)
	if err != nil {
		return err
	}
	sts, err := c.Statuses(false, nodes...)
	if err != nil {
		return err
	}
	term := sts[leader.ID].Term
	for _, n := range nodes {
		s := sts[n.ID]
		wantState := "follower"
		if n == leader {
			wantState = "leader"
		}
		switch {
		case s.NodeID != n.ID:
			return fmt.Errorf("%s reports node_id %q", n.ID, s.NodeID)
		case s.HTTPAddr != n.HTTPAddr || s.RaftAddr != n.RaftAddr:
			return fmt.Errorf("%s reports http_addr %q raft_addr %q, want %q %q", n.ID, s.HTTPAddr, s.RaftAddr, n.HTTPAddr, n.RaftAddr)
		case s.State != wantState:
			return fmt.Errorf("%s is %q, want %q", n.ID, s.State, wantState)
		case s.LeaderID != leader.ID || s.LeaderHTTPAddr != leader.HTTPAddr:
			return fmt.Errorf("%s names leader %q at %q, want %q at %q", n.ID, s.LeaderID, s.LeaderHTTPAddr, leader.ID, leader.HTTPAddr)
		case s.Term != term || term == 0:
			return fmt.Errorf("%s is in term %d, leader in %d", n.ID, s.Term, term)
		case !s.Formed || !s.Ready || !s.IsMember:
			return fmt.Errorf("%s: formed=%v ready=%v member=%v", n.ID, s.Formed, s.Ready, s.IsMember)
		case s.AppliedIndex == 0 || s.AppliedIndex > s.CommitIndex || s.CommitIndex > s.LastLogIndex:
			return fmt.Errorf("%s: indexes applied %d, commit %d, last log %d are not ordered", n.ID, s.AppliedIndex, s.CommitIndex, s.LastLogIndex)
		case s.StateHash != "":
			return fmt.Errorf("%s sent a state_hash without ?hash=true", n.ID)
		}
		if err := harness.MembersMatch(s, nodes); err != nil {
			return err
		}
		for _, path := range []string{"/readyz", "/healthz"} {
			r, err := n.Get(path)
			if err != nil {
				return err
			}
			var body struct {
				OK     bool   `json:"ok"`
				NodeID string `json:"node_id"`
			}
			if r.Status != http.StatusOK || r.Decode(&body) != nil || !body.OK || body.NodeID != n.ID {
				return fmt.Errorf("%s %s: %s", n.ID, path, r)
			}
		}
	}
	return nil
}

func TestThreeNodesFormOneClusterInAnyStartOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		order   []int
		stagger bool
	}{
		{"staggered 0,1,2", []int{0, 1, 2}, true},
		{"staggered 2,0,1", []int{2, 0, 1}, true},
		{"together 1,2,0", []int{1, 2, 0}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := env.NewCluster(t, 3, harness.Options{})
			for i, idx := range tc.order {
				n := c.Node(idx)
				c.Start(n, c.BootstrapArgs(n)...)
				if tc.stagger && i < len(tc.order)-1 {
					// The next node starts only once this one serves and
					// is already looking for its peers.
					c.WaitHealthy(n)
				}
			}
			c.Eventually("one settled cluster of three", func() error { return checkFormed(c, c.Nodes()) })
			// One cluster, not several: a write through any node shows on all.
			leader := c.WaitLeader()
			put(t, harness.Except(c.Nodes(), leader)[0], harness.Settings{"queue_max_jobs": 7}, "")
			c.WaitSameState()
			for _, n := range c.Nodes() {
				if got := mustSettings(t, n, true)["queue_max_jobs"]; got != 7 {
					t.Errorf("%s has queue_max_jobs %d after the write, want 7", n.ID, got)
				}
			}
		})
	}
}

func TestWriteThroughFollowerIsVisibleOnEveryNode(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	before := c.WaitSameState()
	f := harness.Except(c.Nodes(), leader)[0]
	base := mustSettings(t, f, false)
	patch := harness.Settings{"queue_max_jobs": 42, "visibility_max_seconds": 600}
	want := with(base, patch)

	got := put(t, f, patch, "")
	if d := diffSettings(got, want); d != "" {
		t.Errorf("PUT via follower %s answered other settings: %s", f.ID, d)
	}
	// A linearizable read right after the acknowledgement sees the write on
	// every node: followers forward it to the leader.
	for _, n := range c.Nodes() {
		if d := diffSettings(mustSettings(t, n, false), want); d != "" {
			t.Errorf("linearizable GET via %s right after the write: %s", n.ID, d)
		}
	}
	// Each node's own copy converges too.
	c.Eventually("stale reads to show the write everywhere", func() error {
		for _, n := range c.Nodes() {
			s, _, err := n.GetSettings(true)
			if err != nil {
				return err
			}
			if d := diffSettings(s, want); d != "" {
				return fmt.Errorf("%s: %s", n.ID, d)
			}
		}
		return nil
	})
	after := c.WaitSameState()
	if after == before {
		t.Errorf("state hash %s did not change with the settings", after)
	}
}

func TestLeaderKilledNewLeaderTakesWritesAndOldLeaderCatchesUp(t *testing.T) {
	t.Parallel()
	c, old := formCluster(t, 3, harness.Options{})
	put(t, old, harness.Settings{"queue_max_jobs": 11}, "")
	oldStatus, err := old.Status()
	if err != nil {
		t.Fatal(err)
	}
	if oldStatus.State != "leader" {
		t.Fatalf("%s stopped leading before it could be killed: %+v", old.ID, oldStatus)
	}
	survivors := harness.Except(c.Nodes(), old)

	c.Kill(old)
	killed := time.Now()
	putEventually(t, c, survivors[0], harness.Settings{"queue_max_jobs": 12}, 20*time.Second)
	failover := time.Since(killed)
	t.Logf("first write acknowledged %v after the leader was killed", failover.Round(time.Millisecond))
	if failover > 10*time.Second {
		t.Errorf("a new leader took %v to accept a write; want a few seconds", failover)
	}
	leader := c.WaitLeader(survivors...)
	st, err := leader.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Term <= oldStatus.Term {
		t.Errorf("new leader %s is in term %d, the killed one led term %d", leader.ID, st.Term, oldStatus.Term)
	}
	for _, n := range survivors {
		if got := mustSettings(t, n, false)["queue_max_jobs"]; got != 12 {
			t.Errorf("linearizable read via %s: queue_max_jobs %d, want 12", n.ID, got)
		}
	}

	// Restarted from its data with no peer flags, it finds its cluster.
	c.Start(old)
	c.WaitMembers(c.Nodes())
	c.WaitSameState()
	if got := mustSettings(t, old, true)["queue_max_jobs"]; got != 12 {
		t.Errorf("restarted %s has queue_max_jobs %d locally, want 12", old.ID, got)
	}
	if !strings.Contains(old.LogSinceStart(), existingStateTrue) {
		t.Errorf("restarted %s did not start from its existing state", old.ID)
	}
	c.Eventually("old leader to follow", func() error { return checkFormed(c, c.Nodes()) })
}

var (
	compactedRe      = regexp.MustCompile(`compacting logs: from=\d+ to=(\d+)`)
	installedRe      = regexp.MustCompile(`Installed remote snapshot`)
	installingSnapRe = func(peer string) *regexp.Regexp {
		return regexp.MustCompile(`installing snapshot on: peer=` + regexp.QuoteMeta(peer) + `\b`)
	}
	existingStateTrue = "existing_state=true"
)

// compactedPast reports whether n's current process has deleted its log
// entries up to at least index.
func compactedPast(n *harness.Node, index uint64) bool {
	for _, m := range n.LogMatches(compactedRe) {
		var to uint64
		if _, err := fmt.Sscan(m[1], &to); err == nil && to >= index {
			return true
		}
	}
	return false
}

func TestRestartedFollowerCatchesUpFromSnapshot(t *testing.T) {
	t.Parallel()
	const trailing = 4
	c, leader := formCluster(t, 3, harness.Options{Args: []string{
		"--snapshot-threshold", "16", "--trailing-logs", fmt.Sprint(trailing), "--snapshot-interval", "200ms",
	}})
	fs := harness.Except(c.Nodes(), leader)
	f, other := fs[0], fs[1]
	put(t, leader, harness.Settings{"queue_max_jobs": 1000}, "")
	c.WaitSameState()
	st, err := f.Status()
	if err != nil {
		t.Fatal(err)
	}
	if code := c.Stop(f); code != 0 {
		t.Fatalf("%s exited with %d on SIGTERM", f.ID, code)
	}

	// Enough writes for a snapshot, after which both remaining nodes drop
	// every log entry f is missing: whichever leads, f can only catch up
	// from a snapshot.
	var last int64
	for i := int64(1); i <= 40; i++ {
		last = 1000 + i
		putEventually(t, c, leader, harness.Settings{"queue_max_jobs": last}, 20*time.Second)
	}
	c.Eventually("the log to be compacted past the stopped follower", func() error {
		for _, n := range []*harness.Node{leader, other} {
			if !compactedPast(n, st.LastLogIndex+1) {
				return fmt.Errorf("%s has not compacted past index %d", n.ID, st.LastLogIndex+1)
			}
		}
		return nil
	})

	c.Start(f)
	c.WaitLog(f, installedRe)
	c.WaitSameState()
	if got := mustSettings(t, f, true)["queue_max_jobs"]; got != last {
		t.Errorf("%s has queue_max_jobs %d after the snapshot, want %d", f.ID, got, last)
	}
	sent := false
	for _, n := range []*harness.Node{leader, other} {
		sent = sent || len(n.LogMatches(installingSnapRe(f.ID))) > 0
	}
	if !sent {
		t.Errorf("no leader logged sending a snapshot to %s", f.ID)
	}
	c.Eventually("the cluster to settle", func() error { return checkFormed(c, c.Nodes()) })
}

func TestMinorityRefusesWritesAndReadsAndChangesNothing(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	put(t, leader, harness.Settings{"queue_max_jobs": 60}, "")
	c.WaitSameState()
	fs := harness.Except(c.Nodes(), leader)
	survivor, other := fs[0], fs[1]

	c.Kill(leader)
	c.Kill(other)
	// The survivor was a follower, so nothing uncommitted is in its log.
	// Once it has given up on the dead leader, nothing can be forwarded.
	c.Eventually(survivor.ID+" to know no leader", func() error {
		st, err := survivor.Status()
		if err != nil {
			return err
		}
		if st.LeaderID != "" || st.State == "leader" {
			return fmt.Errorf("state %s, leader %q", st.State, st.LeaderID)
		}
		return nil
	})

	r, err := survivor.PutSettings(harness.Settings{"queue_max_jobs": 61}, "")
	if err != nil {
		t.Fatal(err)
	}
	if e := expectUnavailable(t, "PUT settings without quorum", r); e.Outcome != "not_applied" {
		t.Errorf("PUT on a node that is not the leader must say nothing was applied; outcome %q", e.Outcome)
	}
	r, err = survivor.Get("/cluster/settings")
	if err != nil {
		t.Fatal(err)
	}
	expectUnavailable(t, "linearizable GET settings without quorum", r)
	r, err = survivor.Get("/readyz")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusServiceUnavailable {
		t.Errorf("readyz without a leader: want 503, got %s", r)
	}
	expectJSONError(t, "readyz without a leader", r)
	// A stale read is still answered, from the survivor's own state.
	if got := mustSettings(t, survivor, true)["queue_max_jobs"]; got != 60 {
		t.Errorf("stale read: queue_max_jobs %d, want 60", got)
	}

	// Quorum returns: the refused write did not happen.
	c.Start(other)
	c.WaitLeader(survivor, other)
	for _, n := range []*harness.Node{survivor, other} {
		if got := mustSettings(t, n, false)["queue_max_jobs"]; got != 60 {
			t.Errorf("after quorum returned, %s reads queue_max_jobs %d, want 60 (the refused write must not apply)", n.ID, got)
		}
	}
	putEventually(t, c, survivor, harness.Settings{"queue_max_jobs": 62}, 20*time.Second)
	c.Start(leader)
	c.WaitMembers(c.Nodes())
	c.WaitSameState()
	if got := mustSettings(t, leader, true)["queue_max_jobs"]; got != 62 {
		t.Errorf("restarted %s has queue_max_jobs %d, want 62", leader.ID, got)
	}
}

func TestNodesJoinRunningClusterAndAreRemoved(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	put(t, leader, harness.Settings{"queue_max_jobs": 33}, "")
	first := c.Nodes()
	follower := harness.Except(first, leader)[0]

	// One joins through a follower (forwarded), one through the leader.
	n3 := c.AddNode()
	c.Start(n3, "--join", follower.HTTPAddr)
	n4 := c.AddNode()
	c.Start(n4, "--join", leader.HTTPAddr)
	all := c.Nodes()
	c.WaitMembers(all)
	c.WaitAllReady()
	c.WaitSameState()
	for _, n := range []*harness.Node{n3, n4} {
		if got := mustSettings(t, n, true)["queue_max_jobs"]; got != 33 {
			t.Errorf("joined %s has queue_max_jobs %d, want 33", n.ID, got)
		}
	}
	c.Eventually("five settled nodes", func() error { return checkFormed(c, all) })

	// Remove a joined node that does not lead through a node that does not
	// lead either (forwarded).
	leader = c.WaitLeader()
	target, second := n4, n3
	if leader == n4 {
		target, second = n3, n4
	}
	via := harness.Except(first, leader)[0]
	r, err := via.PostJSON("/cluster/remove", map[string]string{"node_id": target.ID}, "")
	if err != nil {
		t.Fatal(err)
	}
	var ok struct {
		OK     bool   `json:"ok"`
		NodeID string `json:"node_id"`
	}
	if r.Status != http.StatusOK || r.Decode(&ok) != nil || !ok.OK || ok.NodeID != target.ID {
		t.Fatalf("remove %s via follower %s: %s", target.ID, via.ID, r)
	}
	rest := harness.Except(all, target)
	c.WaitMembers(rest, rest...)
	// The removed node says so, and is never ready.
	c.Eventually("the removed node knows it is no member", func() error {
		s, err := target.Status()
		if err != nil {
			return err
		}
		if s.IsMember || s.Ready || s.LeaderID != "" {
			return fmt.Errorf("%s: member=%v ready=%v leader=%q", target.ID, s.IsMember, s.Ready, s.LeaderID)
		}
		r, err := target.Get("/readyz")
		if err != nil {
			return err
		}
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(string(r.Body), "not in the cluster's configuration") {
			return fmt.Errorf("%s /readyz: %s", target.ID, r)
		}
		return nil
	})
	c.Kill(target)

	// Remove the other through the current leader.
	leader = c.WaitLeader(rest...)
	r, err = leader.PostJSON("/cluster/remove", map[string]string{"node_id": second.ID}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("remove %s via leader %s: %s", second.ID, leader.ID, r)
	}
	c.WaitMembers(first, first...)
	c.Kill(second)

	r, err = via.PostJSON("/cluster/remove", map[string]string{"node_id": "node-that-never-was"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusNotFound {
		t.Errorf("removing an unknown member: want 404, got %s", r)
	}
	expectJSONError(t, "remove unknown member", r)

	putEventually(t, c, via, harness.Settings{"queue_max_jobs": 34}, 20*time.Second)
	c.WaitSameState(first...)
	c.Eventually("three settled nodes", func() error { return checkFormed(c, first) })
}

func TestWipedNodeRejoinsUnderItsOldID(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	put(t, leader, harness.Settings{"queue_max_jobs": 44}, "")
	c.WaitSameState()
	fs := harness.Except(c.Nodes(), leader)
	wiped, other := fs[0], fs[1]
	c.Kill(wiped)
	c.Wipe(wiped)
	putEventually(t, c, leader, harness.Settings{"queue_max_jobs": 45}, 20*time.Second)

	// Same id and addresses, no data, joining through a follower.
	c.Start(wiped, "--join", other.HTTPAddr)
	c.WaitMembers(c.Nodes())
	c.WaitSameState()
	if got := mustSettings(t, wiped, true)["queue_max_jobs"]; got != 45 {
		t.Errorf("rejoined %s has queue_max_jobs %d, want 45", wiped.ID, got)
	}
	if strings.Contains(wiped.LogSinceStart(), existingStateTrue) {
		t.Fatalf("%s was not wiped: it started with existing state", wiped.ID)
	}
	// Its stale entry (which may have voted in terms it no longer
	// remembers) was removed before it was added again.
	staleRe := regexp.MustCompile(`removing stale member before join: stale_id=` + regexp.QuoteMeta(wiped.ID) + `\b`)
	removed := false
	for _, n := range harness.Except(c.Nodes(), wiped) {
		removed = removed || len(n.LogMatches(staleRe)) > 0
	}
	if !removed {
		t.Errorf("no leader logged removing the stale entry of %s before re-adding it", wiped.ID)
	}
	c.Eventually("the cluster to settle", func() error { return checkFormed(c, c.Nodes()) })
}

func randomKey(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

func TestClusterKeyGuardsJoinRemoveAndSettingsWrites(t *testing.T) {
	t.Parallel()
	key := randomKey(t)
	c := env.NewCluster(t, 1, harness.Options{ClusterKey: key})
	n0 := c.Node(0)
	c.Start(n0) // a single-node cluster
	c.WaitLeader(n0)
	c.WaitMembers([]*harness.Node{n0})
	before := c.WaitSameState()
	base := mustSettings(t, n0, false) // reads need no key
	if _, err := n0.Status(); err != nil {
		t.Fatalf("status without key: %v", err)
	}

	fake := map[string]any{"node_id": "intruder", "raft_addr": "127.0.0.1:1", "http_addr": "127.0.0.1:2"}
	for _, k := range []struct{ name, key string }{{"no key", ""}, {"wrong key", "not-" + key}} {
		for _, rq := range []harness.Request{
			{Method: http.MethodPut, Path: "/cluster/settings", JSON: harness.Settings{"queue_max_jobs": 5}},
			{Method: http.MethodPost, Path: "/cluster/join", JSON: fake},
			{Method: http.MethodPost, Path: "/cluster/remove", JSON: map[string]string{"node_id": n0.ID}},
		} {
			rq.Key = k.key
			what := fmt.Sprintf("%s %s with %s", rq.Method, rq.Path, k.name)
			r, err := n0.Do(t.Context(), rq)
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != http.StatusUnauthorized {
				t.Errorf("%s: want 401, got %s", what, r)
				continue
			}
			if e := expectJSONError(t, what, r); !strings.Contains(e.Error, harness.KeyHeader) {
				t.Errorf("%s: the error should name the %s header: %q", what, harness.KeyHeader, e.Error)
			}
			if h := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "HoldfastClusterKey ") || !strings.Contains(h, harness.KeyHeader) {
				t.Errorf("%s: WWW-Authenticate %q, want the cluster-key challenge naming %s", what, h, harness.KeyHeader)
			}
		}
	}
	c.WaitMembers([]*harness.Node{n0})
	if d := diffSettings(mustSettings(t, n0, false), base); d != "" {
		t.Errorf("refused writes changed the settings: %s", d)
	}
	if h, err := c.SameState(n0); err != nil || h != before {
		t.Errorf("refused requests changed the state: hash %s -> %s (%v)", before, h, err)
	}

	put(t, n0, harness.Settings{"queue_max_jobs": 5}, key)

	// A node with the key joins; one with another key is refused.
	n1 := c.AddNode()
	c.Start(n1, "--join", n0.HTTPAddr)
	pair := []*harness.Node{n0, n1}
	c.WaitMembers(pair)
	intruder := c.AddNode()
	intruder.ClusterKey = "wrong-" + key
	c.Start(intruder, "--join", n0.HTTPAddr)
	c.WaitLog(intruder, regexp.MustCompile(`\b401\b`))
	c.Kill(intruder)
	c.WaitMembers(pair, pair...)

	// Through a follower: refused there without the key, forwarded with it.
	leader := c.WaitLeader(pair...)
	f := harness.Except(pair, leader)[0]
	r, err := f.PutSettings(harness.Settings{"queue_max_jobs": 6}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusUnauthorized {
		t.Errorf("PUT via follower without key: want 401, got %s", r)
	}
	put(t, f, harness.Settings{"queue_max_jobs": 7}, key)

	// Join with the key: re-registering an existing member is accepted.
	r, err = f.PostJSON("/cluster/join", map[string]any{"node_id": f.ID, "raft_addr": f.RaftAddr, "http_addr": f.HTTPAddr}, key)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK {
		t.Errorf("join of existing member %s with the key: want 200, got %s", f.ID, r)
	}
	r, err = leader.PostJSON("/cluster/remove", map[string]string{"node_id": f.ID}, key)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("remove %s with the key: want 200, got %s", f.ID, r)
	}
	c.WaitMembers([]*harness.Node{leader}, leader)
	if got := mustSettings(t, leader, false)["queue_max_jobs"]; got != 7 {
		t.Errorf("queue_max_jobs %d, want 7", got)
	}
}

func TestWithoutClusterKeyLoopbackMayUseOpsWrites(t *testing.T) {
	t.Parallel()
	c := env.NewCluster(t, 1, harness.Options{})
	n := c.Node(0)
	c.Start(n)
	c.WaitLeader(n)
	put(t, n, harness.Settings{"queue_max_jobs": 9}, "")
	// A key header is ignored when no key is configured.
	put(t, n, harness.Settings{"queue_max_jobs": 10}, "some-key")
	// Join and remove pass the loopback check and reach validation.
	r, err := n.PostJSON("/cluster/remove", map[string]string{"node_id": "nobody"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusNotFound {
		t.Errorf("remove of unknown member from loopback: want 404, got %s", r)
	}
	r, err = n.PostJSON("/cluster/join", map[string]string{"node_id": "x"}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusBadRequest {
		t.Errorf("invalid join from loopback: want 400, got %s", r)
	}
	if got := mustSettings(t, n, false)["queue_max_jobs"]; got != 10 {
		t.Errorf("queue_max_jobs %d, want 10", got)
	}
}

func TestOpsEndpointsRejectBadInputAndChangeNothing(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	follower := harness.Except(c.Nodes(), leader)[0]
	before := c.WaitSameState()
	base := mustSettings(t, leader, false)

	const (
		settings = "/cluster/settings"
		join     = "/cluster/join"
		remove   = "/cluster/remove"
		js       = "application/json"
	)
	big := `{"queue_max_jobs": 5` + strings.Repeat(" ", 70<<10) + `}`
	cases := []struct {
		name         string
		method, path string
		ct, body     string
		status       int
		want         string // the error must contain this (case-insensitive)
	}{
		{"settings truncated JSON", http.MethodPut, settings, js, `{"queue_max_jobs": `, 400, "malformed JSON"},
		{"settings syntax error", http.MethodPut, settings, js, `{"queue_max_jobs" 5}`, 400, "malformed JSON"},
		{"settings text/plain", http.MethodPut, settings, "text/plain", `{"queue_max_jobs": 5}`, 415, "Content-Type"},
		{"settings no content type", http.MethodPut, settings, "-", `{"queue_max_jobs": 5}`, 415, "Content-Type"},
		{"settings form", http.MethodPut, settings, "application/x-www-form-urlencoded", `queue_max_jobs=5`, 415, "Content-Type"},
		{"settings unknown field", http.MethodPut, settings, js, `{"queue_max_jobs": 5, "queue_max_jobz": 6}`, 400, "queue_max_jobz"},
		{"settings string for integer", http.MethodPut, settings, js, `{"queue_max_jobs": "5"}`, 400, "queue_max_jobs"},
		{"settings fraction", http.MethodPut, settings, js, `{"queue_max_jobs": 5.5}`, 400, "queue_max_jobs"},
		{"settings overflow", http.MethodPut, settings, js, `{"queue_max_jobs": 1e30}`, 400, "queue_max_jobs"},
		{"settings zero", http.MethodPut, settings, js, `{"queue_max_jobs": 0}`, 400, "queue_max_jobs"},
		{"settings negative", http.MethodPut, settings, js, `{"lease_ttl_min_seconds": -1}`, 400, "lease_ttl_min_seconds"},
		{"settings above limit", http.MethodPut, settings, js, `{"queue_lifetime_seconds": 999999999999}`, 400, "queue_lifetime_seconds"},
		{"settings visibility min above default", http.MethodPut, settings, js, `{"visibility_min_seconds": 120, "visibility_default_seconds": 60}`, 400, "visibility_min_seconds"},
		{"settings lease ttl default above max", http.MethodPut, settings, js, `{"lease_ttl_default_seconds": 100, "lease_ttl_max_seconds": 50}`, 400, "lease_ttl_default_seconds"},
		{"settings two objects", http.MethodPut, settings, js, `{}{}`, 400, "one JSON object"},
		{"settings array", http.MethodPut, settings, js, `[{"queue_max_jobs": 5}]`, 400, "JSON object"},
		{"settings empty body", http.MethodPut, settings, js, ``, 400, "JSON object"},
		{"settings too large", http.MethodPut, settings, js, big, 413, "exceeds"},
		{"join empty object", http.MethodPost, join, js, `{}`, 400, "node_id"},
		{"join bad raft_addr", http.MethodPost, join, js, `{"node_id":"x","raft_addr":"nope","http_addr":"127.0.0.1:1"}`, 400, "raft_addr"},
		{"join missing http_addr", http.MethodPost, join, js, `{"node_id":"x","raft_addr":"127.0.0.1:1"}`, 400, "http_addr"},
		{"join id too long", http.MethodPost, join, js, `{"node_id":"` + strings.Repeat("x", 200) + `","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`, 400, "node_id"},
		{"join unknown field", http.MethodPost, join, js, `{"node_id":"x","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2","role":"voter"}`, 400, "role"},
		{"join wrong type", http.MethodPost, join, js, `{"node_id":7,"raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`, 400, "node_id"},
		{"join malformed", http.MethodPost, join, js, `{"node_id":`, 400, "malformed JSON"},
		{"join text/plain", http.MethodPost, join, "text/plain", `{"node_id":"x","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`, 415, "Content-Type"},
		{"join leader's own id", http.MethodPost, join, js, `{"node_id":"` + leader.ID + `","raft_addr":"127.0.0.1:1","http_addr":"127.0.0.1:2"}`, 400, "leader"},
		{"remove empty object", http.MethodPost, remove, js, `{}`, 400, "node_id"},
		{"remove wrong type", http.MethodPost, remove, js, `{"node_id":["` + follower.ID + `"]}`, 400, "node_id"},
		{"remove unknown field", http.MethodPost, remove, js, `{"node_id":"` + follower.ID + `","force":true}`, 400, "force"},
		{"remove unknown member", http.MethodPost, remove, js, `{"node_id":"node9"}`, 404, "no such member"},
		{"remove malformed", http.MethodPost, remove, js, `{"node_id":"` + follower.ID, 400, "malformed JSON"},
		{"settings DELETE", http.MethodDelete, settings, "", ``, 405, "method not allowed"},
		{"unknown endpoint", http.MethodGet, "/cluster/nope", "", ``, 404, "no such endpoint"},
	}
	for _, tc := range cases {
		for _, n := range []*harness.Node{leader, follower} {
			what := fmt.Sprintf("%s via %s", tc.name, n.ID)
			rq := harness.Request{Method: tc.method, Path: tc.path, ContentType: tc.ct}
			if tc.body != "" {
				rq.Body = []byte(tc.body)
			} else if tc.method != http.MethodGet && tc.method != http.MethodDelete {
				rq.Body = []byte{}
			}
			r, err := n.Do(t.Context(), rq)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			if r.Status != tc.status {
				t.Errorf("%s: want %d, got %s", what, tc.status, r)
				continue
			}
			e := expectJSONError(t, what, r)
			if !strings.Contains(strings.ToLower(e.Error), strings.ToLower(tc.want)) {
				t.Errorf("%s: error %q does not mention %q", what, e.Error, tc.want)
			}
		}
	}

	// Nothing changed anywhere: same members, settings and state hash.
	c.WaitMembers(c.Nodes())
	after := c.WaitSameState()
	if after != before {
		t.Errorf("state hash changed from %s to %s after only bad requests", before, after)
	}
	for _, n := range c.Nodes() {
		if d := diffSettings(mustSettings(t, n, true), base); d != "" {
			t.Errorf("%s settings changed after only bad requests: %s", n.ID, d)
		}
	}
}

// writer PUTs ever larger values of one setting through a node, one after
// another, recording what was acknowledged.
type writer struct {
	stop chan struct{}
	done chan struct{}

	mu         sync.Mutex
	acks       int
	lastAcked  int64
	refusals   int
	unexpected []string
}

func startWriter(n *harness.Node, field string, from int64, limit time.Duration) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		deadline := time.After(limit)
		pace := time.NewTicker(20 * time.Millisecond)
		defer pace.Stop()
		for v := from; ; v++ {
			select {
			case <-w.stop:
				return
			case <-deadline:
				w.note(fmt.Sprintf("writer still running after %v", limit))
				return
			case <-pace.C:
			}
			r, err := n.PutSettings(harness.Settings{field: v}, "")
			switch {
			case err != nil:
				w.note(fmt.Sprintf("PUT %s=%d: %v", field, v, err))
			case r.Status == http.StatusOK:
				if _, err := settingsAnswer(r, harness.Settings{field: v}); err != nil {
					w.note(fmt.Sprintf("PUT %s=%d: %v", field, v, err))
					continue
				}
				w.mu.Lock()
				w.acks++
				w.lastAcked = v
				w.mu.Unlock()
			case r.Status == http.StatusServiceUnavailable && r.Header.Get("Retry-After") != "":
				w.mu.Lock()
				w.refusals++
				w.mu.Unlock()
			default:
				w.note(fmt.Sprintf("PUT %s=%d: %s", field, v, r))
			}
		}
	}()
	return w
}

func (w *writer) note(s string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unexpected = append(w.unexpected, s)
}

func (w *writer) ackCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acks
}

// finish stops the writer and returns the last acknowledged value, the
// number of 503 refusals and anything unexpected.
func (w *writer) finish() (int64, int, []string) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastAcked, w.refusals, w.unexpected
}

func TestLeaderSIGTERMHandsOverWithoutLosingWrites(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	fs := harness.Except(c.Nodes(), leader)
	f, g := fs[0], fs[1]

	// Acknowledged writes, one field each, so each must survive on its own.
	acked := harness.Settings{}
	for i, field := range []string{"lease_lifecycle_seconds", "max_result_bytes", "queue_lifetime_seconds", "max_payload_bytes", "queues_per_client"} {
		v := int64(1000 + i)
		put(t, f, harness.Settings{field: v}, "")
		acked[field] = v
	}
	// And a stream of writes through the other follower across the handover.
	w := startWriter(g, "queue_max_jobs", 200, 90*time.Second)
	stopped := false
	defer func() {
		if !stopped {
			w.finish()
		}
	}()
	c.Eventually("the writer to get going", func() error {
		if w.ackCount() < 3 {
			return errors.New("fewer than 3 acknowledged writes")
		}
		return nil
	})

	signalled := time.Now()
	code := c.Stop(leader)
	t.Logf("leader %s exited with %d %v after SIGTERM", leader.ID, code, time.Since(signalled).Round(time.Millisecond))
	if code != 0 {
		t.Errorf("leader exited with code %d on SIGTERM, want 0", code)
	}
	log := leader.LogSinceStart()
	for _, s := range []string{"handed leadership over", "stopped cleanly"} {
		if !strings.Contains(log, s) {
			t.Errorf("the leader's log does not say %q", s)
		}
	}
	next := c.WaitLeader(f, g)
	if next == leader {
		t.Fatalf("the stopped node still leads")
	}
	acksAtStop := w.ackCount()
	c.Eventually("writes to continue through the new leader", func() error {
		if w.ackCount() < acksAtStop+3 {
			return fmt.Errorf("%d writes acknowledged since the stop", w.ackCount()-acksAtStop)
		}
		return nil
	})
	lastAcked, refusals, unexpected := w.finish()
	stopped = true
	t.Logf("writer: last acknowledged %d, %d refusals (503 + Retry-After)", lastAcked, refusals)
	for _, u := range unexpected {
		t.Errorf("writer: %s", u)
	}

	got := mustSettings(t, f, false)
	for k, v := range acked {
		if got[k] != v {
			t.Errorf("acknowledged write %s=%d lost: now %d", k, v, got[k])
		}
	}
	if got["queue_max_jobs"] < lastAcked {
		t.Errorf("acknowledged write queue_max_jobs=%d lost: now %d", lastAcked, got["queue_max_jobs"])
	}

	// The old leader comes back from its data and follows.
	c.Start(leader)
	c.WaitMembers(c.Nodes())
	c.WaitSameState()
	if d := diffSettings(mustSettings(t, leader, true), got); d != "" {
		t.Errorf("restarted %s differs: %s", leader.ID, d)
	}
	c.Eventually("the cluster to settle", func() error { return checkFormed(c, c.Nodes()) })
}

// TestConcurrentPartialSettingsUpdatesAreAllKept sends partial PUTs of
// different settings at the same time. Each is acknowledged, so each must
// be in the state afterwards.
func TestConcurrentPartialSettingsUpdatesAreAllKept(t *testing.T) {
	t.Parallel()
	_, leader := formCluster(t, 3, harness.Options{})
	fields := []string{"lease_lifecycle_seconds", "max_result_bytes", "queue_lifetime_seconds", "queue_max_jobs",
		"queue_max_attempts", "max_payload_bytes", "queues_per_client", "queue_create_window_seconds"}
	for round := int64(1); round <= 5; round++ {
		want := harness.Settings{}
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, len(fields))
		for i, field := range fields {
			v := round*100 + int64(i) + 1
			want[field] = v
			wg.Go(func() {
				<-start
				r, err := leader.PutSettings(harness.Settings{field: v}, "")
				if err != nil {
					errs <- err
					return
				}
				if _, err := settingsAnswer(r, harness.Settings{field: v}); err != nil {
					errs <- fmt.Errorf("PUT %s=%d: %w", field, v, err)
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		got := mustSettings(t, leader, false)
		var lost []string
		for _, field := range fields {
			if got[field] != want[field] {
				lost = append(lost, fmt.Sprintf("%s=%d (now %d)", field, want[field], got[field]))
			}
		}
		if len(lost) > 0 {
			t.Fatalf("round %d: %d concurrent partial PUTs were all acknowledged with 200, but these updates are gone: %s",
				round, len(fields), strings.Join(lost, ", "))
		}
	}
}

func TestPausedLeaderIsReplacedAndFollowsAfterResume(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	put(t, leader, harness.Settings{"queue_max_jobs": 21}, "")
	before, err := leader.Status()
	if err != nil {
		t.Fatal(err)
	}
	others := harness.Except(c.Nodes(), leader)

	c.Pause(leader) // SIGSTOP: sockets stay open, nothing answers
	// Wait for the election first: a request a follower forwards to the
	// paused leader would hang for the server's whole request timeout.
	next := c.WaitLeader(others...)
	putEventually(t, c, others[0], harness.Settings{"queue_max_jobs": 22}, 20*time.Second)
	st, err := next.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.Term <= before.Term {
		t.Errorf("new leader %s in term %d, the paused one led term %d", next.ID, st.Term, before.Term)
	}

	c.Resume(leader)
	c.WaitSameState(c.Nodes()...)
	if got := mustSettings(t, leader, true)["queue_max_jobs"]; got != 22 {
		t.Errorf("resumed %s has queue_max_jobs %d, want 22", leader.ID, got)
	}
	c.Eventually("one leader again", func() error { return checkFormed(c, c.Nodes()) })
}

func TestServeRefusesInvalidConfiguration(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		code int
		log  string
	}{
		{"bootstrap-expect without join", []string{"--bootstrap-expect", "3"}, 1, "needs --join"},
		{"unknown flag", []string{"--no-such-flag"}, 2, "no-such-flag"},
		{"stray argument", []string{"extra"}, 2, "unexpected arguments"},
		// hashicorp/raft needs an election timeout at least the heartbeat timeout.
		{"election timeout below heartbeat", []string{"--raft-heartbeat-timeout", "1s", "--raft-election-timeout", "500ms"}, 1, "ElectionTimeout"},
		{"negative bootstrap-expect", []string{"--bootstrap-expect", "-1"}, 1, "bootstrap-expect"},
		{"dns join without a port", []string{"--join", "dns:holdfast-peers"}, 1, "must be dns:NAME:PORT"},
		{"peer certificate alone", []string{"--peer-cert-file", "n1.pem"}, 1, "go together"},
		{"API certificate without key", []string{"--tls-cert-file", "n1.pem"}, 1, "go together"},
		{"client auth without TLS", []string{"--tls-client-auth", "require"}, 1, "need TLS on the HTTP listener"},
		{"unknown client auth", []string{"--tls-cert-file", "a.pem", "--tls-key-file", "a-key.pem", "--tls-client-auth", "sometimes"}, 1, "--tls-client-auth"},
		{"missing certificate files", []string{"--tls-cert-file", "none.pem", "--tls-key-file", "none-key.pem"}, 1, "load certificate"},
	}
	c := env.NewCluster(t, len(cases), harness.Options{})
	for i, tc := range cases {
		n := c.Node(i)
		c.Start(n, tc.args...)
		code, err := n.Wait(30 * time.Second)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			c.Kill(n)
			continue
		}
		if code != tc.code {
			t.Errorf("%s: exit code %d, want %d", tc.name, code, tc.code)
		}
		if log := n.LogSinceStart(); !strings.Contains(log, tc.log) {
			t.Errorf("%s: log does not mention %q:\n%s", tc.name, tc.log, log)
		}
	}
}

// TestDNSJoinSaysWhatItResolvedTo: a node forming a cluster through a
// dns: join entry logs the name and the addresses it resolved to while it
// waits for the others.
func TestDNSJoinSaysWhatItResolvedTo(t *testing.T) {
	t.Parallel()
	c := env.NewCluster(t, 1, harness.Options{})
	n := c.Node(0)
	_, port, err := net.SplitHostPort(n.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	entry := "dns:localhost:" + port
	c.Start(n, "--bootstrap-expect", "3", "--join", entry)
	c.Eventually("the wait to name the join entry and what it resolved to", func() error {
		log := n.LogSinceStart()
		if !strings.Contains(log, entry+" resolved to ") || !strings.Contains(log, "127.0.0.1") || !strings.Contains(log, "1 of 3 expected nodes answered") {
			return fmt.Errorf("log so far:\n%s", log)
		}
		return nil
	})
}

// TestSettingsPutRejectsNullBody: the body of PUT /cluster/settings must
// be a JSON object; an array or a string is refused with 400, and so must
// be a JSON null, which names no setting.
func TestSettingsPutRejectsNullBody(t *testing.T) {
	t.Parallel()
	c := env.NewCluster(t, 1, harness.Options{})
	n := c.Node(0)
	c.Start(n)
	c.WaitLeader(n)
	before := c.WaitSameState()
	for _, body := range []string{`"x"`, `null`} {
		r, err := n.Do(t.Context(), harness.Request{Method: http.MethodPut, Path: "/cluster/settings", Body: []byte(body), ContentType: "application/json"})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusBadRequest {
			t.Errorf("PUT settings with body %s: want 400 (not a JSON object), got %s", body, r)
			continue
		}
		expectJSONError(t, "PUT settings with body "+body, r)
	}
	if after := c.WaitSameState(); after != before {
		t.Errorf("the state changed (a write was committed) although no body named a setting: hash %s -> %s", before, after)
	}
}

// TestRestartedNodeWithNewAddressesIsFoundAgain restarts a follower from its
// data on new HTTP and Raft ports: the cluster learns both addresses (Raft
// configuration and node directory), the node catches up, and requests
// through it reach the leader.
func TestRestartedNodeWithNewAddressesIsFoundAgain(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	moved := harness.Except(c.Nodes(), leader)[0]
	if code := c.Stop(moved); code != 0 {
		t.Fatalf("%s exited %d on SIGTERM", moved.ID, code)
	}
	oldHTTP, oldRaft := moved.HTTPAddr, moved.RaftAddr
	var err error
	if moved.HTTPAddr, err = env.Ports.Addr(); err != nil {
		t.Fatal(err)
	}
	if moved.RaftAddr, err = env.Ports.Addr(); err != nil {
		t.Fatal(err)
	}
	put(t, leader, harness.Settings{"queue_max_jobs": 21}, "")
	// A new Raft address means no leader will call: --join names a member
	// to tell where the node now is.
	c.Start(moved, "--join", leader.HTTPAddr)
	c.WaitMembers(c.Nodes())
	for _, n := range c.Nodes() {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		m, ok := st.Member(moved.ID)
		if !ok || m.HTTPAddr != moved.HTTPAddr || m.RaftAddr != moved.RaftAddr {
			t.Fatalf("%s lists %s as %+v; want http %s raft %s (was %s, %s)", n.ID, moved.ID, m, moved.HTTPAddr, moved.RaftAddr, oldHTTP, oldRaft)
		}
	}
	c.WaitSameState()
	put(t, moved, harness.Settings{"queue_max_jobs": 22}, "")
	for _, n := range c.Nodes() {
		if got := mustSettings(t, n, false)["queue_max_jobs"]; got != 22 {
			t.Errorf("via %s: queue_max_jobs %d, want 22", n.ID, got)
		}
	}
}
