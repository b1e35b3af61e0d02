//go:build unix

package test

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/test/harness"
)

// TestAPIExpiryLimitsAndOutage runs, on a cluster of its own whose
// replicated settings it lowers, what needs time to pass or a per-client
// count: claims that expire and return their job until it fails after five
// attempts, the queue-creation quota per client address across leader and
// follower, the per-node request rate, the bounds max_leases and
// max_queues, the lease lifecycle and queue
// deadline (scaled down), and then the 503 answers of a node without
// quorum, after which nothing refused may turn out to have been granted.
func TestAPIExpiryLimitsAndOutage(t *testing.T) {
	t.Parallel()
	e := formAPICluster(t, harness.Options{Args: []string{"--rate-limit", "20", "--rate-burst", "40"}})
	clientX := sourceClient(t, "127.0.0.2")
	clientY := sourceClient(t, "127.0.0.3")
	clientR := sourceClient(t, "127.0.0.4")
	clientS := sourceClient(t, "127.0.0.5")

	// Through a follower, with the cluster key (forwarded to the leader).
	e.putKey(t, e.follower, harness.Settings{"visibility_min_seconds": 1, "queues_per_client": 3})

	t.Run("claim-expiry-returns-the-job-until-it-fails", func(t *testing.T) {
		for _, tg := range e.targets() {
			t.Run("via-"+tg.name, func(t *testing.T) {
				t.Parallel()
				claimExpiry(t, e, tg.node)
			})
		}
	})
	t.Run("queue-quota-per-client-address", func(t *testing.T) { queueQuota(t, e, clientX, clientY) })
	t.Run("request-rate-per-client-address", func(t *testing.T) { requestRate(t, e, clientR) })
	t.Run("max-leases-and-max-queues", func(t *testing.T) { stateLimits(t, e, clientS) })
	t.Run("lease-lifecycle-and-queue-deadline", func(t *testing.T) { deadlines(t, e, clientY) })
	t.Run("no-quorum-503", func(t *testing.T) { noQuorum(t, e, clientX) })
}

