package test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// Waiting requests (README: waiting instead of polling). Each scenario runs
// through a follower and through the leader; times are checked loosely, the
// order strictly.

// background runs f in a goroutine and returns a channel with its answer.
func background(f func() *answer) <-chan *answer {
	ch := make(chan *answer, 1)
	go func() { ch <- f() }()
	return ch
}

// receive waits (bounded) for a background answer.
func receive(t *testing.T, what string, ch <-chan *answer, within time.Duration) *answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(within):
		t.Fatalf("%s: no answer within %v", what, within)
		return nil
	}
}

// stillWaiting checks that a background request has not answered yet.
func stillWaiting(t *testing.T, what string, ch <-chan *answer) {
	t.Helper()
	select {
	case a := <-ch:
		t.Fatalf("%s answered while it should still wait: %s", what, a)
	case <-time.After(300 * time.Millisecond):
	}
}

// queueLongPoll: waiting claims take jobs as they arrive, in the order the
// claims came; an empty wait ends with job: null at its deadline.
func queueLongPoll(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	var waits []<-chan *answer
	for i := 0; i < 3; i++ {
		waits = append(waits, background(func() *answer {
			return e.claim(t, n, q, `{"visibility_timeout":300,"wait_seconds":15}`)
		}))
		time.Sleep(150 * time.Millisecond) // arrival order
	}
	stillWaiting(t, "a claim on an empty queue", waits[0])
	for i := 0; i < 3; i++ {
		key := fmt.Sprintf("lp-%d", i)
		id := checkEnqueued(t, "enqueue "+key, e.enqueue(t, n, q, key, fmt.Sprint(i)), q, false, jobWant{key: key, payload: fmt.Sprint(i), status: "pending"})
		got := receive(t, fmt.Sprintf("waiting claim %d", i), waits[i], 5*time.Second)
		checkJobAnswer(t, fmt.Sprintf("waiting claim %d", i), got, q,
			jobWant{id: id, key: key, payload: fmt.Sprint(i), status: "claimed", attempts: 1, receipt: true, visibility: 300})
	}
	// At the deadline: job null, not before.
	start := time.Now()
	checkEmptyClaim(t, "a 1-second wait on an empty queue", e.claim(t, n, q, `{"wait_seconds":1}`))
	if el := time.Since(start); el < 900*time.Millisecond || el > 5*time.Second {
		t.Errorf("a 1-second wait answered after %v", el)
	}
	// A wait ends when a delayed release's delay does.
	id := checkEnqueued(t, "enqueue lp-delayed", e.enqueue(t, n, q, "lp-delayed", `"d"`), q, false, jobWant{key: "lp-delayed", payload: `"d"`, status: "pending"})
	_, r, _ := checkJobAnswer(t, "claim lp-delayed", e.claim(t, n, q, `{}`), q, jobWant{id: id, key: "lp-delayed", payload: `"d"`, status: "claimed", attempts: 1, receipt: true})
	e.jobAction(t, n, q, id, "release", fmt.Sprintf(`{"receipt":%q,"delay_seconds":2}`, r))
	start = time.Now()
	got := e.claim(t, n, q, `{"wait_seconds":10}`)
	checkJobAnswer(t, "a wait across a release's delay", got, q, jobWant{id: id, key: "lp-delayed", payload: `"d"`, status: "claimed", attempts: 2, receipt: true})
	if el := time.Since(start); el < time.Second || el > 6*time.Second {
		t.Errorf("the delayed job reached the waiting claim after %v (delay 2 s)", el)
	}
	// Refusals come at once, not at the deadline.
	start = time.Now()
	a := e.do(t, n, call{method: http.MethodPost, path: "/queue/" + q.id + "/claim", token: q.write, raw: []byte(`{"wait_seconds":20}`)})
	expectError(t, "a waiting claim with the write token", a, http.StatusForbidden, "", nil)
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("a forbidden waiting claim answered after %v", el)
	}
	for _, bad := range []string{`21`, `-1`, `"5"`, `1.5`} {
		expectError(t, "claim with wait_seconds "+bad, e.claim(t, n, q, `{"wait_seconds":`+bad+`}`), http.StatusBadRequest, "wait_seconds", nil)
	}
}

