//go:build unix

package test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// Lease scenarios of the end-to-end API suite. Each runs against one node
// (TestAPI runs it against a follower and against the leader) and checks
// every field of every answer against the spec and the README's state
// table.

const lifecycle = 86400 // seconds of a lease lifecycle and of a queue

// grant is what a 201 acquire answered.
type grant struct {
	owner                   string
	ttl, fence, exp, abs    int64
	expAt, absAt            string
	requestedAt, answeredAt int64
}

// checkGranted checks a 201 acquire (spec: "Acquire a lease"; README:
// acquire rows "new lifecycle" and "free, same fingerprint").
func checkGranted(t *testing.T, what string, a *answer, ttl int64) grant {
	t.Helper()
	expectStatus(t, what, a, http.StatusCreated)
	fields(t, what, a.m, []string{"ok", "status", "owner_token", "ttl_seconds", "fencing_token",
		"lease_expires_at_timestamp", "lease_expires_at", "absolute_expires_at_timestamp", "absolute_expires_at"}, nil)
	if !boolean(t, what, a.m, "ok") {
		t.Errorf("%s: ok is false", what)
	}
	if s := str(t, what, a.m, "status"); s != "held" {
		t.Errorf("%s: status %q, want held", what, s)
	}
	g := grant{
		owner:       str(t, what, a.m, "owner_token"),
		ttl:         integer(t, what, a.m, "ttl_seconds"),
		fence:       integer(t, what, a.m, "fencing_token"),
		exp:         timePair(t, what, a.m, "lease_expires_at", "lease_expires_at_timestamp"),
		abs:         timePair(t, what, a.m, "absolute_expires_at", "absolute_expires_at_timestamp"),
		expAt:       str(t, what, a.m, "lease_expires_at"),
		absAt:       str(t, what, a.m, "absolute_expires_at"),
		requestedAt: a.before.Unix(),
		answeredAt:  a.after.Unix(),
	}
	checkOwnerToken(t, what, g.owner)
	if g.ttl != ttl {
		t.Errorf("%s: ttl_seconds %d, want %d", what, g.ttl, ttl)
	}
	if g.fence < 1 {
		t.Errorf("%s: fencing_token %d, want >= 1", what, g.fence)
	}
	between(t, what, "lease_expires_at_timestamp", g.exp, g.requestedAt+ttl-1, g.answeredAt+ttl+1)
	if g.exp > g.abs {
		t.Errorf("%s: the lease ends at %d, after its lifecycle (%d)", what, g.exp, g.abs)
	}
	return g
}

// checkOwnerToken checks the owner token format: own_ and 43 base64url
// characters encoding 32 random bytes.
func checkOwnerToken(t *testing.T, what, tok string) {
	t.Helper()
	matches(t, what, "owner_token", tok, reOwnerToken)
	if b, err := base64.RawURLEncoding.Strict().DecodeString(strings.TrimPrefix(tok, "own_")); err != nil || len(b) != 32 {
		t.Errorf("%s: owner_token %q is not 32 bytes of strict base64url (%v)", what, tok, err)
	}
}

// held is what a 409 held answered.
type held struct {
	fence, exp, abs, retry int64
}

// checkHeld checks a 409 held (spec: "Handle another worker"): no owner
// token, Retry-After equal to retry_after_seconds and consistent with the
// lease's expiry.
func checkHeld(t *testing.T, what string, a *answer) held {
	t.Helper()
	expectError(t, what, a, http.StatusConflict, "", []string{"status", "retry_after_seconds", "fencing_token",
		"lease_expires_at", "absolute_expires_at", "lease_expires_at_timestamp", "absolute_expires_at_timestamp"}, "Lease is held")
	fields(t, what, a.m, []string{"ok", "error", "status", "retry_after_seconds", "fencing_token", "lease_expires_at", "absolute_expires_at"},
		[]string{"lease_expires_at_timestamp", "absolute_expires_at_timestamp"})
	if s := str(t, what, a.m, "status"); s != "held" {
		t.Errorf("%s: status %q, want held", what, s)
	}
	if e := str(t, what, a.m, "error"); e != "Lease is held" {
		t.Errorf("%s: error %q, want the spec's %q", what, e, "Lease is held")
	}
	h := held{
		fence: integer(t, what, a.m, "fencing_token"),
		exp:   timePair(t, what, a.m, "lease_expires_at", "lease_expires_at_timestamp"),
		abs:   timePair(t, what, a.m, "absolute_expires_at", "absolute_expires_at_timestamp"),
		retry: expectRetryAfter(t, what, a),
	}
	// retry_after_seconds is the time left, rounded up: between what was
	// left when the answer arrived and when the request left (+1 for the
	// rounding of the timestamps to whole seconds).
	between(t, what, "retry_after_seconds", h.retry, max(1, h.exp-a.after.Unix()-1), h.exp-a.before.Unix()+1)
	return h
}

// completed is what a completed answer (complete, or acquire of a
// completed key) held.
type completed struct {
	fence, at, abs int64
	result         []byte
}

