package test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// queueDelayAndRetry: a release with delay_seconds keeps the job from
// claims until the delay is over (README: delayed release); retry moves a
// failed job back to pending with its attempts reset, with the write token
// only, and refuses any other job with its status (README: redrive).
func queueDelayAndRetry(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	a := jobWant{key: "delayed", payload: `{"a":1}`, status: "pending"}
	a.id = checkEnqueued(t, "enqueue a", e.enqueue(t, n, q, a.key, a.payload), q, false, a)
	b := jobWant{key: "second", payload: `{"b":2}`, status: "pending"}
	b.id = checkEnqueued(t, "enqueue b", e.enqueue(t, n, q, b.key, b.payload), q, false, b)

	_, r, _ := checkJobAnswer(t, "claim a", e.claim(t, n, q, `{"visibility_timeout":900}`), q,
		jobWant{id: a.id, key: a.key, payload: a.payload, status: "claimed", attempts: 1, receipt: true, visibility: 900})

	// Bad delays are refused, naming the field, and change nothing.
	for _, bad := range []string{`901`, `-1`, `"5"`, `1.5`} {
		body := fmt.Sprintf(`{"receipt":%q,"delay_seconds":%s}`, r, bad)
		expectError(t, "release with delay_seconds "+bad, e.jobAction(t, n, q, a.id, "release", body), http.StatusBadRequest, "delay_seconds", nil)
	}
	for _, action := range []string{"ack", "renew"} {
		body := fmt.Sprintf(`{"receipt":%q,"delay_seconds":5}`, r)
		expectError(t, action+" with delay_seconds", e.jobAction(t, n, q, a.id, action, body), http.StatusBadRequest, "delay_seconds", nil)
	}
	const delay = 5
	after := a
	after.attempts, after.delay = 1, delay
	checkJobAnswer(t, "release a with a delay", e.jobAction(t, n, q, a.id, "release", fmt.Sprintf(`{"receipt":%q,"delay_seconds":%d}`, r, delay)), q, after)
	released := time.Now()

	// Within the delay, claims pass a by.
	checkJobAnswer(t, "claim during the delay", e.claim(t, n, q, `{"visibility_timeout":900}`), q,
		jobWant{id: b.id, key: b.key, payload: b.payload, status: "claimed", attempts: 1, receipt: true, visibility: 900})
	checkEmptyClaim(t, "second claim during the delay", e.claim(t, n, q, `{}`))
	checkJobAnswer(t, "read a during the delay", e.readJob(t, n, q, a.id), q, after)
	e.expectCounts(t, n, q, "during the delay", counts{pending: 1, claimed: 1, total: 2})

	// Once it is over (whole seconds, so up to a second later), a is
	// claimed again.
	var claimed *answer
	harness.Eventually(t, (delay+3)*time.Second, "the delayed job to be claimable", func() error {
		claimed = e.claim(t, n, q, `{"visibility_timeout":30}`)
		if claimed.Status != http.StatusOK || claimed.m["job"] == nil {
			return fmt.Errorf("claim: %s", claimed)
		}
		return nil
	})
	if time.Since(released) < (delay-1)*time.Second {
		t.Errorf("the delayed job was claimed %v after its release with delay_seconds %d", time.Since(released), delay)
	}
	_, r, _ = checkJobAnswer(t, "claim after the delay", claimed, q,
		jobWant{id: a.id, key: a.key, payload: a.payload, status: "claimed", attempts: 2, receipt: true, visibility: 30})

	// Retry: only a failed job, only with the write token.
	retry := func(tok, job, body string) *answer {
		t.Helper()
		c := call{method: http.MethodPost, path: "/queue/" + q.id + "/jobs/" + job + "/retry", token: tok, raw: []byte(body)}
		if body == "" {
			c.raw, c.ct = nil, "-"
		}
		return e.do(t, n, c)
	}
	notFailed := func(what string, ans *answer, status string) {
		t.Helper()
		if expectError(t, what, ans, http.StatusConflict, "", []string{"job_status"}, "failed", status) {
			if s := str(t, what, ans.m, "job_status"); s != status {
				t.Errorf("%s: job_status %q, want %q", what, s, status)
			}
		}
	}
	notFailed("retry a claimed job", retry(q.write, a.id, `{}`), "claimed")
	for attempt := int64(2); attempt <= 5; attempt++ {
		want := jobWant{id: a.id, key: a.key, payload: a.payload, status: "pending", attempts: attempt}
		if attempt == 5 {
			want.status = "failed"
		}
		checkJobAnswer(t, fmt.Sprintf("release attempt %d", attempt), e.jobAction(t, n, q, a.id, "release", receiptBody(r)), q, want)
		if attempt < 5 {
			_, r, _ = checkJobAnswer(t, fmt.Sprintf("claim attempt %d", attempt+1), e.claim(t, n, q, `{"visibility_timeout":30}`), q,
				jobWant{id: a.id, key: a.key, payload: a.payload, status: "claimed", attempts: attempt + 1, receipt: true, visibility: 30})
		}
	}
	checkEmptyClaim(t, "claim with a failed", e.claim(t, n, q, `{}`))
	for _, tok := range []string{q.worker, q.read} {
		expectError(t, "retry with another role's token", retry(tok, a.id, `{}`), http.StatusForbidden, "", nil)
	}
	expectError(t, "retry with a body", retry(q.write, a.id, `{"force":true}`), http.StatusBadRequest, "force", nil)
	expectError(t, "retry of an unknown job", retry(q.write, randHex(t, 32), ``), http.StatusNotFound, "", nil)
	checkJobAnswer(t, "read the failed job", e.readJob(t, n, q, a.id), q, jobWant{id: a.id, key: a.key, payload: a.payload, status: "failed", attempts: 5})

	checkJobAnswer(t, "retry the failed job", retry(q.write, a.id, ``), q, jobWant{id: a.id, key: a.key, payload: a.payload, status: "pending", attempts: 0})
	notFailed("retry it again", retry(q.write, a.id, `{}`), "pending")
	e.expectCounts(t, n, q, "after the retry", counts{pending: 1, claimed: 1, total: 2})
	_, r, _ = checkJobAnswer(t, "claim after the retry", e.claim(t, n, q, `{"visibility_timeout":30}`), q,
		jobWant{id: a.id, key: a.key, payload: a.payload, status: "claimed", attempts: 1, receipt: true, visibility: 30})
	checkJobAnswer(t, "ack after the retry", e.jobAction(t, n, q, a.id, "ack", receiptBody(r)), q,
		jobWant{id: a.id, key: a.key, payload: a.payload, status: "completed", attempts: 1})
	notFailed("retry a completed job", retry(q.write, a.id, `{}`), "completed")
}