// leaseBlockingAcquire: waiting acquires get the lease in arrival order as
// it is released, expires or completes, each with a higher fencing token.
func leaseBlockingAcquire(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	key := "block:" + randHex(t, 8)
	body := func(wait int) map[string]any {
		return map[string]any{"namespace": ns, "key": key, "fingerprint": "fp", "ttl_seconds": 30, "wait_seconds": wait}
	}
	first := checkGranted(t, "first acquire", e.do(t, n, post("/lease", body(0))), 30)
	var waits []<-chan *answer
	for i := 0; i < 2; i++ {
		waits = append(waits, background(func() *answer { return e.do(t, n, post("/lease", body(15))) }))
		time.Sleep(150 * time.Millisecond)
	}
	stillWaiting(t, "an acquire of a held lease", waits[0])
	owner := first.owner
	fence := first.fence
	for i, w := range waits {
		checkReleased(t, fmt.Sprintf("release %d", i), e.do(t, n, post("/lease/release", map[string]any{"namespace": ns, "key": key, "owner_token": owner})), fence)
		g := checkGranted(t, fmt.Sprintf("waiter %d", i), receive(t, fmt.Sprintf("waiter %d", i), w, 5*time.Second), 30)
		if g.fence <= fence {
			t.Errorf("waiter %d: fencing_token %d, not above %d", i, g.fence, fence)
		}
		owner, fence = g.owner, g.fence
	}
	// At the deadline: the ordinary 409 held.
	start := time.Now()
	h := checkHeld(t, "a 1-second wait on a held lease", e.do(t, n, post("/lease", body(1))))
	if el := time.Since(start); el < 900*time.Millisecond || el > 5*time.Second {
		t.Errorf("a 1-second wait answered after %v", el)
	}
	if h.fence != fence {
		t.Errorf("the 409 names fencing_token %d, the holder has %d", h.fence, fence)
	}
	// Another fingerprint is a conflict at once.
	start = time.Now()
	checkConflict(t, "a waiting acquire with another fingerprint", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "fingerprint": "other", "wait_seconds": 30})))
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("a conflicting waiting acquire answered after %v", el)
	}
	// A waiter gets the stored result when the holder completes.
	w := background(func() *answer { return e.do(t, n, post("/lease", body(15))) })
	stillWaiting(t, "an acquire of a held lease", w)
	e.do(t, n, post("/lease/complete", map[string]any{"namespace": ns, "key": key, "owner_token": owner, "result": map[string]any{"done": true}}))
	c := checkCompleted(t, "a waiter when the holder completes", receive(t, "waiter on complete", w, 5*time.Second))
	if string(c.result) != `{"done":true}` {
		t.Errorf("the waiter got result %s", c.result)
	}
	// And the lease when the holder's lease expires.
	key2 := key + ":expiry"
	checkGranted(t, "a 1-second lease", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key2, "ttl_seconds": 1})), 1)
	start = time.Now()
	checkGranted(t, "a waiter when the lease expires", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key2, "wait_seconds": 10})), 60)
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the expired lease reached its waiter after %v", el)
	}
	for _, bad := range []any{61, -1, "5", 1.5} {
		expectError(t, fmt.Sprintf("acquire with wait_seconds %v", bad), e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "wait_seconds": bad})),
			http.StatusBadRequest, "wait_seconds", nil)
	}
}