func checkCompleted(t *testing.T, what string, a *answer) completed {
	t.Helper()
	expectStatus(t, what, a, http.StatusOK)
	fields(t, what, a.m, []string{"ok", "status", "completed_at", "result", "fencing_token", "absolute_expires_at"},
		[]string{"completed_at_timestamp", "absolute_expires_at_timestamp"})
	if !boolean(t, what, a.m, "ok") {
		t.Errorf("%s: ok is false", what)
	}
	if s := str(t, what, a.m, "status"); s != "completed" {
		t.Errorf("%s: status %q, want completed", what, s)
	}
	return completed{
		fence:  integer(t, what, a.m, "fencing_token"),
		at:     timePair(t, what, a.m, "completed_at", "completed_at_timestamp"),
		abs:    timePair(t, what, a.m, "absolute_expires_at", "absolute_expires_at_timestamp"),
		result: rawField(t, what, a, "result"),
	}
}

func checkConflict(t *testing.T, what string, a *answer) int64 {
	t.Helper()
	if !expectError(t, what, a, http.StatusConflict, "", []string{"status", "absolute_expires_at", "absolute_expires_at_timestamp"}) {
		return 0
	}
	fields(t, what, a.m, []string{"ok", "error", "status", "absolute_expires_at"}, []string{"absolute_expires_at_timestamp"})
	if s := str(t, what, a.m, "status"); s != "conflict" {
		t.Errorf("%s: status %q, want conflict", what, s)
	}
	return timePair(t, what, a.m, "absolute_expires_at", "absolute_expires_at_timestamp")
}

func checkLost(t *testing.T, what string, a *answer) {
	t.Helper()
	if !expectError(t, what, a, http.StatusConflict, "", []string{"status"}) {
		return
	}
	fields(t, what, a.m, []string{"ok", "error", "status"}, nil)
	if s := str(t, what, a.m, "status"); s != "lost" {
		t.Errorf("%s: status %q, want lost", what, s)
	}
}

// checkRenewed checks a 200 renew (README: renew row): same fence, a new
// expiry ttl from now, the lifecycle unchanged, no owner token.
func checkRenewed(t *testing.T, what string, a *answer, ttl int64, g grant) int64 {
	t.Helper()
	expectStatus(t, what, a, http.StatusOK)
	fields(t, what, a.m, []string{"ok", "status", "ttl_seconds", "fencing_token",
		"lease_expires_at_timestamp", "lease_expires_at", "absolute_expires_at_timestamp", "absolute_expires_at"}, nil)
	if !boolean(t, what, a.m, "ok") || str(t, what, a.m, "status") != "held" {
		t.Errorf("%s: want ok:true, status held: %s", what, a)
	}
	if got := integer(t, what, a.m, "ttl_seconds"); got != ttl {
		t.Errorf("%s: ttl_seconds %d, want %d", what, got, ttl)
	}
	if f := integer(t, what, a.m, "fencing_token"); f != g.fence {
		t.Errorf("%s: renew changed the fencing token from %d to %d", what, g.fence, f)
	}
	exp := timePair(t, what, a.m, "lease_expires_at", "lease_expires_at_timestamp")
	between(t, what, "lease_expires_at_timestamp", exp, a.before.Unix()+ttl-1, a.after.Unix()+ttl+1)
	if abs := timePair(t, what, a.m, "absolute_expires_at", "absolute_expires_at_timestamp"); abs != g.abs {
		t.Errorf("%s: renew moved absolute_expires_at from %d to %d", what, g.abs, abs)
	}
	return exp
}

func checkReleased(t *testing.T, what string, a *answer, fence int64) {
	t.Helper()
	expectStatus(t, what, a, http.StatusOK)
	fields(t, what, a.m, []string{"ok", "status", "fencing_token"}, nil)
	if !boolean(t, what, a.m, "ok") || str(t, what, a.m, "status") != "released" {
		t.Errorf("%s: want ok:true, status released: %s", what, a)
	}
	if f := integer(t, what, a.m, "fencing_token"); f != fence {
		t.Errorf("%s: fencing_token %d, want %d", what, f, fence)
	}
}

func post(path string, body any) call { return call{method: http.MethodPost, path: path, body: body} }

// mint mints a namespace through n with the given request and checks the
// answer (spec: "Mint a private namespace").
func (e *apiEnv) mint(t *testing.T, n *harness.Node, c call) string {
	t.Helper()
	what := fmt.Sprintf("mint namespace (%s)", c.describe())
	a := e.do(t, n, c)
	expectStatus(t, what, a, http.StatusOK)
	fields(t, what, a.m, []string{"ok", "namespace", "entropy_bits"}, nil)
	if !boolean(t, what, a.m, "ok") {
		t.Errorf("%s: ok is false", what)
	}
	if bits := integer(t, what, a.m, "entropy_bits"); bits != 256 {
		t.Errorf("%s: entropy_bits %d, want 256", what, bits)
	}
	ns := str(t, what, a.m, "namespace")
	matches(t, what, "namespace", ns, reNamespace)
	if b, err := base64.RawURLEncoding.Strict().DecodeString(strings.TrimPrefix(ns, "ns_")); err != nil || len(b) != 32 {
		t.Errorf("%s: namespace %q is not 32 bytes of strict base64url (%v)", what, ns, err)
	}
	return ns
}

