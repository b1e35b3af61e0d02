//go:build unix

package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// Queue scenarios of the end-to-end API suite; like the lease ones, each
// runs against one node and TestAPI runs it against a follower and the
// leader.

// queueInfo is a created queue with its three tokens.
type queueInfo struct {
	id, write, worker, read string
	created, expire         int64
}

type counts struct{ pending, claimed, completed, failed, total int64 }

func checkCounts(t *testing.T, what string, m map[string]any) counts {
	t.Helper()
	c := object(t, what, m, "counts")
	fields(t, what+" counts", c, []string{"pending", "claimed", "completed", "failed", "total"}, nil)
	got := counts{
		pending:   integer(t, what, c, "pending"),
		claimed:   integer(t, what, c, "claimed"),
		completed: integer(t, what, c, "completed"),
		failed:    integer(t, what, c, "failed"),
		total:     integer(t, what, c, "total"),
	}
	if got.pending+got.claimed+got.completed+got.failed != got.total {
		t.Errorf("%s: counts %+v do not add up to the total", what, got)
	}
	return got
}

// createQueue creates a queue through n and checks the answer (spec:
// "Create a queue"; README: create row).
func (e *apiEnv) createQueue(t *testing.T, n *harness.Node) queueInfo {
	t.Helper()
	a := e.do(t, n, post("/queue", map[string]any{}))
	return checkCreated(t, "create queue via "+n.ID, a)
}

func checkCreated(t *testing.T, what string, a *answer) queueInfo {
	t.Helper()
	return checkCreatedFor(t, lifecycle, what, a)
}

// checkCreatedFor checks a created queue whose lifetime setting is
// lifetime seconds.
func checkCreatedFor(t *testing.T, lifetime int64, what string, a *answer) queueInfo {
	t.Helper()
	expectStatus(t, what, a, http.StatusCreated)
	fields(t, what, a.m, []string{"ok", "queue_id", "created_at_timestamp", "expire_timestamp", "counts", "write_token", "worker_token", "read_token"}, nil)
	if !boolean(t, what, a.m, "ok") {
		t.Errorf("%s: ok is false", what)
	}
	q := queueInfo{
		id:      str(t, what, a.m, "queue_id"),
		write:   str(t, what, a.m, "write_token"),
		worker:  str(t, what, a.m, "worker_token"),
		read:    str(t, what, a.m, "read_token"),
		created: integer(t, what, a.m, "created_at_timestamp"),
		expire:  integer(t, what, a.m, "expire_timestamp"),
	}
	matches(t, what, "queue_id", q.id, reID)
	for name, tok := range map[string]string{"write_token": q.write, "worker_token": q.worker, "read_token": q.read} {
		matches(t, what, name, tok, reToken)
	}
	if q.write == q.worker || q.worker == q.read || q.write == q.read {
		t.Errorf("%s: the three tokens are not distinct", what)
	}
	between(t, what, "created_at_timestamp", q.created, a.before.Unix()-1, a.after.Unix()+1)
	if q.expire != q.created+lifetime {
		t.Errorf("%s: expire_timestamp %d, want created_at_timestamp + %d = %d", what, q.expire, lifetime, q.created+lifetime)
	}
	if c := checkCounts(t, what, a.m); c != (counts{}) {
		t.Errorf("%s: counts %+v, want all zero", what, c)
	}
	return q
}

// readQueue reads the queue with its read token and checks the answer
// (README: read queue row), including that it reveals no token.
func (e *apiEnv) readQueue(t *testing.T, n *harness.Node, q queueInfo, what string, hidden ...string) counts {
	t.Helper()
	what = "read queue " + what
	a := e.do(t, n, call{method: http.MethodGet, path: "/queue/" + q.id, token: q.read})
	expectStatus(t, what, a, http.StatusOK)
	fields(t, what, a.m, []string{"ok", "queue_id", "created_at_timestamp", "expire_timestamp", "counts"}, nil)
	if !boolean(t, what, a.m, "ok") || str(t, what, a.m, "queue_id") != q.id {
		t.Errorf("%s: %s", what, a)
	}
	if c, x := integer(t, what, a.m, "created_at_timestamp"), integer(t, what, a.m, "expire_timestamp"); c != q.created || x != q.expire {
		t.Errorf("%s: created %d expire %d, creation said %d %d", what, c, x, q.created, q.expire)
	}
	noSecrets(t, what, a, append([]string{q.write, q.worker, q.read}, hidden...)...)
	return checkCounts(t, what, a.m)
}

func (e *apiEnv) expectCounts(t *testing.T, n *harness.Node, q queueInfo, what string, want counts, hidden ...string) {
	t.Helper()
	if got := e.readQueue(t, n, q, what, hidden...); got != want {
		t.Errorf("counts %s: %+v, want %+v", what, got, want)
	}
}

// noSecrets checks an answer contains none of the values.
func noSecrets(t *testing.T, what string, a *answer, values ...string) {
	t.Helper()
	for _, v := range values {
		if v != "" && bytes.Contains(a.Body, []byte(v)) {
			t.Errorf("%s: the answer reveals a token or receipt: %s", what, a)
		}
	}
}

// jobWant is what a job must look like.
type jobWant struct {
	id       string // empty: any valid id
	key      string
	payload  string // canonical JSON text, compared byte for byte
	status   string
	attempts int64
	receipt  bool // the answer of a claim
	// visibility is the claim window asked for, to check
	// claim_expire_timestamp against the request's time.
	visibility int64
	// delay is a release's delay_seconds, to check available_at_timestamp
	// against the request's time.
	delay int64
}