func sourceClient(t *testing.T, ip string) *http.Client {
	t.Helper()
	c, err := harness.NewSourceClient(ip, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// claimExpiry: a claim whose window ends returns the job (with the old
// receipt "expired"); after the fifth expired attempt the job is failed.
func claimExpiry(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	w := jobWant{key: "expiring:1", payload: `{"slow":true}`, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, w.key, w.payload), q, false, w)
	expectError(t, "claim with visibility 0", e.claim(t, n, q, `{"visibility_timeout":0}`), http.StatusBadRequest, "visibility_timeout", nil, "visibility_timeout")
	var prev string
	for attempt := int64(1); attempt <= 5; attempt++ {
		_, r, _ := checkJobAnswer(t, fmt.Sprintf("claim %d with visibility 1", attempt), e.claim(t, n, q, `{"visibility_timeout":1}`), q,
			jobWant{id: w.id, key: w.key, payload: w.payload, status: "claimed", attempts: attempt, receipt: true, visibility: 1})
		if prev != "" {
			checkRejected(t, "ack with the previous claim's receipt", e.jobAction(t, n, q, w.id, "ack", receiptBody(prev)), "superseded")
		}
		want := "pending"
		if attempt == 5 {
			want = "failed"
		}
		// Poll the job (a read changes nothing) until the window has ended.
		harness.Eventually(t, 15*time.Second, fmt.Sprintf("claim %d to expire", attempt), func() error {
			a := e.readJob(t, n, q, w.id)
			if a.Status != http.StatusOK {
				return fmt.Errorf("%w: %s", harness.ErrPermanent, a)
			}
			if s := object(t, "read job", a.m, "job")["status"]; s != want {
				return fmt.Errorf("status %v", s)
			}
			checkJob(t, "job after its claim expired", a, q, jobWant{id: w.id, key: w.key, payload: w.payload, status: want, attempts: attempt})
			return nil
		})
		// Counts agree, whether or not a sweep has recorded the expiry.
		wantCounts := counts{pending: 1, total: 1}
		if attempt == 5 {
			wantCounts = counts{failed: 1, total: 1}
		}
		e.expectCounts(t, n, q, fmt.Sprintf("after claim %d expired", attempt), wantCounts, r)
		for _, action := range []string{"ack", "renew", "release"} {
			checkRejected(t, action+" with the expired receipt", e.jobAction(t, n, q, w.id, action, receiptBody(r)), "expired")
		}
		prev = r
	}
	checkEmptyClaim(t, "claim after the fifth attempt", e.claim(t, n, q, `{"visibility_timeout":1}`))
	e.expectCounts(t, n, q, "after five expired attempts", counts{failed: 1, total: 1}, prev)
}

// queueQuota: with queues_per_client 3, a client address that created 3
// queues, some through a follower, is refused a 4th through the leader and
// through a follower (429 + Retry-After); forged forwarding headers do not
// help it; another address still creates queues.
func queueQuota(t *testing.T, e *apiEnv, clientX, clientY *http.Client) {
	create := func(client *http.Client, n *harness.Node, c call) *answer {
		if c.method == "" {
			c = post("/queue", map[string]any{})
		}
		return e.send(t, client, n, c)
	}
	for i, n := range []*harness.Node{e.follower, e.leader, e.follower} {
		checkCreated(t, fmt.Sprintf("create %d from 127.0.0.2 via %s", i+1, n.ID), create(clientX, n, call{}))
	}
	check429 := func(what string, a *answer) {
		t.Helper()
		if !expectError(t, what, a, http.StatusTooManyRequests, "", []string{"retry_after_seconds"}, "limit") {
			return
		}
		fields(t, what, a.m, []string{"ok", "error", "retry_after_seconds"}, nil)
		ra := expectRetryAfter(t, what, a)
		// The window is 24 h from the first creation, a few seconds ago.
		between(t, what, "Retry-After", ra, lifecycle-120, lifecycle)
		if msg, _ := a.m["error"].(string); !strings.Contains(msg, fmt.Sprintf("retry in %d seconds", ra)) {
			t.Errorf("%s: the message %q does not say the seconds to wait (%d)", what, msg, ra)
		}
	}
	check429("4th create via the leader", create(clientX, e.leader, call{}))
	check429("4th create via a follower", create(clientX, e.follower, call{}))
	other := harness.Except(e.c.Nodes(), e.leader, e.follower)[0]
	check429("4th create via the other follower", create(clientX, other, call{}))

	// Headers a client sets itself are not trusted: only a peer with the
	// cluster key may name the client address.
	forged := post("/queue", map[string]any{})
	forged.header = http.Header{
		"X-Holdfast-Forwarded-By": {e.follower.ID},
		"X-Holdfast-Client-Ip":    {"10.9.8.7"},
		"X-Forwarded-For":         {"10.9.8.6"},
		"X-Real-Ip":               {"10.9.8.5"},
	}
	check429("4th create with forged forwarding headers", create(clientX, e.leader, forged))
	forged.header.Del("X-Holdfast-Forwarded-By")
	check429("4th create with X-Forwarded-For", create(clientX, e.follower, forged))

	// Another address is counted apart, through any node.
	checkCreated(t, "create from 127.0.0.3 via a follower", create(clientY, e.follower, call{}))
}

// requestRate: each node limits API requests per client address (here 20/s,
// burst 40): a burst gets 429 with Retry-After, on a follower and on the
// leader, while another address is still served.
func requestRate(t *testing.T, e *apiEnv, clientR *http.Client) {
	for _, tg := range e.targets() {
		limited := 0
		for i := 0; i < 80 && limited < 3; i++ {
			a := e.send(t, clientR, tg.node, post("/lease/namespace", map[string]any{}))
			switch a.Status {
			case http.StatusOK:
			case http.StatusTooManyRequests:
				limited++
				what := "request over the rate via " + tg.name
				if expectError(t, what, a, http.StatusTooManyRequests, "", []string{"retry_after_seconds"}, "rate") {
					fields(t, what, a.m, []string{"ok", "error", "retry_after_seconds"}, nil)
					between(t, what, "Retry-After", expectRetryAfter(t, what, a), 1, 2)
				}
			default:
				t.Fatalf("namespace request %d via %s: %s", i, tg.name, a)
			}
		}
		if limited == 0 {
			t.Errorf("80 requests at once from 127.0.0.4 via the %s: none was limited (rate 20/s, burst 40)", tg.name)
		}
		e.mint(t, tg.node, post("/lease/namespace", map[string]any{}))
	}
}

// deadlines, with lease_lifecycle_seconds and queue_lifetime_seconds
// lowered to 3: a lease's TTL is cut at its lifecycle's end, after which a
// new lifecycle starts with a higher fence; a claim window is capped at the
// queue's deadline, after which the queue is gone (404) for everyone.
func deadlines(t *testing.T, e *apiEnv, clientY *http.Client) {
	n := e.leader
	e.putKey(t, n, harness.Settings{"lease_lifecycle_seconds": 3, "queue_lifetime_seconds": 3})
	defer e.putKey(t, n, harness.Settings{"lease_lifecycle_seconds": lifecycle, "queue_lifetime_seconds": lifecycle})

	ns := e.newNamespace(t, n)
	id := map[string]any{"namespace": ns, "key": "short-lived", "fingerprint": "fp-short-lived"}
	a := e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": "short-lived", "fingerprint": "fp-short-lived", "ttl_seconds": 60}))
	expectStatus(t, "acquire near the lifecycle end", a, http.StatusCreated)
	ttl := integer(t, "acquire", a.m, "ttl_seconds")
	g := checkGranted(t, "acquire near the lifecycle end", a, ttl)
	if ttl < 1 || ttl > 3 || g.exp != g.abs {
		t.Errorf("acquire with ttl 60 in a 3-second lifecycle: ttl_seconds %d, lease ends %d, lifecycle %d; want at most 3 and the lease ending with the lifecycle", ttl, g.exp, g.abs)
	}
	between(t, "acquire", "absolute_expires_at_timestamp", g.abs, g.requestedAt+3-1, g.answeredAt+3+1)
	complete := map[string]any{"namespace": ns, "key": "short-lived", "owner_token": g.owner, "result": map[string]any{"n": 1}}
	done := checkCompleted(t, "complete", e.do(t, n, post("/lease/complete", complete)))
	var next grant
	harness.Eventually(t, 15*time.Second, "the lifecycle to end", func() error {
		a := e.do(t, n, post("/lease", id))
		switch a.Status {
		case http.StatusOK:
			if r := checkCompleted(t, "reuse within the lifecycle", a); r.fence != done.fence {
				t.Errorf("reuse: fence %d, want %d", r.fence, done.fence)
			}
			return fmt.Errorf("still completed")
		case http.StatusCreated:
			next = checkGranted(t, "acquire after the lifecycle", a, 3)
			return nil
		}
		return fmt.Errorf("%w: %s", harness.ErrPermanent, a)
	})
	if next.fence <= g.fence || next.abs <= g.abs {
		t.Errorf("new lifecycle: fence %d, absolute expiry %d; want more than %d and %d", next.fence, next.abs, g.fence, g.abs)
	}
	checkLost(t, "the first lifecycle's owner", e.do(t, n, post("/lease/renew", map[string]any{"namespace": ns, "key": "short-lived", "owner_token": g.owner})))

	q := checkCreatedFor(t, 3, "create a 3-second queue", e.send(t, clientY, e.follower, post("/queue", map[string]any{})))
	w := jobWant{key: "late", payload: `1`, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, w.key, w.payload), q, false, w)
	_, _, ce := checkJobAnswer(t, "claim with visibility 30 in a 3-second queue", e.claim(t, n, q, `{"visibility_timeout":30}`), q,
		jobWant{id: w.id, key: w.key, payload: w.payload, status: "claimed", attempts: 1, receipt: true})
	if ce != q.expire {
		t.Errorf("claim window %d not capped at the queue's deadline %d", ce, q.expire)
	}
	harness.Eventually(t, 15*time.Second, "the queue to expire", func() error {
		a := e.do(t, e.follower, call{method: http.MethodGet, path: "/queue/" + q.id, token: q.read})
		switch a.Status {
		case http.StatusOK:
			return fmt.Errorf("still there")
		case http.StatusNotFound:
			return nil
		}
		return fmt.Errorf("%w: %s", harness.ErrPermanent, a)
	})
	for _, tg := range e.targets() {
		for name, c := range map[string]call{
			"read":    {method: http.MethodGet, path: "/queue/" + q.id, token: q.read},
			"job":     {method: http.MethodGet, path: "/queue/" + q.id + "/jobs/" + w.id, token: q.read},
			"enqueue": {method: http.MethodPost, path: "/queue/" + q.id + "/jobs", token: q.write, raw: []byte(`{"job_key":"late","payload":1}`)},
			"claim":   {method: http.MethodPost, path: "/queue/" + q.id + "/claim", token: q.worker, raw: []byte(`{}`)},
		} {
			expectError(t, name+" of an expired queue via "+tg.name, e.do(t, tg.node, c), http.StatusNotFound, "", nil, "queue")
		}
	}
}