func (c call) describe() string {
	switch {
	case c.raw != nil:
		return fmt.Sprintf("body %q, content type %q", c.raw, c.ct)
	case c.body != nil:
		return fmt.Sprintf("body %v", c.body)
	}
	return fmt.Sprintf("no body, content type %q", c.ct)
}

func (e *apiEnv) newNamespace(t *testing.T, n *harness.Node) string {
	t.Helper()
	return e.mint(t, n, post("/lease/namespace", map[string]any{}))
}

// leaseNamespaceMint: POST /lease/namespace with {}, with an empty body
// (with and without a content type); every namespace is new.
func leaseNamespaceMint(t *testing.T, e *apiEnv, n *harness.Node) {
	seen := map[string]bool{}
	for _, c := range []call{
		post("/lease/namespace", map[string]any{}),
		{method: http.MethodPost, path: "/lease/namespace", raw: []byte(`{}`)},
		{method: http.MethodPost, path: "/lease/namespace", raw: []byte{}, ct: "application/json"},
		{method: http.MethodPost, path: "/lease/namespace", ct: "-"},
		{method: http.MethodPost, path: "/lease/namespace", raw: []byte(" \n"), ct: "application/json; charset=utf-8"},
	} {
		ns := e.mint(t, n, c)
		if seen[ns] {
			t.Errorf("namespace %q minted twice", ns)
		}
		seen[ns] = true
	}
	for _, tc := range []struct {
		name   string
		c      call
		status int
		want   string
	}{
		{"null body", call{method: http.MethodPost, path: "/lease/namespace", raw: []byte(`null`)}, 400, "JSON object"},
		{"unknown field", call{method: http.MethodPost, path: "/lease/namespace", raw: []byte(`{"bits":128}`)}, 400, "bits"},
		{"text/plain", call{method: http.MethodPost, path: "/lease/namespace", raw: []byte(`{}`), ct: "text/plain"}, 415, "Content-Type"},
		{"malformed", call{method: http.MethodPost, path: "/lease/namespace", raw: []byte(`{`)}, 400, "malformed JSON"},
		{"GET", call{method: http.MethodGet, path: "/lease/namespace"}, 405, "method"},
	} {
		expectError(t, "mint namespace with "+tc.name, e.do(t, n, tc.c), tc.status, "", nil, tc.want)
	}
}