// checkJob checks a job object (README: read job row; claim adds the
// receipt) and returns its id and, for a claim, its receipt.
func checkJob(t *testing.T, what string, a *answer, q queueInfo, w jobWant) (id, receipt string, claimExpire int64) {
	t.Helper()
	job := object(t, what, a.m, "job")
	required := []string{"job_id", "job_key", "payload", "status", "attempts", "created_at_timestamp", "updated_at_timestamp", "expire_timestamp"}
	switch w.status {
	case "claimed":
		required = append(required, "claim_expire_timestamp")
	case "completed":
		required = append(required, "completed_at_timestamp")
	}
	if w.receipt {
		required = append(required, "receipt")
	}
	if w.delay > 0 {
		required = append(required, "available_at_timestamp")
	}
	fields(t, what+" job", job, required, nil)
	id = str(t, what, job, "job_id")
	matches(t, what, "job_id", id, reID)
	if w.id != "" && id != w.id {
		t.Errorf("%s: job_id %s, want %s", what, id, w.id)
	}
	if k := str(t, what, job, "job_key"); k != w.key {
		t.Errorf("%s: job_key %q, want %q", what, k, w.key)
	}
	var raw struct {
		Job struct {
			Payload json.RawMessage `json:"payload"`
		} `json:"job"`
	}
	if err := json.Unmarshal(a.Body, &raw); err != nil || string(raw.Job.Payload) != w.payload {
		t.Errorf("%s: payload %s, want %s (%v)", what, raw.Job.Payload, w.payload, err)
	}
	if s := str(t, what, job, "status"); s != w.status {
		t.Errorf("%s: status %q, want %q", what, s, w.status)
	}
	if n := integer(t, what, job, "attempts"); n != w.attempts {
		t.Errorf("%s: attempts %d, want %d", what, n, w.attempts)
	}
	if x := integer(t, what, job, "expire_timestamp"); x != q.expire {
		t.Errorf("%s: expire_timestamp %d, want the queue's %d", what, x, q.expire)
	}
	created, updated := integer(t, what, job, "created_at_timestamp"), integer(t, what, job, "updated_at_timestamp")
	if created < q.created || updated < created || updated > a.after.Unix()+1 {
		t.Errorf("%s: created_at_timestamp %d, updated_at_timestamp %d out of order (queue created %d, answered %d)", what, created, updated, q.created, a.after.Unix())
	}
	if w.status == "claimed" {
		claimExpire = integer(t, what, job, "claim_expire_timestamp")
		if w.visibility > 0 {
			between(t, what, "claim_expire_timestamp", claimExpire, a.before.Unix()+w.visibility-1, a.after.Unix()+w.visibility+1)
		}
	}
	if w.delay > 0 {
		between(t, what, "available_at_timestamp", integer(t, what, job, "available_at_timestamp"), a.before.Unix()+w.delay-1, a.after.Unix()+w.delay+1)
	}
	if w.status == "completed" {
		if c := integer(t, what, job, "completed_at_timestamp"); c < created || c > a.after.Unix()+1 {
			t.Errorf("%s: completed_at_timestamp %d out of range", what, c)
		}
	}
	if w.receipt {
		receipt = str(t, what, job, "receipt")
		matches(t, what, "receipt", receipt, reToken)
		for _, tok := range []string{q.write, q.worker, q.read} {
			if receipt == tok {
				t.Errorf("%s: the receipt is one of the queue's tokens", what)
			}
		}
	}
	return id, receipt, claimExpire
}

// checkJobAnswer checks a 200 {"ok":true,"job":{…}} answer.
func checkJobAnswer(t *testing.T, what string, a *answer, q queueInfo, w jobWant) (string, string, int64) {
	t.Helper()
	expectStatus(t, what, a, http.StatusOK)
	fields(t, what, a.m, []string{"ok", "job"}, nil)
	if !boolean(t, what, a.m, "ok") {
		t.Errorf("%s: ok is false", what)
	}
	return checkJob(t, what, a, q, w)
}

// checkEnqueued checks an enqueue answer: 201 deduplicated:false for a new
// job, 200 deduplicated:true for an existing one.
func checkEnqueued(t *testing.T, what string, a *answer, q queueInfo, dedup bool, w jobWant) string {
	t.Helper()
	status := http.StatusCreated
	if dedup {
		status = http.StatusOK
	}
	expectStatus(t, what, a, status)
	fields(t, what, a.m, []string{"ok", "deduplicated", "job"}, []string{"job_id"})
	if !boolean(t, what, a.m, "ok") {
		t.Errorf("%s: ok is false", what)
	}
	if d := boolean(t, what, a.m, "deduplicated"); d != dedup {
		t.Errorf("%s: deduplicated %v, want %v", what, d, dedup)
	}
	id, _, _ := checkJob(t, what, a, q, w)
	if a.has("job_id") && str(t, what, a.m, "job_id") != id {
		t.Errorf("%s: top-level job_id %v differs from job.job_id %s", what, a.m["job_id"], id)
	}
	noSecrets(t, what, a, q.write, q.worker, q.read)
	return id
}

func checkEmptyClaim(t *testing.T, what string, a *answer) {
	t.Helper()
	expectStatus(t, what, a, http.StatusOK)
	fields(t, what, a.m, []string{"ok", "job"}, nil)
	if !boolean(t, what, a.m, "ok") || a.m["job"] != nil {
		t.Errorf("%s: want {\"ok\":true,\"job\":null}, got %s", what, a)
	}
}

// checkRejected checks a 409 on ack, release or renew with its reason.
func checkRejected(t *testing.T, what string, a *answer, reason string) {
	t.Helper()
	if !expectError(t, what, a, http.StatusConflict, "", []string{"reason"}) {
		return
	}
	fields(t, what, a.m, []string{"ok", "error", "reason"}, nil)
	if r := str(t, what, a.m, "reason"); r != reason {
		t.Errorf("%s: reason %q, want %q", what, r, reason)
	}
}

func (e *apiEnv) enqueue(t *testing.T, n *harness.Node, q queueInfo, key, payload string) *answer {
	t.Helper()
	return e.do(t, n, call{method: http.MethodPost, path: "/queue/" + q.id + "/jobs", token: q.write,
		raw: []byte(fmt.Sprintf(`{"job_key":%q,"payload":%s}`, key, payload))})
}

func (e *apiEnv) claim(t *testing.T, n *harness.Node, q queueInfo, body string) *answer {
	t.Helper()
	c := call{method: http.MethodPost, path: "/queue/" + q.id + "/claim", token: q.worker, raw: []byte(body)}
	if body == "" {
		c.raw, c.ct = nil, "-"
	}
	return e.do(t, n, c)
}

func (e *apiEnv) jobAction(t *testing.T, n *harness.Node, q queueInfo, job, action, body string) *answer {
	t.Helper()
	return e.do(t, n, call{method: http.MethodPost, path: "/queue/" + q.id + "/jobs/" + job + "/" + action, token: q.worker, raw: []byte(body)})
}

func receiptBody(r string) string { return fmt.Sprintf(`{"receipt":%q}`, r) }

