package test

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// Waiting requests as the cluster changes under them (README: waiting
// instead of polling), each on a cluster of its own.

// TestWaitersAnswerWhenLeadershipEnds: waiters on a leader that loses its
// followers answer 503 not_applied at once, not at their deadline; a waiter
// through a follower that loses the leader answers 503 as well, and neither
// answer is a claim or a grant.
func TestWaitersAnswerWhenLeadershipEnds(t *testing.T) {
	t.Parallel()
	e := formAPICluster(t, harness.Options{})
	q := e.createQueue(t, e.leader)
	ns := e.newNamespace(t, e.leader)
	checkGranted(t, "the holder", e.do(t, e.leader, post("/lease", map[string]any{"namespace": ns, "key": "k", "ttl_seconds": 300})), 300)
	claim := call{method: http.MethodPost, path: "/queue/" + q.id + "/claim", token: q.worker, raw: []byte(`{"wait_seconds":20}`)}
	acquire := post("/lease", map[string]any{"namespace": ns, "key": "k", "wait_seconds": 60})
	waits := map[string]<-chan *answer{
		"claim on the leader":   background(func() *answer { return e.send(t, nil, e.leader, claim) }),
		"acquire on the leader": background(func() *answer { return e.send(t, nil, e.leader, acquire) }),
	}
	for what, ch := range waits {
		stillWaiting(t, what, ch)
	}
	followers := harness.Except(e.c.Nodes(), e.leader)
	for _, f := range followers {
		if err := f.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			for _, f := range followers {
				_ = f.Signal(syscall.SIGCONT)
			}
		}
	}
	defer resume()
	start := time.Now()
	for what, ch := range waits {
		a := receive(t, what+" after the leader lost its followers", ch, 10*time.Second)
		if a.Status != http.StatusServiceUnavailable || a.m["outcome"] != "not_applied" {
			t.Errorf("%s after the leader lost its followers: %s, want 503 not_applied", what, a)
		}
	}
	if el := time.Since(start); el > 8*time.Second {
		t.Errorf("the waiters answered %v after the leader lost its followers", el)
	}
	resume()
	leader := e.c.WaitLeader()

	// Through a follower: its leader stops answering.
	q2 := e.createQueue(t, leader)
	via := harness.Except(e.c.Nodes(), leader)[0]
	ch := background(func() *answer {
		return e.send(t, nil, via, call{method: http.MethodPost, path: "/queue/" + q2.id + "/claim", token: q2.worker, raw: []byte(`{"wait_seconds":20}`)})
	})
	stillWaiting(t, "a claim through a follower", ch)
	if err := leader.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = leader.Signal(syscall.SIGCONT) }()
	start = time.Now()
	a := receive(t, "a claim through a follower that lost its leader", ch, 15*time.Second)
	if a.Status != http.StatusServiceUnavailable || a.m["job"] != nil {
		t.Errorf("a claim through a follower that lost its leader: %s, want 503", a)
	}
	if el := time.Since(start); el > 12*time.Second {
		t.Errorf("the follower's waiter answered %v after its leader stopped", el)
	}
}

// cpuSeconds is the user and system CPU time of process pid so far.
func cpuSeconds(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name may hold spaces: the fields follow its closing paren.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // clock ticks: USER_HZ is 100 on Linux
}

// TestWaitersCostNoCPU: a hundred waiting claims and acquires spend no CPU
// on the leader while nothing happens (a busy loop would spend cores). The
// bound is generous: an idle leader's heartbeats cost a few percent of one
// core.
func TestWaitersCostNoCPU(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	e := formAPICluster(t, harness.Options{})
	q := e.createQueue(t, e.leader)
	ns := e.newNamespace(t, e.leader)
	checkGranted(t, "the holder", e.do(t, e.leader, post("/lease", map[string]any{"namespace": ns, "key": "k", "ttl_seconds": 300})), 300)
	var waits []<-chan *answer
	for i := 0; i < 50; i++ {
		waits = append(waits,
			background(func() *answer {
				return e.send(t, nil, e.leader, call{method: http.MethodPost, path: "/queue/" + q.id + "/claim", token: q.worker, raw: []byte(`{"wait_seconds":10}`)})
			}),
			background(func() *answer {
				return e.send(t, nil, e.leader, post("/lease", map[string]any{"namespace": ns, "key": "k", "wait_seconds": 10}))
			}))
	}
	time.Sleep(2 * time.Second) // every waiter waits
	pid := e.leader.Pid()
	before := cpuSeconds(t, pid)
	time.Sleep(4 * time.Second)
	spent := cpuSeconds(t, pid) - before
	t.Logf("the leader spent %.2f s of CPU in 4 s with 100 waiters", spent)
	if spent > 0.8 {
		t.Errorf("the leader spent %.2f s of CPU in 4 s while 100 requests waited: a busy loop?", spent)
	}
	for i, ch := range waits {
		a := receive(t, fmt.Sprintf("waiter %d", i), ch, 15*time.Second)
		if a.Status != http.StatusOK && a.Status != http.StatusConflict {
			t.Errorf("waiter %d at its deadline: %s", i, a)
		}
	}
}

// TestAcquirersThroughEveryNodeAreServedInArrivalOrder: waiters on one key
// that came through the leader and both followers get the lease in the
// order they came.
func TestAcquirersThroughEveryNodeAreServedInArrivalOrder(t *testing.T) {
	t.Parallel()
	e := formAPICluster(t, harness.Options{})
	ns := e.newNamespace(t, e.leader)
	body := func(wait int) map[string]any {
		return map[string]any{"namespace": ns, "key": "fifo", "ttl_seconds": 60, "wait_seconds": wait}
	}
	g := checkGranted(t, "the holder", e.do(t, e.leader, post("/lease", body(0))), 60)
	nodes := append(harness.Except(e.c.Nodes(), e.leader), e.leader)
	var waits []<-chan *answer
	for _, n := range nodes {
		waits = append(waits, background(func() *answer { return e.send(t, nil, n, post("/lease", body(20))) }))
		time.Sleep(300 * time.Millisecond)
	}
	owner, fence := g.owner, g.fence
	for i, ch := range waits {
		stillWaiting(t, fmt.Sprintf("waiter %d", i), ch)
		checkReleased(t, "release", e.do(t, e.leader, post("/lease/release", map[string]any{"namespace": ns, "key": "fifo", "owner_token": owner})), fence)
		next := checkGranted(t, fmt.Sprintf("waiter %d (through %s)", i, nodes[i].ID), receive(t, fmt.Sprintf("waiter %d", i), ch, 5*time.Second), 60)
		if next.fence <= fence {
			t.Errorf("waiter %d: fence %d after %d", i, next.fence, fence)
		}
		owner, fence = next.owner, next.fence
	}
}