// queueAwaitOutcome: a job read with wait_seconds answers when the job is
// completed or failed, or with its state at the deadline.
func queueAwaitOutcome(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	w := jobWant{key: "await", payload: `{"a":1}`, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, w.key, w.payload), q, false, w)
	readWait := func(secs int) *answer {
		return e.do(t, n, call{method: http.MethodGet, path: fmt.Sprintf("/queue/%s/jobs/%s?wait_seconds=%d", q.id, w.id, secs), token: q.read})
	}
	start := time.Now()
	checkJobAnswer(t, "a 1-second wait on a pending job", readWait(1), q, w)
	if el := time.Since(start); el < 900*time.Millisecond || el > 5*time.Second {
		t.Errorf("a 1-second wait answered after %v", el)
	}
	_, r, _ := checkJobAnswer(t, "claim", e.claim(t, n, q, `{}`), q, jobWant{id: w.id, key: w.key, payload: w.payload, status: "claimed", attempts: 1, receipt: true})
	ch := background(func() *answer { return readWait(15) })
	stillWaiting(t, "a read awaiting the outcome", ch)
	e.jobAction(t, n, q, w.id, "ack", receiptBody(r))
	checkJobAnswer(t, "the awaited outcome", receive(t, "await", ch, 5*time.Second), q,
		jobWant{id: w.id, key: w.key, payload: w.payload, status: "completed", attempts: 1})
	for _, bad := range []string{"61", "-1", "x", "1.5"} {
		expectError(t, "job read with wait_seconds "+bad,
			e.do(t, n, call{method: http.MethodGet, path: fmt.Sprintf("/queue/%s/jobs/%s?wait_seconds=%s", q.id, w.id, bad), token: q.read}),
			http.StatusBadRequest, "wait_seconds", nil)
	}
	expectError(t, "a queue read with wait_seconds",
		e.do(t, n, call{method: http.MethodGet, path: "/queue/" + q.id + "?wait_seconds=1", token: q.read}), http.StatusBadRequest, "wait_seconds", nil)
	expectError(t, "a stale read with wait_seconds",
		e.do(t, n, call{method: http.MethodGet, path: fmt.Sprintf("/queue/%s/jobs/%s?stale=true&wait_seconds=1", q.id, w.id), token: q.read}), http.StatusBadRequest, "wait_seconds", nil)
}

// waitAbandoned: a waiting claim or acquire whose caller goes away stops
// waiting: it never takes the job or the lease for nobody.
func waitAbandoned(t *testing.T, e *apiEnv, n *harness.Node) {
	impatient, err := harness.NewSourceClient("127.0.0.1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	q := e.createQueue(t, n)
	if a, err := e.trySend(t, impatient, n, call{method: http.MethodPost, path: "/queue/" + q.id + "/claim", token: q.worker, raw: []byte(`{"wait_seconds":20}`)}); err == nil {
		t.Fatalf("a 20-second wait answered within the client's 1-second timeout: %s", a)
	}
	time.Sleep(500 * time.Millisecond) // the cancellation travels
	id := checkEnqueued(t, "enqueue after the abandoned wait", e.enqueue(t, n, q, "abandoned", `1`), q, false, jobWant{key: "abandoned", payload: `1`, status: "pending"})
	checkJobAnswer(t, "a claim after the abandoned wait", e.claim(t, n, q, `{}`), q,
		jobWant{id: id, key: "abandoned", payload: `1`, status: "claimed", attempts: 1, receipt: true})

	ns := e.newNamespace(t, n)
	body := map[string]any{"namespace": ns, "key": "abandoned"}
	g := checkGranted(t, "acquire", e.do(t, n, post("/lease", body)), 60)
	if a, err := e.trySend(t, impatient, n, post("/lease", map[string]any{"namespace": ns, "key": "abandoned", "wait_seconds": 20})); err == nil {
		t.Fatalf("a 20-second wait answered within the client's 1-second timeout: %s", a)
	}
	time.Sleep(500 * time.Millisecond)
	checkReleased(t, "release", e.do(t, n, post("/lease/release", map[string]any{"namespace": ns, "key": "abandoned", "owner_token": g.owner})), g.fence)
	checkGranted(t, "an acquire after the abandoned wait", e.do(t, n, post("/lease", body)), 60)
}