// leaseSpecFlow is the spec's lease walk-through: acquire 201, a second
// worker 409 held, renew, complete, reuse of the completed result, a
// conflicting fingerprint, and a lost owner.
func leaseSpecFlow(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	const key, fp = "invoice:2026-09-05", "charge-order-501"
	id := map[string]any{"namespace": ns, "key": key}
	with := func(extra map[string]any) map[string]any {
		m := map[string]any{}
		for k, v := range id {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}

	g := checkGranted(t, "acquire", e.do(t, n, post("/lease", with(map[string]any{"ttl_seconds": 60, "fingerprint": fp}))), 60)
	between(t, "acquire", "absolute_expires_at_timestamp", g.abs, g.requestedAt+lifecycle-1, g.answeredAt+lifecycle+1)

	// A second worker, through the explicit alias and with the default TTL.
	h := checkHeld(t, "second worker via /lease/acquire", e.do(t, n, post("/lease/acquire", with(map[string]any{"fingerprint": fp}))))
	if h.fence != g.fence || h.exp != g.exp || h.abs != g.abs {
		t.Errorf("second worker: held answer fence %d, expiry %d, lifecycle %d; the lease has %d, %d, %d", h.fence, h.exp, h.abs, g.fence, g.exp, g.abs)
	}
	// The holder asking again is answered like anyone else.
	h = checkHeld(t, "holder acquires again", e.do(t, n, post("/lease", with(map[string]any{"fingerprint": fp, "ttl_seconds": 60}))))
	if h.fence != g.fence {
		t.Errorf("holder acquires again: fence %d, want %d", h.fence, g.fence)
	}

	// Another fingerprint, or none, conflicts until the lifecycle ends.
	for _, body := range []map[string]any{with(map[string]any{"fingerprint": "charge-order-502"}), with(nil)} {
		if abs := checkConflict(t, fmt.Sprintf("acquire with %v", body["fingerprint"]), e.do(t, n, post("/lease", body))); abs != g.abs {
			t.Errorf("conflict: absolute_expires_at %d, want the lifecycle's %d", abs, g.abs)
		}
	}

	// Renew: same fence, expiry moved to now+120, lifecycle unchanged.
	exp := checkRenewed(t, "renew", e.do(t, n, post("/lease/renew", with(map[string]any{"owner_token": g.owner, "ttl_seconds": 120}))), 120, g)
	if exp <= g.exp {
		t.Errorf("renew with ttl 120 did not move the expiry: %d, was %d", exp, g.exp)
	}
	h = checkHeld(t, "second worker after renew", e.do(t, n, post("/lease", with(map[string]any{"fingerprint": fp}))))
	if h.exp != exp {
		t.Errorf("after renew the held answer says the lease ends at %d, renew said %d", h.exp, exp)
	}
	// Renew without ttl_seconds takes the default 60.
	checkRenewed(t, "renew with default ttl", e.do(t, n, post("/lease/renew", with(map[string]any{"owner_token": g.owner}))), 60, g)

	// Complete stores the result and removes the owner.
	ca := e.do(t, n, post("/lease/complete", with(map[string]any{"owner_token": g.owner, "result": map[string]any{"receipt_id": 4817}})))
	done := checkCompleted(t, "complete", ca)
	if done.fence != g.fence || done.abs != g.abs {
		t.Errorf("complete: fence %d lifecycle %d, want %d %d", done.fence, done.abs, g.fence, g.abs)
	}
	if !sameJSON(done.result, []byte(`{"receipt_id":4817}`)) {
		t.Errorf("complete: result %s, want {\"receipt_id\":4817}", done.result)
	}
	between(t, "complete", "completed_at_timestamp", done.at, ca.before.Unix()-1, ca.after.Unix()+1)

	// The owner token is now lost for every mutation.
	checkLost(t, "complete again", e.do(t, n, post("/lease/complete", with(map[string]any{"owner_token": g.owner, "result": 1}))))
	checkLost(t, "renew after complete", e.do(t, n, post("/lease/renew", with(map[string]any{"owner_token": g.owner}))))
	checkLost(t, "release after complete", e.do(t, n, post("/lease/release", with(map[string]any{"owner_token": g.owner}))))

	// Reuse: 200, the stored result, the same fence, no owner token.
	for _, path := range []string{"/lease", "/lease/acquire"} {
		what := "reuse completed result via " + path
		r := checkCompleted(t, what, e.do(t, n, post(path, with(map[string]any{"fingerprint": fp, "ttl_seconds": 30}))))
		if r.fence != g.fence || r.at != done.at || r.abs != g.abs || !sameJSON(r.result, done.result) {
			t.Errorf("%s: fence %d completed %d lifecycle %d result %s; complete said %d %d %d %s", what, r.fence, r.at, r.abs, r.result, done.fence, done.at, done.abs, done.result)
		}
	}
	// Another fingerprint still conflicts after completion.
	if abs := checkConflict(t, "other fingerprint after completion", e.do(t, n, post("/lease", with(map[string]any{"fingerprint": "charge-order-503"})))); abs != g.abs {
		t.Errorf("conflict after completion: absolute_expires_at %d, want %d", abs, g.abs)
	}

	// A well-formed owner token that was never issued is lost too.
	stranger := "own_" + randB64(t, 32)
	for _, op := range []string{"renew", "release", "complete"} {
		body := with(map[string]any{"owner_token": stranger})
		if op == "complete" {
			body["result"] = map[string]any{}
		}
		checkLost(t, op+" with a token never issued", e.do(t, n, post("/lease/"+op, body)))
	}
}

// leaseReleaseFlow: release frees the key at once; the next acquire gets a
// higher fence in the same lifecycle; the old owner is lost.
func leaseReleaseFlow(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	key := "batch:" + randHex(t, 8)
	fp := "release-flow-" + randHex(t, 8)
	body := map[string]any{"namespace": ns, "key": key, "fingerprint": fp, "ttl_seconds": 300}
	g := checkGranted(t, "acquire", e.do(t, n, post("/lease", body)), 300)
	owner := map[string]any{"namespace": ns, "key": key, "owner_token": g.owner}
	checkReleased(t, "release", e.do(t, n, post("/lease/release", owner)), g.fence)
	for _, op := range []string{"release", "renew"} {
		checkLost(t, op+" after release", e.do(t, n, post("/lease/"+op, owner)))
	}
	checkLost(t, "complete after release", e.do(t, n, post("/lease/complete", map[string]any{"namespace": ns, "key": key, "owner_token": g.owner, "result": "late"})))

	g2 := checkGranted(t, "acquire after release", e.do(t, n, post("/lease/acquire", body)), 300)
	if g2.fence <= g.fence {
		t.Errorf("acquire after release: fencing_token %d, want more than %d", g2.fence, g.fence)
	}
	if g2.abs != g.abs {
		t.Errorf("acquire after release started a new lifecycle: absolute_expires_at %d, was %d", g2.abs, g.abs)
	}
	if g2.owner == g.owner {
		t.Errorf("acquire after release returned the old owner token")
	}
	// The first owner cannot touch the new lease; the new one can.
	checkLost(t, "old owner renews the new lease", e.do(t, n, post("/lease/renew", owner)))
	checkLost(t, "old owner releases the new lease", e.do(t, n, post("/lease/release", owner)))
	checkRenewed(t, "new owner renews", e.do(t, n, post("/lease/renew", map[string]any{"namespace": ns, "key": key, "owner_token": g2.owner, "ttl_seconds": 1})), 1, g2)
	checkReleased(t, "new owner releases", e.do(t, n, post("/lease/release", map[string]any{"namespace": ns, "key": key, "owner_token": g2.owner})), g2.fence)
}

// leaseExpiryFlow: a 1-second lease expires; the expired owner is lost for
// renew, release and complete; the key is acquirable with a higher fence.
func leaseExpiryFlow(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	idA := map[string]any{"namespace": ns, "key": "expiring:a"}
	idB := map[string]any{"namespace": ns, "key": "expiring:b"}
	acquire := func(id map[string]any, what string) grant {
		b := map[string]any{"ttl_seconds": 1}
		for k, v := range id {
			b[k] = v
		}
		return checkGranted(t, what, e.do(t, n, post("/lease", b)), 1)
	}
	a := acquire(idA, "acquire a with ttl 1")
	b := acquire(idB, "acquire b with ttl 1")

	// Poll b with other acquirers until it is granted again: b expired,
	// and a, granted earlier with the same TTL, expired before it.
	var b2 grant
	harness.Eventually(t, 15*time.Second, "the 1-second lease b to expire", func() error {
		r := e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": "expiring:b", "ttl_seconds": 60}))
		switch r.Status {
		case http.StatusConflict:
			h := checkHeld(t, "b while held", r)
			if h.retry != 1 || h.fence != b.fence {
				t.Errorf("b while held: retry_after_seconds %d fence %d, want 1 and %d", h.retry, h.fence, b.fence)
			}
			return fmt.Errorf("still held: %s", r)
		case http.StatusCreated:
			b2 = checkGranted(t, "b after expiry", r, 60)
			return nil
		}
		return fmt.Errorf("%w: unexpected %s", harness.ErrPermanent, r)
	})
	if b2.fence <= b.fence || b2.abs != b.abs {
		t.Errorf("b after expiry: fence %d lifecycle %d, want more than %d and the same %d", b2.fence, b2.abs, b.fence, b.abs)
	}
	// Nobody acquired a again: its owner lost it by expiry alone.
	own := func(extra map[string]any) map[string]any {
		m := map[string]any{"owner_token": a.owner}
		for k, v := range idA {
			m[k] = v
		}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	checkLost(t, "renew of an expired lease", e.do(t, n, post("/lease/renew", own(nil))))
	checkLost(t, "complete of an expired lease", e.do(t, n, post("/lease/complete", own(map[string]any{"result": map[string]any{"done": true}}))))
	checkLost(t, "release of an expired lease", e.do(t, n, post("/lease/release", own(nil))))
	a2 := acquire(idA, "acquire a after expiry")
	if a2.fence <= b2.fence || a2.abs != a.abs {
		t.Errorf("a after expiry: fence %d lifecycle %d, want more than %d (every fence before) and %d", a2.fence, a2.abs, b2.fence, a.abs)
	}
	checkLost(t, "expired owner renews the new lease", e.do(t, n, post("/lease/renew", own(nil))))
}

// leaseRedaction: secret-like result fields are redacted at any depth
// before storage; the 32768-byte limit applies after redaction.
func leaseRedaction(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	acquire := func(key string) grant {
		return checkGranted(t, "acquire "+key, e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "fingerprint": "fp-" + key})), 60)
	}
	complete := func(key, owner string, result []byte) *answer {
		body := fmt.Sprintf(`{"namespace":%q,"key":%q,"owner_token":%q,"result":%s}`, ns, key, owner, result)
		return e.do(t, n, call{method: http.MethodPost, path: "/lease/complete", raw: []byte(body)})
	}
	reuse := func(key string) completed {
		return checkCompleted(t, "reuse "+key, e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "fingerprint": "fp-" + key})))
	}

	// The brief's example, and long secret values the disk search looks for.
	secretValue := "sk_live_" + randHex(t, 16)
	bearerValue := "Bearer " + randHex(t, 20)
	e.secrets.add("redacted result value", secretValue)
	e.secrets.add("redacted result value", bearerValue)
	cases := []struct{ in, want string }{
		{`{"a":{"api_key":"x","password":1},"ok":[{"token":"t"}]}`,
			`{"a":{"api_key":"[redacted]","password":"[redacted]"},"ok":[{"token":"[redacted]"}]}`},
		{`{"deep":[[{"Client-Secret":"` + secretValue + `","note":"kept"}]],"headers":{"Authorization":"` + bearerValue + `"},"author":"ann","keys":3,"x.Api.Key":{"nested":true},"PRIVATE_KEY":null,"passwd":[1,2]}`,
			`{"PRIVATE_KEY":"[redacted]","author":"ann","deep":[[{"Client-Secret":"[redacted]","note":"kept"}]],"headers":{"Authorization":"[redacted]"},"keys":3,"passwd":"[redacted]","x.Api.Key":"[redacted]"}`},
	}
	for i, tc := range cases {
		key := fmt.Sprintf("redact:%d:%s", i, randHex(t, 4))
		g := acquire(key)
		done := checkCompleted(t, "complete "+key, complete(key, g.owner, []byte(tc.in)))
		if !sameJSON(done.result, []byte(tc.want)) {
			t.Errorf("complete %s: result %s, want %s", key, done.result, tc.want)
		}
		if r := reuse(key); !sameJSON(r.result, []byte(tc.want)) || r.fence != g.fence {
			t.Errorf("reuse %s: result %s fence %d, want %s and %d", key, r.result, r.fence, tc.want, g.fence)
		}
	}

	// Over 32768 bytes after redaction: 413 naming result, and the lease is
	// still held by its owner (nothing changed).
	key := "redact:big:" + randHex(t, 4)
	g := acquire(key)
	big := []byte(`{"data":"` + strings.Repeat("r", 32768-len(`{"data":""}`)+1) + `"}`)
	expectError(t, "complete with a 32769-byte result", complete(key, g.owner, big), http.StatusRequestEntityTooLarge, "result", nil, "32768")
	checkHeld(t, "acquire after the refused complete", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "fingerprint": "fp-" + key})))
	// Exactly 32768 bytes is accepted.
	exact := []byte(`{"data":"` + strings.Repeat("r", 32768-len(`{"data":""}`)) + `"}`)
	if done := checkCompleted(t, "complete with a 32768-byte result", complete(key, g.owner, exact)); !sameJSON(done.result, exact) {
		t.Errorf("the 32768-byte result came back as %d bytes", len(done.result))
	}
	// Large before redaction, small after: accepted.
	key = "redact:shrinks:" + randHex(t, 4)
	g = acquire(key)
	shrinks := []byte(`{"password":"` + strings.Repeat("p", 40000) + `"}`)
	if done := checkCompleted(t, "complete with a 40 KB password", complete(key, g.owner, shrinks)); !sameJSON(done.result, []byte(`{"password":"[redacted]"}`)) {
		t.Errorf("complete with a 40 KB password: result %s", done.result)
	}
}