// check503 checks an answer of a node without quorum: 503, Retry-After,
// an outcome that is "not_applied" or "unknown", never a success.
func check503(t *testing.T, what string, a *answer) string {
	t.Helper()
	if !expectError(t, what, a, http.StatusServiceUnavailable, "", []string{"outcome", "retry_after_seconds"}) {
		return ""
	}
	fields(t, what, a.m, []string{"ok", "error", "outcome", "retry_after_seconds"}, nil)
	expectRetryAfter(t, what, a)
	o := str(t, what, a.m, "outcome")
	if o != "not_applied" && o != "unknown" {
		t.Errorf("%s: outcome %q, want not_applied or unknown", what, o)
	}
	return o
}

// noQuorum kills two of three nodes and sends a lease acquire, a queue
// creation and queue calls to the survivor: 503 with Retry-After and an
// outcome. After quorum returns, nothing refused was granted: the key is
// free and the client's last queue slot is still there. First with a
// follower surviving, then with the leader surviving.
func noQuorum(t *testing.T, e *apiEnv, clientX *http.Client) {
	e.putKey(t, e.leader, harness.Settings{"queues_per_client": 5}) // 127.0.0.2 made 3: two slots left
	ns := e.newNamespace(t, e.leader)
	q := e.createQueue(t, e.leader)
	unknownCreate := false

	for round, survivorIsLeader := range []bool{false, true} {
		leader := e.c.WaitLeader()
		survivor := harness.Except(e.c.Nodes(), leader)[0]
		if survivorIsLeader {
			survivor = leader
		}
		key := fmt.Sprintf("outage:%d", round)
		acq := map[string]any{"namespace": ns, "key": key, "ttl_seconds": 60}
		before := checkGranted(t, "acquire before the outage", e.do(t, survivor, post("/lease", acq)), 60)
		checkReleased(t, "release before the outage", e.do(t, survivor, post("/lease/release", map[string]any{"namespace": ns, "key": key, "owner_token": before.owner})), before.fence)
		role := map[bool]string{false: "follower", true: "leader"}[survivorIsLeader]

		for _, n := range harness.Except(e.c.Nodes(), survivor) {
			e.c.Kill(n)
		}
		if !survivorIsLeader {
			e.c.Eventually(survivor.ID+" to know no leader", func() error {
				st, err := survivor.Status()
				if err != nil {
					return err
				}
				if st.LeaderID != "" || st.State == "leader" {
					return fmt.Errorf("state %s, leader %q", st.State, st.LeaderID)
				}
				return nil
			})
		}
		// At once: each waits for a leader for a while before its 503.
		reqs := []struct {
			what   string
			client *http.Client
			c      call
		}{
			{"acquire", nil, post("/lease", acq)},
			{"create queue", clientX, post("/queue", map[string]any{})},
			{"enqueue", nil, call{method: http.MethodPost, path: "/queue/" + q.id + "/jobs", token: q.write, raw: []byte(`{"job_key":"outage","payload":1}`)}},
			{"read queue", nil, call{method: http.MethodGet, path: "/queue/" + q.id, token: q.read}},
			{"renew", nil, post("/lease/renew", map[string]any{"namespace": ns, "key": key, "owner_token": before.owner})},
		}
		answers := make([]*answer, len(reqs))
		errs := make([]error, len(reqs))
		var wg sync.WaitGroup
		for i, r := range reqs {
			wg.Go(func() { answers[i], errs[i] = e.trySend(t, r.client, survivor, r.c) })
		}
		wg.Wait()
		outcomes := map[string]string{}
		for i, r := range reqs {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			outcomes[r.what] = check503(t, r.what+" on a "+role+" without quorum", answers[i])
		}
		acqOutcome, createOutcome := outcomes["acquire"], outcomes["create queue"]
		if !survivorIsLeader && (acqOutcome != "not_applied" || createOutcome != "not_applied") {
			t.Errorf("a follower that cannot reach any leader forwarded nothing: outcomes must be not_applied, got %q and %q", acqOutcome, createOutcome)
		}
		t.Logf("round %d (%s survives): outcomes %v", round, role, outcomes)

		for _, n := range harness.Except(e.c.Nodes(), survivor) {
			e.c.Start(n)
		}
		e.c.WaitLeader()
		e.c.WaitAllReady()

		// Nothing was granted: the key is free and gets a higher fence
		// (for an unknown outcome the refused acquire may have been
		// committed later: then it is held, still with no owner known).
		a := e.do(t, survivor, post("/lease", acq))
		t.Logf("round %d: acquire after quorum returned: HTTP %d", round, a.Status)
		switch {
		case a.Status == http.StatusCreated:
			if after := checkGranted(t, "acquire after quorum returned", a, 60); after.fence <= before.fence {
				t.Errorf("acquire after the outage: fence %d, want more than %d", after.fence, before.fence)
			}
		case a.Status == http.StatusConflict && acqOutcome == "unknown":
			if h := checkHeld(t, "acquire after an unknown outcome", a); h.fence <= before.fence {
				t.Errorf("held after the outage with fence %d, want more than %d", h.fence, before.fence)
			}
		default:
			t.Errorf("acquire after quorum returned (refused acquire's outcome %q): want 201, got %s", acqOutcome, a)
		}
		// The refused creation did not use the client's quota (unless its
		// outcome was unknown).
		a = e.send(t, clientX, survivor, post("/queue", map[string]any{}))
		if createOutcome == "unknown" {
			unknownCreate = true
		}
		if a.Status != http.StatusCreated && unknownCreate {
			t.Logf("create after an unknown outcome: %s", a)
			continue
		}
		checkCreated(t, "create after quorum returned", a)
	}
	// Two slots, two creations after the outages: the next is refused.
	a := e.send(t, clientX, e.leader, post("/queue", map[string]any{}))
	expectError(t, "create after the slots are used", a, http.StatusTooManyRequests, "", []string{"retry_after_seconds"})
}