func (e *apiEnv) readJob(t *testing.T, n *harness.Node, q queueInfo, job string) *answer {
	t.Helper()
	return e.do(t, n, call{method: http.MethodGet, path: "/queue/" + q.id + "/jobs/" + job, token: q.read})
}

// queueSpecFlow is the spec's queue walk-through: create, enqueue,
// deduplicate, claim, ack (twice), read counts and the job after each step.
func queueSpecFlow(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	e.expectCounts(t, n, q, "after create", counts{})

	const payload = `{"report_id":42}`
	e.stored.addExact("job payload", payload)
	e.stored.addExact("job key", "report:42")
	w := jobWant{key: "report:42", payload: payload, status: "pending"}
	id := checkEnqueued(t, "enqueue", e.enqueue(t, n, q, "report:42", payload), q, false, w)
	w.id = id
	e.expectCounts(t, n, q, "after enqueue", counts{pending: 1, total: 1})
	checkEnqueued(t, "enqueue again", e.enqueue(t, n, q, "report:42", payload), q, true, w)
	e.expectCounts(t, n, q, "after a deduplicated enqueue", counts{pending: 1, total: 1})

	read := e.readJob(t, n, q, id)
	checkJobAnswer(t, "read pending job", read, q, w)
	noSecrets(t, "read pending job", read, q.write, q.worker, q.read)

	claimed := w
	claimed.status, claimed.attempts, claimed.receipt, claimed.visibility = "claimed", 1, true, 60
	_, receipt, exp := checkJobAnswer(t, "claim", e.claim(t, n, q, `{"visibility_timeout":60}`), q, claimed)
	e.expectCounts(t, n, q, "after claim", counts{claimed: 1, total: 1}, receipt)
	checkEmptyClaim(t, "claim while the only job is claimed", e.claim(t, n, q, `{}`))

	claimed.receipt, claimed.visibility = false, 0
	read = e.readJob(t, n, q, id)
	if _, _, x := checkJobAnswer(t, "read claimed job", read, q, claimed); x != exp {
		t.Errorf("read claimed job: claim_expire_timestamp %d, the claim said %d", x, exp)
	}
	noSecrets(t, "read claimed job", read, q.write, q.worker, q.read, receipt)

	done := w
	done.status, done.attempts = "completed", 1
	ack := e.jobAction(t, n, q, id, "ack", receiptBody(receipt))
	checkJobAnswer(t, "ack", ack, q, done)
	noSecrets(t, "ack", ack, receipt)
	e.expectCounts(t, n, q, "after ack", counts{completed: 1, total: 1}, receipt)
	checkJobAnswer(t, "ack repeated with its receipt", e.jobAction(t, n, q, id, "ack", receiptBody(receipt)), q, done)
	checkRejected(t, "release after ack", e.jobAction(t, n, q, id, "release", receiptBody(receipt)), "completed")
	checkRejected(t, "renew after ack", e.jobAction(t, n, q, id, "renew", receiptBody(receipt)), "completed")
	checkEmptyClaim(t, "claim on a queue with only a completed job", e.claim(t, n, q, `{"visibility_timeout":60}`))
	read = e.readJob(t, n, q, id)
	checkJobAnswer(t, "read completed job", read, q, done)
	noSecrets(t, "read completed job", read, q.write, q.worker, q.read, receipt)
	// Completed jobs keep their key: the same key and payload deduplicate.
	checkEnqueued(t, "enqueue the completed job's key", e.enqueue(t, n, q, "report:42", payload), q, true, done)

	// Claims go in enqueue order; a claim without a body (or with {}) uses
	// the default 60-second window.
	var ids []string
	for _, k := range []string{"report:43", "report:44", "report:45"} {
		ids = append(ids, checkEnqueued(t, "enqueue "+k, e.enqueue(t, n, q, k, `{"n":1}`), q, false, jobWant{key: k, payload: `{"n":1}`, status: "pending"}))
	}
	e.expectCounts(t, n, q, "after three more", counts{pending: 3, completed: 1, total: 4})
	for i, body := range []string{"", `{}`, ` { } `} {
		k := fmt.Sprintf("report:%d", 43+i)
		got, r, _ := checkJobAnswer(t, fmt.Sprintf("claim with body %q", body), e.claim(t, n, q, body), q,
			jobWant{id: ids[i], key: k, payload: `{"n":1}`, status: "claimed", attempts: 1, receipt: true, visibility: 60})
		checkJobAnswer(t, "ack "+k, e.jobAction(t, n, q, got, "ack", receiptBody(r)), q, jobWant{id: ids[i], key: k, payload: `{"n":1}`, status: "completed", attempts: 1})
	}
	e.expectCounts(t, n, q, "at the end", counts{completed: 4, total: 4})
}