// leaseKeyWithoutNamespace: a random 43-character base64url key passes the
// entropy rule; weak keys are refused naming the field "key".
func leaseKeyWithoutNamespace(t *testing.T, e *apiEnv, n *harness.Node) {
	key := randB64(t, 32)
	g := checkGranted(t, "acquire a random key without namespace", e.do(t, n, post("/lease", map[string]any{"key": key, "fingerprint": "no-namespace-" + randHex(t, 4)})), 60)
	checkReleased(t, "release it", e.do(t, n, post("/lease/release", map[string]any{"key": key, "owner_token": g.owner})), g.fence)
	// The same key in a namespace is another lease.
	ns := e.newNamespace(t, n)
	checkGranted(t, "the same key inside a namespace", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key})), 60)

	hexKey := randHex(t, 16) // 32 hex characters never pass
	for _, tc := range []struct {
		name, key string
	}{
		{"short", "short"},
		{"40 × a", strings.Repeat("a", 40)},
		{"64 characters with spaces", "Zq8 " + randB64(t, 45)[:55] + " x7 k"},
		{"32 random hex characters", hexKey},
		// README: "32-character hex keys never do (use a namespace)".
		{"32 hex characters, each digit twice", uniformHexKey(t)},
		{"201 characters", randB64(t, 160)[:201]},
		{"a repeated 12-character run", "Ab3$Kz9!Qw7@" + "xY" + randB64(t, 12)[:16] + "Ab3$Kz9!Qw7@"},
		{"empty", ""},
	} {
		if tc.name == "64 characters with spaces" && len(tc.key) != 64 {
			t.Fatalf("test bug: key of %d characters", len(tc.key))
		}
		expectError(t, "acquire without namespace, key "+tc.name, e.do(t, n, post("/lease", map[string]any{"key": tc.key})), http.StatusBadRequest, "key", nil, "key")
	}

	// The README's rule of thumb, on samples: random base64url keys of 34
	// characters and random hex keys of 48 always pass, random 32-character
	// hex keys never do. ttl_seconds 0 makes every request fail validation
	// after the key check, so the samples change nothing: a key that
	// passes is refused naming ttl_seconds, one that fails naming key.
	type sample struct {
		kind  string
		gen   func() string
		field string
	}
	for _, s := range []sample{
		{"random 34-character base64url", func() string { return randB64(t, 26)[:34] }, "ttl_seconds"},
		{"random 48-character hex", func() string { return randHex(t, 24) }, "ttl_seconds"},
		{"random 32-character hex", func() string { return randHex(t, 16) }, "key"},
	} {
		bad := 0
		for i := 0; i < 100; i++ {
			k := s.gen()
			a := e.do(t, n, post("/lease", map[string]any{"key": k, "ttl_seconds": 0}))
			if f, _ := a.m["field"].(string); a.Status != http.StatusBadRequest || f != s.field {
				bad++
				if bad <= 3 {
					t.Errorf("%s key %q: want 400 naming %s, got %s", s.kind, k, s.field, a)
				}
			}
		}
		if bad > 3 {
			t.Errorf("%s keys: %d of 100 samples broke the README's rule", s.kind, bad)
		}
	}
}