// gauge reads one unlabelled gauge of n's /metrics.
func gauge(t *testing.T, n *harness.Node, name string) int64 {
	t.Helper()
	r, err := n.Get("/metrics")
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("GET /metrics on %s: %v %v", n.ID, r, err)
	}
	m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindSubmatch(r.Body)
	if m == nil {
		t.Fatalf("%s: no gauge %s", n.ID, name)
	}
	v, err := strconv.ParseInt(string(m[1]), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// stateLimits: with max_leases and max_queues one above what the cluster
// holds, one new key and one new queue are accepted, the next of each is
// refused with 507 naming the setting (through the leader and a follower),
// and the keys and queues that exist work as before.
func stateLimits(t *testing.T, e *apiEnv, client *http.Client) {
	leases, queues := gauge(t, e.leader, "holdfast_leases"), gauge(t, e.leader, "holdfast_queues")
	e.putKey(t, e.follower, harness.Settings{"max_leases": leases + 1, "max_queues": queues + 1})
	defer e.putKey(t, e.follower, harness.Settings{"max_leases": fsm.DefaultMaxLeases, "max_queues": fsm.DefaultMaxQueues})

	check507 := func(what string, a *answer, setting string, limit int64, extra ...string) {
		t.Helper()
		if !expectError(t, what, a, http.StatusInsufficientStorage, "", append([]string{"setting", "limit"}, extra...), setting, "GET /cluster/settings") {
			return
		}
		if a.m["setting"] != setting || integer(t, what, a.m, "limit") != limit {
			t.Errorf("%s: setting %v limit %v, want %s %d", what, a.m["setting"], a.m["limit"], setting, limit)
		}
		if a.Header.Get("Retry-After") != "" {
			t.Errorf("%s: Retry-After %q on a refusal that waiting does not end", what, a.Header.Get("Retry-After"))
		}
	}
	ns := e.newNamespace(t, e.follower)
	key := func(k string) map[string]any { return map[string]any{"namespace": ns, "key": k, "ttl_seconds": 60} }
	g := checkGranted(t, "acquire of a new key one below max_leases", e.do(t, e.follower, post("/lease", key("limit:first"))), 60)
	for _, n := range []*harness.Node{e.leader, e.follower} {
		a := e.do(t, n, post("/lease", key("limit:second")))
		check507("acquire of a new key at max_leases via "+n.ID, a, "max_leases", leases+1, "status")
		if a.m["status"] != "limit_reached" {
			t.Errorf("status %v, want limit_reached", a.m["status"])
		}
	}
	checkHeld(t, "acquire of a held key at max_leases", e.do(t, e.leader, post("/lease", key("limit:first"))))
	checkReleased(t, "release at max_leases", e.do(t, e.follower, post("/lease/release", map[string]any{"namespace": ns, "key": "limit:first", "owner_token": g.owner})), g.fence)
	checkGranted(t, "acquire of a released key at max_leases", e.do(t, e.leader, post("/lease", key("limit:first"))), 60)
	if got := gauge(t, e.leader, "holdfast_leases"); got != leases+1 {
		t.Errorf("lease records %d after the refusals, want %d", got, leases+1)
	}

	create := func(n *harness.Node) *answer { return e.send(t, client, n, post("/queue", map[string]any{})) }
	q := checkCreated(t, "create a queue one below max_queues", create(e.follower))
	check507("create a queue at max_queues via the leader", create(e.leader), "max_queues", queues+1)
	check507("create a queue at max_queues via a follower", create(e.follower), "max_queues", queues+1)
	w := jobWant{key: "limit:1", payload: `{"n":1}`, status: "pending"}
	checkEnqueued(t, "enqueue at max_queues", e.enqueue(t, e.leader, q, w.key, w.payload), q, false, w)
	if got := gauge(t, e.leader, "holdfast_queues"); got != queues+1 {
		t.Errorf("queues %d after the refusals, want %d", got, queues+1)
	}
}