// queueDedup: the same key with the same payload written differently is
// deduplicated; another payload conflicts; null and 16384-byte payloads are
// accepted and 16385 bytes are not.
func queueDedup(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	const canonical = `{"nested":{"a":[true,null],"z":1},"ratio":1,"report_id":42,"s":"é/","tags":["a","b"]}`
	w := jobWant{key: "dedup:1", payload: canonical, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, "dedup:1", `{"report_id":42,"tags":["a","b"],"ratio":1.0,"nested":{"z":1,"a":[true,null]},"s":"é\/"}`), q, false, w)
	for _, variant := range []string{
		canonical,
		"{ \"report_id\" : 42 ,\n\t\"tags\" : [ \"a\" , \"b\" ] , \"ratio\" : 1 , \"nested\" : { \"z\" : 1 , \"a\" : [ true , null ] } , \"s\" : \"é/\" }",
		`{"s":"\u00e9\/","tags":["a","b"],"report_id":42,"ratio":1e0,"nested":{"a":[true,null],"z":1.0}}`,
		`{"nested":{"z":10e-1,"a":[true,null]},"tags":["a","b"],"s":"é/","report_id":42,"ratio":1.000}`,
	} {
		checkEnqueued(t, "enqueue "+variant, e.enqueue(t, n, q, "dedup:1", variant), q, true, w)
	}
	for _, other := range []string{
		`{"report_id":42,"tags":["a","b"],"ratio":2,"nested":{"z":1,"a":[true,null]},"s":"é/"}`,
		`{"report_id":42}`,
		`null`,
		`"dedup:1"`,
	} {
		a := e.enqueue(t, n, q, "dedup:1", other)
		if expectError(t, "enqueue the key with payload "+other, a, http.StatusConflict, "", []string{"job_id"}, "payload") && a.has("job_id") {
			if got := str(t, "conflict", a.m, "job_id"); got != w.id {
				t.Errorf("conflict names job %s, the key's job is %s", got, w.id)
			}
		}
	}
	e.expectCounts(t, n, q, "after the conflicts", counts{pending: 1, total: 1})

	// payload null is a payload.
	nw := jobWant{key: "null-payload", payload: `null`, status: "pending"}
	nw.id = checkEnqueued(t, "enqueue payload null", e.enqueue(t, n, q, "null-payload", `null`), q, false, nw)
	checkEnqueued(t, "enqueue payload null again", e.enqueue(t, n, q, "null-payload", ` null `), q, true, nw)
	checkJobAnswer(t, "read the null-payload job", e.readJob(t, n, q, nw.id), q, nw)
	expectError(t, "enqueue without payload", e.do(t, n, call{method: http.MethodPost, path: "/queue/" + q.id + "/jobs", token: q.write, raw: []byte(`{"job_key":"no-payload"}`)}),
		http.StatusBadRequest, "payload", nil, "payload")

	// 16384 canonical bytes are accepted, also when written with more
	// bytes; 16385 are not.
	exact := `"` + strings.Repeat("x", 16384-2) + `"`
	xw := jobWant{key: "size:16384", payload: exact, status: "pending"}
	xw.id = checkEnqueued(t, "enqueue a 16384-byte payload", e.enqueue(t, n, q, "size:16384", exact), q, false, xw)
	checkEnqueued(t, "the 16384-byte payload with whitespace", e.enqueue(t, n, q, "size:16384", "\n   "+exact+"   \n"), q, true, xw)
	obj := `{"k":"` + strings.Repeat("y", 16384-len(`{"k":""}`)) + `"}`
	checkEnqueued(t, "a 16384-byte object written with 200 spaces", e.enqueue(t, n, q, "size:object", strings.Replace(obj, `"k":`, `"k":`+strings.Repeat(" ", 200), 1)), q, false,
		jobWant{key: "size:object", payload: obj, status: "pending"})
	over := `"` + strings.Repeat("x", 16384-1) + `"`
	expectError(t, "enqueue a 16385-byte payload", e.enqueue(t, n, q, "size:16385", over), http.StatusRequestEntityTooLarge, "payload", nil, "16384")
	expectError(t, "enqueue a payload with duplicate keys", e.enqueue(t, n, q, "dup-keys", `{"a":1,"a":1}`), http.StatusBadRequest, "payload", nil, "payload")
	e.expectCounts(t, n, q, "at the end", counts{pending: 4, total: 4})
}

// queueJobKeys: the job_key rule.
func queueJobKeys(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	good := []string{strings.Repeat("k", 64), "a.b_c:d-e", "Report:42", "0", "9-._:", "Z"}
	for _, k := range good {
		checkEnqueued(t, "enqueue job_key "+k, e.enqueue(t, n, q, k, `1`), q, false, jobWant{key: k, payload: `1`, status: "pending"})
	}
	bad := []string{strings.Repeat("k", 65), "-leading", ".leading", "_leading", ":leading", "", "a b", "a/b", "ünï", "a\tb", "a+b", "a@b"}
	for _, k := range bad {
		expectError(t, fmt.Sprintf("enqueue job_key %q", k), e.enqueue(t, n, q, k, `1`), http.StatusBadRequest, "job_key", nil, "job_key")
	}
	for name, body := range map[string]string{
		"job_key missing":    `{"payload":1}`,
		"job_key a number":   `{"job_key":5,"payload":1}`,
		"job_key null":       `{"job_key":null,"payload":1}`,
		"unknown field":      `{"job_key":"x","payload":1,"priority":5}`,
		"result not a field": `{"job_key":"x","payload":1,"callback_url":"http://127.0.0.1:1/"}`,
	} {
		a := e.do(t, n, call{method: http.MethodPost, path: "/queue/" + q.id + "/jobs", token: q.write, raw: []byte(body)})
		want := "job_key"
		switch name {
		case "unknown field":
			want = "priority"
		case "result not a field":
			want = "callback_url"
		}
		expectError(t, name, a, http.StatusBadRequest, "", nil, want)
	}
	e.expectCounts(t, n, q, "at the end", counts{pending: int64(len(good)), total: int64(len(good))})
}