// leaseConcurrentAcquire: of concurrent acquires of one free key exactly one
// is granted; the others are told it is held, with its fence.
func leaseConcurrentAcquire(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	body := map[string]any{"namespace": ns, "key": "contended", "fingerprint": "same-input", "ttl_seconds": 120}
	const workers = 12
	answers := make([]*answer, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range workers {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = e.trySend(t, nil, n, post("/lease", body))
		})
	}
	close(start)
	wg.Wait()
	var granted []grant
	var helds []*answer
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch a.Status {
		case http.StatusCreated:
			granted = append(granted, checkGranted(t, "concurrent acquire", a, 120))
		case http.StatusConflict:
			helds = append(helds, a)
		default:
			t.Errorf("concurrent acquire: %s", a)
		}
	}
	if len(granted) != 1 {
		t.Fatalf("%d of %d concurrent acquires were granted, want exactly 1", len(granted), workers)
	}
	for _, a := range helds {
		if h := checkHeld(t, "concurrent acquire refused", a); h.fence != granted[0].fence || h.exp != granted[0].exp {
			t.Errorf("held answer: fence %d expiry %d, the grant has %d %d", h.fence, h.exp, granted[0].fence, granted[0].exp)
		}
	}
}

// leaseBadRequests: every lease-side error row of the README's table that
// validation answers, each naming the field or the rule.
func leaseBadRequests(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	key := "bad-requests:" + randHex(t, 4)
	g := checkGranted(t, "acquire", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "ttl_seconds": 600})), 600)
	ok := fmt.Sprintf(`"namespace":%q,"key":%q`, ns, key)
	own := fmt.Sprintf(`%s,"owner_token":%q`, ok, g.owner)
	free := fmt.Sprintf(`"namespace":%q,"key":"untouched:%s"`, ns, randHex(t, 4))
	badNS := "ns_" + strings.Repeat("+", 43)
	type row struct {
		name   string
		path   string
		body   string
		ct     string
		status int
		field  string
		want   string
	}
	rows := []row{
		{"malformed JSON", "/lease", `{` + free + `,`, "", 400, "", "malformed JSON"},
		{"syntax error", "/lease", `{"key" "x"}`, "", 400, "", "malformed JSON"},
		{"unknown field", "/lease", `{` + free + `,"tll_seconds":5}`, "", 400, "", "tll_seconds"},
		{"null body", "/lease", `null`, "", 400, "", "JSON object"},
		{"array body", "/lease", `[{` + free + `}]`, "", 400, "", "JSON object"},
		{"two objects", "/lease", `{` + free + `}{}`, "", 400, "", "one JSON object"},
		{"empty body", "/lease", ``, "", 400, "", "JSON object"},
		{"text/plain", "/lease", `{` + free + `}`, "text/plain", 415, "Content-Type", "Content-Type"},
		{"no content type", "/lease", `{` + free + `}`, "-", 415, "Content-Type", "Content-Type"},
		{"form", "/lease", `key=x`, "application/x-www-form-urlencoded", 415, "", "Content-Type"},
		{"missing key", "/lease", fmt.Sprintf(`{"namespace":%q}`, ns), "", 400, "key", "key"},
		{"key of wrong type", "/lease", fmt.Sprintf(`{"namespace":%q,"key":5}`, ns), "", 400, "", "key"},
		{"bad namespace", "/lease", fmt.Sprintf(`{"namespace":"ns_abc","key":%q}`, key), "", 400, "namespace", "namespace"},
		{"namespace not base64url", "/lease", fmt.Sprintf(`{"namespace":%q,"key":%q}`, badNS, key), "", 400, "namespace", "namespace"},
		{"namespace without prefix", "/lease", fmt.Sprintf(`{"namespace":%q,"key":%q}`, strings.TrimPrefix(ns, "ns_")+"abc", key), "", 400, "namespace", "namespace"},
		{"namespaced key over 512 bytes", "/lease", fmt.Sprintf(`{"namespace":%q,"key":%q}`, ns, strings.Repeat("k", 513)), "", 400, "key", "512"},
		{"namespaced key with a control character", "/lease", fmt.Sprintf(`{"namespace":%q,"key":"a\u0007b"}`, ns), "", 400, "key", "control"},
		{"empty namespaced key", "/lease", fmt.Sprintf(`{"namespace":%q,"key":""}`, ns), "", 400, "key", "key"},
		{"fingerprint over 512 bytes", "/lease", `{` + free + `,"fingerprint":"` + strings.Repeat("f", 513) + `"}`, "", 400, "fingerprint", "512"},
		{"ttl 0", "/lease", `{` + free + `,"ttl_seconds":0}`, "", 400, "ttl_seconds", "ttl_seconds"},
		{"ttl 86401", "/lease", `{` + free + `,"ttl_seconds":86401}`, "", 400, "ttl_seconds", "86400"},
		{"ttl -1", "/lease", `{` + free + `,"ttl_seconds":-1}`, "", 400, "ttl_seconds", "ttl_seconds"},
		{`ttl "60"`, "/lease", `{` + free + `,"ttl_seconds":"60"}`, "", 400, "", "ttl_seconds"},
		{"ttl 60.5", "/lease", `{` + free + `,"ttl_seconds":60.5}`, "", 400, "", "ttl_seconds"},
		{"ttl 1e30", "/lease/acquire", `{` + free + `,"ttl_seconds":1e30}`, "", 400, "", "ttl_seconds"},
		{"renew ttl 0", "/lease/renew", `{` + own + `,"ttl_seconds":0}`, "", 400, "ttl_seconds", "ttl_seconds"},
		{"renew ttl 86401", "/lease/renew", `{` + own + `,"ttl_seconds":86401}`, "", 400, "ttl_seconds", "ttl_seconds"},
		{"renew without owner_token", "/lease/renew", `{` + ok + `}`, "", 400, "owner_token", "owner_token"},
		{"release without owner_token", "/lease/release", `{` + ok + `}`, "", 400, "owner_token", "owner_token"},
		{"complete without owner_token", "/lease/complete", `{` + ok + `,"result":1}`, "", 400, "owner_token", "owner_token"},
		{"renew without key", "/lease/renew", fmt.Sprintf(`{"namespace":%q,"owner_token":%q}`, ns, g.owner), "", 400, "key", "key"},
		{"complete without result", "/lease/complete", `{` + own + `}`, "", 400, "result", "result"},
		{"complete with duplicate result keys", "/lease/complete", `{` + own + `,"result":{"a":1,"a":2}}`, "", 400, "result", "result"},
		{"complete with ttl_seconds", "/lease/complete", `{` + own + `,"ttl_seconds":5,"result":1}`, "", 400, "ttl_seconds", "ttl_seconds"},
		{"renew with a result", "/lease/renew", `{` + own + `,"result":1}`, "", 400, "result", "result"},
		{"request body over 256 KiB", "/lease/complete", `{` + own + `,"result":"` + strings.Repeat("b", 256<<10) + `"}`, "", 413, "", "exceeds"},
		{"GET on an endpoint taking POST", "/lease", "", "", 405, "", "method"},
		{"unknown endpoint", "/lease/steal", `{}`, "", 404, "", "no such endpoint"},
		{"unknown service", "/locks", `{}`, "", 404, "", "no such endpoint"},
	}
	for _, r := range rows {
		c := call{method: http.MethodPost, path: r.path, raw: []byte(r.body), ct: r.ct}
		if r.status == 405 {
			c = call{method: http.MethodGet, path: r.path}
		}
		expectError(t, r.name, e.do(t, n, c), r.status, r.field, nil, r.want)
	}
	// A malformed owner token is an "invalid owner": the spec answers 409
	// lost, the implementation a 400 naming owner_token; either is
	// accepted, nothing else.
	for _, tc := range []struct{ name, op, token string }{
		{"own_abc", "renew", "own_abc"},
		{"the token without its prefix", "release", strings.TrimPrefix(g.owner, "own_")},
		{"the token with a character changed to '+'", "complete", g.owner[:10] + "+" + g.owner[11:]},
		{"an empty token", "renew", ""},
	} {
		body := map[string]any{"namespace": ns, "key": key, "owner_token": tc.token}
		if tc.op == "complete" {
			body["result"] = 1
		}
		what := tc.op + " with " + tc.name
		a := e.do(t, n, post("/lease/"+tc.op, body))
		if a.Status == http.StatusConflict {
			checkLost(t, what, a)
		} else {
			expectError(t, what, a, http.StatusBadRequest, "owner_token", nil, "owner_token")
		}
	}

	// Nothing changed: the owner still holds the lease with its fence and
	// expiry, and no refused acquire took the untouched key.
	h := checkHeld(t, "acquire after the refused requests", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key})))
	if h.fence != g.fence || h.exp != g.exp {
		t.Errorf("after refused requests: fence %d expiry %d, want %d %d", h.fence, h.exp, g.fence, g.exp)
	}
	var untouched map[string]any
	if err := jsonUnmarshalString(`{`+free+`}`, &untouched); err != nil {
		t.Fatal(err)
	}
	checkGranted(t, "the key no refused request took", e.do(t, n, post("/lease", untouched)), 60)
}

// uniformHexKey returns a random arrangement of the 16 hex digits, each
// twice, without a repeated 12-character run: 32 hex characters whose
// estimated entropy is exactly 128 bits.
func uniformHexKey(t *testing.T) string {
	t.Helper()
	for {
		b := []byte("0123456789abcdef0123456789abcdef")
		for i := len(b) - 1; i > 0; i-- {
			r := make([]byte, 1)
			if _, err := rand.Read(r); err != nil {
				t.Fatal(err)
			}
			j := int(r[0]) % (i + 1)
			b[i], b[j] = b[j], b[i]
		}
		k := string(b)
		repeated := false
		for i := 0; i+12 <= len(k) && !repeated; i++ {
			repeated = strings.Contains(k[i+1:], k[i:i+12])
		}
		if !repeated {
			return k
		}
	}
}
