package test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// leaseRequestIDs: an acquire repeated with the request_id of the grant
// that holds the lease gets that grant again, unchanged; any other repeat
// behaves as without one (README: retry-safe acquire and claim).
func leaseRequestIDs(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	key := "rid:" + randHex(t, 8)
	rid := randHex(t, 16) // 32 hex characters
	body := map[string]any{"namespace": ns, "key": key, "fingerprint": "fp", "ttl_seconds": 300, "request_id": rid}
	g := checkGranted(t, "acquire with a request id", e.do(t, n, post("/lease", body)), 300)
	for i := 0; i < 2; i++ {
		again := e.do(t, n, post("/lease", body))
		expectStatus(t, "the same acquire again", again, http.StatusCreated)
		if str(t, "again", again.m, "owner_token") != g.owner || integer(t, "again", again.m, "fencing_token") != g.fence ||
			integer(t, "again", again.m, "lease_expires_at_timestamp") != g.exp {
			t.Errorf("the same acquire again: %s, first %+v", again, g)
		}
	}
	// Another request id, or none, is refused while the lease is held; the
	// same request id with another fingerprint is a conflict.
	other := map[string]any{"namespace": ns, "key": key, "fingerprint": "fp", "request_id": randHex(t, 16)}
	checkHeld(t, "acquire with another request id", e.do(t, n, post("/lease", other)))
	checkHeld(t, "acquire without a request id", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "fingerprint": "fp"})))
	checkConflict(t, "the request id with another fingerprint", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "fingerprint": "other", "request_id": rid})))
	// The owner token works like any; after a release the request id is an
	// ordinary acquire: a new grant with a higher fence.
	owner := map[string]any{"namespace": ns, "key": key, "owner_token": g.owner}
	checkReleased(t, "release", e.do(t, n, post("/lease/release", owner)), g.fence)
	g2 := checkGranted(t, "the request id after the release", e.do(t, n, post("/lease", body)), 300)
	if g2.fence <= g.fence {
		t.Errorf("after the release: fencing_token %d, want more than %d", g2.fence, g.fence)
	}
	// The same request id on another key gives another owner token.
	g3 := checkGranted(t, "the request id on another key", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key + ":2", "request_id": rid})), 60)
	if g3.owner == g.owner {
		t.Error("one request id gave two keys the same owner token")
	}
	for _, bad := range []string{randHex(t, 15), "x", `has space ` + randHex(t, 16), randHex(t, 65)} {
		expectError(t, fmt.Sprintf("request_id %q", bad), e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key + ":3", "request_id": bad})),
			http.StatusBadRequest, "request_id", nil, "32 to 128")
	}
	expectError(t, "request_id a number", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key + ":3", "request_id": 7})),
		http.StatusBadRequest, "request_id", nil)
}

// queueRequestIDs: a claim repeated with the request_id of a job's active
// claim answers that job and receipt again, unchanged.
func queueRequestIDs(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	a := jobWant{key: "rid-a", payload: `1`, status: "pending"}
	a.id = checkEnqueued(t, "enqueue a", e.enqueue(t, n, q, a.key, a.payload), q, false, a)
	b := jobWant{key: "rid-b", payload: `2`, status: "pending"}
	b.id = checkEnqueued(t, "enqueue b", e.enqueue(t, n, q, b.key, b.payload), q, false, b)
	rid := randHex(t, 20)
	body := fmt.Sprintf(`{"visibility_timeout":300,"request_id":%q}`, rid)
	want := jobWant{id: a.id, key: a.key, payload: a.payload, status: "claimed", attempts: 1, receipt: true, visibility: 300}
	_, r, exp := checkJobAnswer(t, "claim with a request id", e.claim(t, n, q, body), q, want)
	want.visibility = 0
	for i := 0; i < 2; i++ {
		_, r2, exp2 := checkJobAnswer(t, "the same claim again", e.claim(t, n, q, fmt.Sprintf(`{"visibility_timeout":30,"request_id":%q}`, rid)), q, want)
		if r2 != r || exp2 != exp {
			t.Errorf("the same claim again: receipt or window changed (%d, was %d)", exp2, exp)
		}
	}
	e.expectCounts(t, n, q, "after the repeated claims", counts{pending: 1, claimed: 1, total: 2}, r)
	// Another request id claims the next job.
	checkJobAnswer(t, "claim with another request id", e.claim(t, n, q, fmt.Sprintf(`{"request_id":%q}`, randHex(t, 16))), q,
		jobWant{id: b.id, key: b.key, payload: b.payload, status: "claimed", attempts: 1, receipt: true})
	// With no job left to claim, a waiting claim repeated with the request
	// id still answers its claim at once.
	start := time.Now()
	_, r3, _ := checkJobAnswer(t, "the same claim again with wait_seconds", e.claim(t, n, q, fmt.Sprintf(`{"wait_seconds":10,"request_id":%q}`, rid)), q, want)
	if r3 != r || time.Since(start) > 3*time.Second {
		t.Errorf("a waiting repeat: receipt changed or it waited %v", time.Since(start))
	}
	// The receipt acks; the repeat after the ack is an ordinary claim.
	checkJobAnswer(t, "ack with the receipt", e.jobAction(t, n, q, a.id, "ack", receiptBody(r)), q,
		jobWant{id: a.id, key: a.key, payload: a.payload, status: "completed", attempts: 1})
	checkEmptyClaim(t, "the request id after the ack", e.claim(t, n, q, body))
	for _, bad := range []string{`"short"`, `12`, fmt.Sprintf("%q", randHex(t, 15)+"!")} {
		expectError(t, "claim with request_id "+bad, e.claim(t, n, q, `{"request_id":`+bad+`}`), http.StatusBadRequest, "request_id", nil)
	}
}