// queueReceipts: renew moves the window and keeps the attempt; release
// returns the job with its attempt count; expired and superseded receipts
// are refused with their reasons; a completed job refuses release and renew.
func queueReceipts(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	w := jobWant{key: "receipts:1", payload: `{"step":1}`, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, w.key, w.payload), q, false, w)
	cl := w
	cl.status, cl.attempts, cl.receipt, cl.visibility = "claimed", 1, true, 30
	_, r1, exp30 := checkJobAnswer(t, "claim with visibility 30", e.claim(t, n, q, `{"visibility_timeout":30}`), q, cl)

	rn := cl
	rn.receipt, rn.visibility = false, 900
	renewed := e.jobAction(t, n, q, w.id, "renew", fmt.Sprintf(`{"receipt":%q,"visibility_timeout":900}`, r1))
	_, _, exp900 := checkJobAnswer(t, "renew with visibility 900", renewed, q, rn)
	noSecrets(t, "renew", renewed, r1)
	if exp900 <= exp30 {
		t.Errorf("renew to 900 s did not move claim_expire_timestamp: %d, was %d", exp900, exp30)
	}
	rn.visibility = 60
	checkJobAnswer(t, "renew with the default visibility", e.jobAction(t, n, q, w.id, "renew", receiptBody(r1)), q, rn)
	for _, v := range []string{"29", "901", `"60"`, "60.5", "0", "-30"} {
		a := e.jobAction(t, n, q, w.id, "renew", fmt.Sprintf(`{"receipt":%q,"visibility_timeout":%s}`, r1, v))
		field := "visibility_timeout"
		if strings.ContainsAny(v, `".`) {
			field = ""
		}
		expectError(t, "renew with visibility_timeout "+v, a, http.StatusBadRequest, field, nil, "visibility_timeout")
	}
	rn.visibility = 0
	_, _, cur := checkJobAnswer(t, "read the renewed job", e.readJob(t, n, q, w.id), q, rn)
	// A later job, pending while the first is released: claims go in
	// enqueue order, so the released job comes first again.
	later := jobWant{key: "receipts:2", payload: `{"step":2}`, status: "pending"}
	later.id = checkEnqueued(t, "enqueue a later job", e.enqueue(t, n, q, later.key, later.payload), q, false, later)
	e.expectCounts(t, n, q, "while claimed", counts{claimed: 1, pending: 1, total: 2}, r1)

	pending := w
	pending.attempts = 1
	rel := e.jobAction(t, n, q, w.id, "release", receiptBody(r1))
	checkJobAnswer(t, "release", rel, q, pending)
	e.expectCounts(t, n, q, "after release", counts{pending: 2, total: 2}, r1)
	if cur == 0 {
		t.Errorf("the renewed claim had no claim_expire_timestamp")
	}
	for _, action := range []string{"ack", "renew", "release"} {
		checkRejected(t, action+" with the released receipt", e.jobAction(t, n, q, w.id, action, receiptBody(r1)), "expired")
	}

	cl.attempts, cl.visibility = 2, 60
	_, r2, _ := checkJobAnswer(t, "claim again (the released job, enqueued first)", e.claim(t, n, q, `{}`), q, cl)
	if r2 == r1 {
		t.Fatalf("the second claim returned the first receipt")
	}
	never := randHex(t, 32)
	for _, action := range []string{"ack", "renew", "release"} {
		checkRejected(t, action+" with the superseded receipt", e.jobAction(t, n, q, w.id, action, receiptBody(r1)), "superseded")
		checkRejected(t, action+" with a receipt never issued", e.jobAction(t, n, q, w.id, action, receiptBody(never)), "superseded")
	}
	rn.attempts = 2
	checkJobAnswer(t, "renew the second claim", e.jobAction(t, n, q, w.id, "renew", receiptBody(r2)), q, rn)

	done := w
	done.status, done.attempts = "completed", 2
	checkJobAnswer(t, "ack the second claim", e.jobAction(t, n, q, w.id, "ack", receiptBody(r2)), q, done)
	checkJobAnswer(t, "ack it again", e.jobAction(t, n, q, w.id, "ack", receiptBody(r2)), q, done)
	checkRejected(t, "release after ack", e.jobAction(t, n, q, w.id, "release", receiptBody(r2)), "completed")
	checkRejected(t, "renew after ack", e.jobAction(t, n, q, w.id, "renew", receiptBody(r2)), "completed")
	e.expectCounts(t, n, q, "at the end", counts{completed: 1, pending: 1, total: 2}, r1, r2)

	// Ack takes nothing but the receipt: no result, no callback.
	for _, body := range []string{
		fmt.Sprintf(`{"receipt":%q,"result":{"ok":true}}`, r2),
		fmt.Sprintf(`{"receipt":%q,"callback_url":"http://127.0.0.1:1/"}`, r2),
	} {
		expectError(t, "ack with "+body, e.jobAction(t, n, q, w.id, "ack", body), http.StatusBadRequest, "", nil, "unknown field")
	}
}

// queueAttemptsByRelease: after the fifth released attempt the job fails.
func queueAttemptsByRelease(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	w := jobWant{key: "flaky", payload: `{"fails":true}`, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, w.key, w.payload), q, false, w)
	var last string
	for attempt := int64(1); attempt <= 5; attempt++ {
		_, r, _ := checkJobAnswer(t, fmt.Sprintf("claim %d", attempt), e.claim(t, n, q, `{"visibility_timeout":300}`), q,
			jobWant{id: w.id, key: w.key, payload: w.payload, status: "claimed", attempts: attempt, receipt: true, visibility: 300})
		after := w
		after.attempts = attempt
		if attempt == 5 {
			after.status = "failed"
		}
		checkJobAnswer(t, fmt.Sprintf("release %d", attempt), e.jobAction(t, n, q, w.id, "release", receiptBody(r)), q, after)
		last = r
	}
	checkEmptyClaim(t, "claim after the job failed", e.claim(t, n, q, `{}`))
	checkJobAnswer(t, "read the failed job", e.readJob(t, n, q, w.id), q, jobWant{id: w.id, key: w.key, payload: w.payload, status: "failed", attempts: 5})
	e.expectCounts(t, n, q, "after five attempts", counts{failed: 1, total: 1}, last)
	if a := e.jobAction(t, n, q, w.id, "ack", receiptBody(last)); a.Status != http.StatusConflict {
		t.Errorf("ack of a failed job: want 409, got %s", a)
	}
	// A failed job keeps its key.
	checkEnqueued(t, "enqueue the failed job's key", e.enqueue(t, n, q, w.key, w.payload), q, true,
		jobWant{id: w.id, key: w.key, payload: w.payload, status: "failed", attempts: 5})
}

// queueRoles: each endpoint with each of the three tokens; exactly the
// spec's table is allowed, anything else is 403 with one message; missing
// or malformed credentials are 401 with a Bearer challenge.
func queueRoles(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	other := e.createQueue(t, n)
	w := jobWant{key: "roles:1", payload: `{"r":1}`, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, w.key, w.payload), q, false, w)
	probe := randHex(t, 32)
	type endpoint struct {
		name, method, path, body string
		allowed                  string // the role allowed
		allowedStatus            int
	}
	eps := []endpoint{
		{"enqueue", http.MethodPost, "/queue/" + q.id + "/jobs", `{"job_key":"roles:1","payload":{"r":1}}`, "write", 200},
		{"claim", http.MethodPost, "/queue/" + q.id + "/claim", `{"visibility_timeout":900}`, "worker", 200},
		{"ack", http.MethodPost, "/queue/" + q.id + "/jobs/" + w.id + "/ack", receiptBody(probe), "worker", 409},
		{"release", http.MethodPost, "/queue/" + q.id + "/jobs/" + w.id + "/release", receiptBody(probe), "worker", 409},
		{"renew", http.MethodPost, "/queue/" + q.id + "/jobs/" + w.id + "/renew", receiptBody(probe), "worker", 409},
		{"retry", http.MethodPost, "/queue/" + q.id + "/jobs/" + w.id + "/retry", `{}`, "write", 409},
		{"read queue", http.MethodGet, "/queue/" + q.id, "", "read", 200},
		{"read job", http.MethodGet, "/queue/" + q.id + "/jobs/" + w.id, "", "read", 200},
	}
	tokens := map[string]string{"write": q.write, "worker": q.worker, "read": q.read}
	var forbidden string
	mk := func(ep endpoint) call {
		c := call{method: ep.method, path: ep.path}
		if ep.body != "" {
			c.raw = []byte(ep.body)
		}
		return c
	}
	check403 := func(what string, a *answer) {
		t.Helper()
		if !expectError(t, what, a, http.StatusForbidden, "", nil) {
			return
		}
		msg := str(t, what, a.m, "error")
		if forbidden == "" {
			forbidden = msg
		} else if msg != forbidden {
			t.Errorf("%s: 403 message %q differs from another 403's %q: it must not depend on the token", what, msg, forbidden)
		}
	}
	for _, ep := range eps {
		for _, role := range []string{"write", "worker", "read"} {
			what := fmt.Sprintf("%s with the %s token", ep.name, role)
			c := mk(ep)
			c.token = tokens[role]
			a := e.do(t, n, c)
			if role != ep.allowed {
				check403(what, a)
				continue
			}
			if a.Status != ep.allowedStatus {
				t.Errorf("%s: want HTTP %d (allowed), got %s", what, ep.allowedStatus, a)
			}
		}
		// The right role of another queue, a token of no queue, and the
		// token in upper case (not 64 lowercase hex: malformed).
		c := mk(ep)
		c.token = map[string]string{"write": other.write, "worker": other.worker, "read": other.read}[ep.allowed]
		check403(ep.name+" with another queue's "+ep.allowed+" token", e.do(t, n, c))
		c.token = randHex(t, 32)
		check403(ep.name+" with a token of no queue", e.do(t, n, c))

		for _, bad := range []struct{ name, auth string }{
			{"no Authorization", ""},
			{"a malformed token", "Bearer abc"},
			{"the right token in upper case", "Bearer " + strings.ToUpper(tokens[ep.allowed])},
			{"the right token in Basic scheme", "Basic " + tokens[ep.allowed]},
			{"Basic x", "Basic x"},
			{"Bearer without token", "Bearer"},
			{"the right token in the query", ""},
		} {
			c := mk(ep)
			c.auth = bad.auth
			if bad.name == "the right token in the query" {
				c.path += "?token=" + tokens[ep.allowed] + "&access_token=" + tokens[ep.allowed]
			}
			what := ep.name + " with " + bad.name
			a := e.do(t, n, c)
			if expectError(t, what, a, http.StatusUnauthorized, "Authorization", nil) {
				if h := a.Header.Get("WWW-Authenticate"); !strings.HasPrefix(h, "Bearer") {
					t.Errorf("%s: WWW-Authenticate %q, want a Bearer challenge", what, h)
				}
			}
		}
	}
	// A stale read (served from the node's own state) checks the token
	// the same way.
	harness.Eventually(t, 10*time.Second, "the queue to reach "+n.ID+"'s own state", func() error {
		a := e.do(t, n, call{method: http.MethodGet, path: "/queue/" + q.id + "?stale=true", token: q.read})
		if a.Status != http.StatusOK {
			return fmt.Errorf("stale read: %s", a)
		}
		return nil
	})
	for _, role := range []string{"write", "worker"} {
		check403("stale read with the "+role+" token", e.do(t, n, call{method: http.MethodGet, path: "/queue/" + q.id + "?stale=true", token: tokens[role]}))
		check403("stale job read with the "+role+" token", e.do(t, n, call{method: http.MethodGet, path: "/queue/" + q.id + "/jobs/" + w.id + "?stale=true", token: tokens[role]}))
	}
	a401 := e.do(t, n, call{method: http.MethodGet, path: "/queue/" + q.id + "?stale=true"})
	expectError(t, "stale read without a token", a401, http.StatusUnauthorized, "Authorization", nil)

	// The scheme is case-insensitive (RFC 9110): "bearer" works.
	a := e.do(t, n, call{method: http.MethodGet, path: "/queue/" + q.id, auth: "bearer " + q.read})
	expectStatus(t, "read with scheme bearer", a, http.StatusOK)

	// Of the refused calls none changed anything: the one allowed claim
	// holds the job (attempt 1) and the allowed enqueue deduplicated.
	e.expectCounts(t, n, q, "after the role checks", counts{claimed: 1, total: 1})
	checkJobAnswer(t, "the job after the role checks", e.readJob(t, n, q, w.id), q,
		jobWant{id: w.id, key: w.key, payload: w.payload, status: "claimed", attempts: 1})
	e.expectCounts(t, n, other, "other queue after the role checks", counts{})
}

// queueNotFound: unknown and malformed queue and job ids, unknown actions
// and methods.
func queueNotFound(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	w := jobWant{key: "nf:1", payload: `1`, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, w.key, w.payload), q, false, w)
	unknownQ, unknownJ, rcpt := randHex(t, 16), randHex(t, 16), randHex(t, 32)
	// A job of another queue, claimed there.
	oq := e.createQueue(t, n)
	otherJob := checkEnqueued(t, "enqueue in another queue", e.enqueue(t, n, oq, "nf:other", `2`), oq, false, jobWant{key: "nf:other", payload: `2`, status: "pending"})
	_, otherReceipt, _ := checkJobAnswer(t, "claim in another queue", e.claim(t, n, oq, `{}`), oq,
		jobWant{id: otherJob, key: "nf:other", payload: `2`, status: "claimed", attempts: 1, receipt: true, visibility: 60})
	rows := []struct {
		name, method, path, token, body string
		status                          int
		want                            string
	}{
		{"enqueue to an unknown queue", "POST", "/queue/" + unknownQ + "/jobs", q.write, `{"job_key":"a","payload":1}`, 404, "queue"},
		{"claim on an unknown queue", "POST", "/queue/" + unknownQ + "/claim", q.worker, `{}`, 404, "queue"},
		{"ack on an unknown queue", "POST", "/queue/" + unknownQ + "/jobs/" + w.id + "/ack", q.worker, receiptBody(rcpt), 404, "queue"},
		{"read an unknown queue", "GET", "/queue/" + unknownQ, q.read, "", 404, "queue"},
		{"read a job of an unknown queue", "GET", "/queue/" + unknownQ + "/jobs/" + w.id, q.read, "", 404, "queue"},
		{"queue id not hex", "GET", "/queue/not-a-queue-id", q.read, "", 404, "queue"},
		{"queue id in upper case", "GET", "/queue/" + strings.ToUpper(q.id), q.read, "", 404, "queue"},
		{"queue id of 33 characters", "POST", "/queue/" + q.id + "0/claim", q.worker, `{}`, 404, "queue"},
		{"queue id of 31 characters", "POST", "/queue/" + q.id[:31] + "/jobs", q.write, `{"job_key":"a","payload":1}`, 404, "queue"},
		{"read an unknown job", "GET", "/queue/" + q.id + "/jobs/" + unknownJ, q.read, "", 404, "job"},
		{"read another queue's job", "GET", "/queue/" + q.id + "/jobs/" + otherJob, q.read, "", 404, "job"},
		{"ack another queue's job", "POST", "/queue/" + q.id + "/jobs/" + otherJob + "/ack", q.worker, receiptBody(otherReceipt), 404, "job"},
		{"another queue's job with that queue's tokens", "GET", "/queue/" + q.id + "/jobs/" + otherJob, oq.read, "", 403, ""},
		{"ack an unknown job", "POST", "/queue/" + q.id + "/jobs/" + unknownJ + "/ack", q.worker, receiptBody(rcpt), 404, "job"},
		{"release an unknown job", "POST", "/queue/" + q.id + "/jobs/" + unknownJ + "/release", q.worker, receiptBody(rcpt), 404, "job"},
		{"renew an unknown job", "POST", "/queue/" + q.id + "/jobs/" + unknownJ + "/renew", q.worker, receiptBody(rcpt), 404, "job"},
		{"job id not hex", "GET", "/queue/" + q.id + "/jobs/report:42", q.read, "", 404, "job"},
		{"ack a malformed job id", "POST", "/queue/" + q.id + "/jobs/" + strings.ToUpper(w.id) + "/ack", q.worker, receiptBody(rcpt), 404, "job"},
		{"unknown action", "POST", "/queue/" + q.id + "/jobs/" + w.id + "/explode", q.worker, receiptBody(rcpt), 404, "no such endpoint"},
		{"unknown action without token", "POST", "/queue/" + q.id + "/jobs/" + w.id + "/explode", "", receiptBody(rcpt), 404, "no such endpoint"},
		{"path below a job action", "POST", "/queue/" + q.id + "/jobs/" + w.id + "/ack/more", q.worker, receiptBody(rcpt), 404, "no such endpoint"},
		{"list jobs (not an endpoint)", "GET", "/queue/" + q.id + "/jobs", q.read, "", 405, "method"},
		{"delete a queue", "DELETE", "/queue/" + q.id, q.write, "", 405, "method"},
		{"GET claim", "GET", "/queue/" + q.id + "/claim", q.worker, "", 405, "method"},
		{"PUT a job", "PUT", "/queue/" + q.id + "/jobs/" + w.id, q.write, `{}`, 405, "method"},
		{"GET queue list", "GET", "/queue", q.read, "", 405, "method"},
	}
	for _, r := range rows {
		c := call{method: r.method, path: r.path, token: r.token}
		if r.body != "" {
			c.raw = []byte(r.body)
		}
		expectError(t, r.name, e.do(t, n, c), r.status, "", nil, r.want)
	}
	e.expectCounts(t, n, q, "after the refused calls", counts{pending: 1, total: 1})
	e.expectCounts(t, n, oq, "the other queue after the refused calls", counts{claimed: 1, total: 1}, otherReceipt)
}

// queueJobLimit: a queue takes 100 distinct jobs; of 105 enqueued at once
// exactly 100 are created and 5 refused with limit 100; then the 101st
// key is refused while existing keys still deduplicate.
func queueJobLimit(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	const sent = 105
	answers := make([]*answer, sent)
	errs := make([]error, sent)
	var wg sync.WaitGroup
	keys := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range keys {
				answers[i], errs[i] = e.trySend(t, nil, n, call{method: http.MethodPost, path: "/queue/" + q.id + "/jobs", token: q.write,
					raw: []byte(fmt.Sprintf(`{"job_key":"limit:%03d","payload":{"i":%d}}`, i, i))})
			}
		})
	}
	for i := range sent {
		keys <- i
	}
	close(keys)
	wg.Wait()
	created, limited := 0, 0
	for i, a := range answers {
		what := fmt.Sprintf("concurrent enqueue limit:%03d", i)
		switch {
		case errs[i] != nil:
			t.Fatal(errs[i])
		case a.Status == http.StatusCreated && a.m["deduplicated"] == false:
			created++
		case a.Status == http.StatusConflict:
			limited++
			if expectError(t, what, a, http.StatusConflict, "", []string{"limit"}) {
				fields(t, what, a.m, []string{"ok", "error", "limit"}, nil)
				if l := integer(t, what, a.m, "limit"); l != 100 {
					t.Errorf("%s: limit %d, want 100", what, l)
				}
			}
		default:
			t.Errorf("%s: %s", what, a)
		}
	}
	if created != 100 || limited != sent-100 {
		t.Errorf("%d distinct jobs enqueued at once: %d created, %d refused; want 100 and %d", sent, created, limited, sent-100)
	}
	e.expectCounts(t, n, q, "with 100 jobs", counts{pending: 100, total: 100})
	a := e.enqueue(t, n, q, "limit:new", `{"i":-1}`)
	if expectError(t, "the 101st job", a, http.StatusConflict, "", []string{"limit"}) {
		fields(t, "the 101st job", a.m, []string{"ok", "error", "limit"}, nil)
		if l := integer(t, "the 101st job", a.m, "limit"); l != 100 {
			t.Errorf("the 101st job: limit %d, want 100", l)
		}
	}
	// Some key that was created deduplicates; another payload conflicts.
	var k int
	for k = 0; k < sent && answers[k].Status != http.StatusCreated; k++ {
	}
	key, payload := fmt.Sprintf("limit:%03d", k), fmt.Sprintf(`{"i":%d}`, k)
	checkEnqueued(t, "an existing key after the limit", e.enqueue(t, n, q, key, payload), q, true, jobWant{key: key, payload: payload, status: "pending"})
	expectError(t, "an existing key with another payload after the limit", e.enqueue(t, n, q, key, `{"i":-2}`), http.StatusConflict, "", []string{"job_id"}, "payload")
	e.expectCounts(t, n, q, "after the limit", counts{pending: 100, total: 100})
}

// queueConcurrentDedup: the same key and payload enqueued at once creates
// one job; every other answer is that job, deduplicated.
func queueConcurrentDedup(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	const workers = 12
	answers := make([]*answer, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range workers {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = e.trySend(t, nil, n, call{method: http.MethodPost, path: "/queue/" + q.id + "/jobs", token: q.write, raw: []byte(`{"job_key":"once","payload":{"x":1}}`)})
		})
	}
	close(start)
	wg.Wait()
	ids := map[string]bool{}
	created := 0
	for i, a := range answers {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		dedup := a.Status == http.StatusOK
		if !dedup {
			created++
		}
		ids[checkEnqueued(t, "concurrent enqueue", a, q, dedup, jobWant{key: "once", payload: `{"x":1}`, status: "pending"})] = true
	}
	if created != 1 || len(ids) != 1 {
		t.Errorf("%d identical enqueues at once: %d created, %d distinct job ids; want 1 and 1", workers, created, len(ids))
	}
	e.expectCounts(t, n, q, "after identical enqueues", counts{pending: 1, total: 1})
}

// queueBadRequests: body and field validation on queue endpoints.
func queueBadRequests(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	w := jobWant{key: "bad:1", payload: `1`, status: "pending"}
	w.id = checkEnqueued(t, "enqueue", e.enqueue(t, n, q, w.key, w.payload), q, false, w)
	jobs := "/queue/" + q.id + "/jobs"
	claim := "/queue/" + q.id + "/claim"
	ack := "/queue/" + q.id + "/jobs/" + w.id + "/ack"
	rows := []struct {
		name, path, token, body, ct string
		status                      int
		field, want                 string
	}{
		{"claim visibility 29", claim, q.worker, `{"visibility_timeout":29}`, "", 400, "visibility_timeout", "30"},
		{"claim visibility 901", claim, q.worker, `{"visibility_timeout":901}`, "", 400, "visibility_timeout", "900"},
		{`claim visibility "60"`, claim, q.worker, `{"visibility_timeout":"60"}`, "", 400, "", "visibility_timeout"},
		{"claim visibility 60.5", claim, q.worker, `{"visibility_timeout":60.5}`, "", 400, "", "visibility_timeout"},
		{"claim unknown field", claim, q.worker, `{"visibility":60}`, "", 400, "", "visibility"},
		{"claim malformed", claim, q.worker, `{"visibility_timeout":`, "", 400, "", "malformed JSON"},
		{"claim null body", claim, q.worker, `null`, "", 400, "", "JSON object"},
		{"claim text/plain", claim, q.worker, `{}`, "text/plain", 415, "", "Content-Type"},
		{"enqueue malformed", jobs, q.write, `{"job_key":"x","payload":`, "", 400, "", "malformed JSON"},
		{"enqueue null body", jobs, q.write, `null`, "", 400, "", "JSON object"},
		{"enqueue empty body", jobs, q.write, ``, "", 400, "", "JSON object"},
		{"enqueue array body", jobs, q.write, `[]`, "", 400, "", "JSON object"},
		{"enqueue text/plain", jobs, q.write, `{"job_key":"x","payload":1}`, "text/plain", 415, "", "Content-Type"},
		{"enqueue without content type", jobs, q.write, `{"job_key":"x","payload":1}`, "-", 415, "", "Content-Type"},
		{"enqueue body over 256 KiB", jobs, q.write, `{"job_key":"x","payload":"` + strings.Repeat("p", 256<<10) + `"}`, "", 413, "", "exceeds"},
		{"ack without receipt", ack, q.worker, `{}`, "", 400, "receipt", "receipt"},
		{"ack receipt of 63 hex", ack, q.worker, receiptBody(randHex(t, 32)[:63]), "", 400, "receipt", "receipt"},
		{"ack receipt in upper case", ack, q.worker, receiptBody(strings.ToUpper(randHex(t, 32))), "", 400, "receipt", "receipt"},
		{"ack receipt a number", ack, q.worker, `{"receipt":5}`, "", 400, "", "receipt"},
		{"ack malformed", ack, q.worker, `{"receipt"`, "", 400, "", "malformed JSON"},
		{"ack null body", ack, q.worker, `null`, "", 400, "", "JSON object"},
		{"ack text/plain", ack, q.worker, receiptBody(randHex(t, 32)), "text/plain", 415, "", "Content-Type"},
		{"release with visibility", "/queue/" + q.id + "/jobs/" + w.id + "/release", q.worker, fmt.Sprintf(`{"receipt":%q,"visibility_timeout":60}`, randHex(t, 32)), "", 400, "", "visibility_timeout"},
		{"renew without receipt", "/queue/" + q.id + "/jobs/" + w.id + "/renew", q.worker, `{"visibility_timeout":60}`, "", 400, "receipt", "receipt"},
		{"create queue with a field", "/queue", "", `{"ttl":60}`, "", 400, "", "ttl"},
		{"create queue null body", "/queue", "", `null`, "", 400, "", "JSON object"},
		{"create queue text/plain", "/queue", "", `{}`, "text/plain", 415, "", "Content-Type"},
		{"create queue malformed", "/queue", "", `{`, "", 400, "", "malformed JSON"},
	}
	for _, r := range rows {
		expectError(t, r.name, e.do(t, n, call{method: http.MethodPost, path: r.path, token: r.token, raw: []byte(r.body), ct: r.ct}), r.status, r.field, nil, r.want)
	}
	// The edges of the visibility range are accepted (the first claim takes
	// the job, the second finds the queue empty).
	checkJobAnswer(t, "claim visibility 30", e.claim(t, n, q, `{"visibility_timeout":30}`), q,
		jobWant{id: w.id, key: w.key, payload: w.payload, status: "claimed", attempts: 1, receipt: true, visibility: 30})
	checkEmptyClaim(t, "claim visibility 900", e.claim(t, n, q, `{"visibility_timeout":900}`))
	e.expectCounts(t, n, q, "after the refused calls", counts{claimed: 1, total: 1})
	// Creating a queue with an empty body, or none, works like {}.
	checkCreated(t, "create queue with an empty JSON body", e.do(t, n, call{method: http.MethodPost, path: "/queue", raw: []byte{}, ct: "application/json"}))
	checkCreated(t, "create queue without body", e.do(t, n, call{method: http.MethodPost, path: "/queue", ct: "-"}))
}
