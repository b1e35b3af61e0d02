package fsm

import (
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/secret"
)

func (h *harness) releaseAfter(q testQueue, job, receipt string, delay int64) *QueueResult {
	h.t.Helper()
	return h.queue(&JobRelease{Now: h.now, Queue: q.id, Token: q.worker, Job: jobID(job), Receipt: secret.ReceiptHash(receipt), DelaySeconds: delay})
}

func (h *harness) retry(q testQueue, tok secret.Hash, job string) *QueueResult {
	h.t.Helper()
	return h.queue(&JobRetry{Now: h.now, Queue: q.id, Token: tok, Job: jobID(job)})
}

func TestDelayedRelease(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	h.enqueue(q, "j1", "k1", `1`)
	h.enqueue(q, "j2", "k2", `2`)

	wantOutcome(t, h.claim(q, "r1", 60), JobClaimed)
	for _, bad := range []int64{-1, MaxReleaseDelaySeconds + 1} {
		before := h.f.StateHash()
		wantOutcome(t, h.releaseAfter(q, "j1", "r1", bad), QueueInvalid)
		if h.f.StateHash() != before {
			t.Fatalf("an invalid delay %d changed the state", bad)
		}
	}
	r := h.releaseAfter(q, "j1", "r1", 120)
	wantOutcome(t, r, JobReleased)
	if r.Job.Status != JobPending || r.Job.AvailableAt != h.now+120*sec || r.Job.VisibleAt != 0 {
		t.Fatalf("released job %+v", *r.Job)
	}
	// Within the delay the job is skipped: the next pending job is claimed,
	// then nothing.
	r = h.claim(q, "r2", 900)
	if r.Outcome != JobClaimed || r.Job.ID != jobID("j2") {
		t.Fatalf("claim during the delay: %+v", r)
	}
	wantOutcome(t, h.claim(q, "r3", 60), QueueEmpty)
	// It counts as pending and reads show when it may be claimed.
	if c := h.f.ReadQueue(q.id, q.read, h.now).Queue.Counts; c != (Counts{Pending: 1, Claimed: 1, Total: 2}) {
		t.Fatalf("counts during the delay %+v", c)
	}
	if v := h.f.ReadJob(q.id, q.read, jobID("j1"), h.now).Job; v.AvailableAt != h.now+120*sec {
		t.Fatalf("read during the delay %+v", *v)
	}
	// Through a snapshot the delay holds.
	g := snapshotRestore(t, h.f)
	h.advance(120*time.Second - time.Millisecond)
	wantOutcome(t, h.claim(q, "r4", 60), QueueEmpty)
	h.advance(time.Millisecond)
	if v := h.f.ReadJob(q.id, q.read, jobID("j1"), h.now).Job; v.AvailableAt != 0 {
		t.Fatalf("read after the delay %+v", *v)
	}
	r = h.claim(q, "r5", 60)
	if r.Outcome != JobClaimed || r.Job.ID != jobID("j1") || r.Job.Attempts != 2 {
		t.Fatalf("claim after the delay: %+v", r)
	}
	h.f = g // the restored replica behaves alike
	r = h.claim(q, "r5", 60)
	if r.Outcome != JobClaimed || r.Job.ID != jobID("j1") {
		t.Fatalf("restored replica: %+v", r)
	}

	// A delay never reaches past the queue's deadline; a release of the
	// last attempt fails the job whatever the delay.
	h2 := newHarness(t)
	h2.createQueue(q, "c")
	h2.enqueue(q, "j", "k", `1`)
	h2.now = t0 + day - 100*sec
	h2.claim(q, "r1", 30)
	if r := h2.releaseAfter(q, "j", "r1", 900); r.Job.AvailableAt != t0+day {
		t.Fatalf("delay not capped at the deadline: %+v", *r.Job)
	}
	s := newHarness(t)
	s.createQueue(q, "c")
	s.enqueue(q, "j", "k", `1`)
	for i := 0; i < 4; i++ {
		s.claim(q, "r", 30)
		s.advance(30 * time.Second)
	}
	s.claim(q, "last", 30)
	if r := s.releaseAfter(q, "j", "last", 60); r.Job.Status != JobFailed || r.Job.AvailableAt != 0 {
		t.Fatalf("release of the last attempt with a delay: %+v", *r.Job)
	}
}

func TestRetryFailedJob(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	h.enqueue(q, "j", "k", `1`)
	h.enqueue(q, "other", "k2", `2`)

	// Only a failed job: a pending, claimed or completed one is refused
	// with its status and nothing changes.
	wantNotFailed := func(status JobStatus) {
		t.Helper()
		before := h.f.StateHash()
		r := h.retry(q, q.write, "j")
		wantOutcome(t, r, JobNotFailed)
		if r.Job == nil || r.Job.Status != status {
			t.Fatalf("refusal shows %+v, want status %v", r.Job, status)
		}
		if h.f.StateHash() != before {
			t.Fatal("a refused retry changed the state")
		}
	}
	wantNotFailed(JobPending)
	wantOutcome(t, h.retry(q, q.worker, "j"), QueueForbidden)
	wantOutcome(t, h.retry(q, q.write, "nope"), JobNotFound)
	wantOutcome(t, h.retry(mkQueue("gone"), q.write, "j"), QueueNotFound)

	for i := 0; i < 5; i++ {
		r := h.claim(q, "r", 30)
		if r.Job.ID != jobID("j") {
			h.ack(q, "other", "r")
			r = h.claim(q, "r", 30)
		}
		wantNotFailed(JobClaimedStatus)
		h.advance(30 * time.Second)
	}
	// The last window ended: effectively failed, before any sweep.
	if v := h.f.ReadJob(q.id, q.read, jobID("j"), h.now).Job; v.Status != JobFailed {
		t.Fatalf("job %+v", *v)
	}
	r := h.retry(q, q.write, "j")
	wantOutcome(t, r, JobRetried)
	if r.Job.Status != JobPending || r.Job.Attempts != 0 || r.Job.UpdatedAt != h.now {
		t.Fatalf("retried job %+v", *r.Job)
	}
	// No claim timer is left behind for the ended claim; a sweep finds nothing.
	if s := h.sweep(100); s.ClaimsReturned != 0 || s.JobsFailed != 0 {
		t.Fatalf("sweep after retry %+v", s)
	}
	wantNotFailed(JobPending)
	// The old receipt is of no use; the job is claimable with all attempts.
	if r := h.ack(q, "j", "r"); r.Outcome != ReceiptRejected {
		t.Fatalf("old receipt after retry: %+v", r)
	}
	r = h.claim(q, "again", 30)
	if r.Outcome != JobClaimed || r.Job.ID != jobID("j") || r.Job.Attempts != 1 {
		t.Fatalf("claim after retry %+v", r)
	}
	wantOutcome(t, h.ack(q, "j", "again"), JobAcked)
	wantNotFailed(JobCompleted)

	// A failed job at the head of the queue (counted as settled) is found
	// again by claims after its retry, also on a replica restored from a
	// snapshot.
	h2 := newHarness(t)
	h2.createQueue(q, "c")
	h2.enqueue(q, "j", "k", `1`)
	for i := 0; i < 5; i++ {
		h2.claim(q, "r", 30)
		wantOutcome(t, h2.releaseJob(q, "j", "r"), JobReleased)
	}
	wantOutcome(t, h2.claim(q, "x", 30), QueueEmpty)
	wantOutcome(t, h2.retry(q, q.write, "j"), JobRetried)
	g := snapshotRestore(t, h2.f)
	if r := h2.claim(q, "y", 30); r.Outcome != JobClaimed || r.Job.Attempts != 1 {
		t.Fatalf("claim after retry of a settled job %+v", r)
	}
	h2.f = g
	if r := h2.claim(q, "y", 30); r.Outcome != JobClaimed || r.Job.Attempts != 1 {
		t.Fatalf("restored replica: %+v", r)
	}
}

func TestReleaseVersion1EntryStillDecodes(t *testing.T) {
	c := &JobRelease{Now: 5, Queue: jobID("q"), Token: secret.RoleTokenHash("t"), Job: jobID("j"), Receipt: secret.ReceiptHash("r")}
	b := Encode(c)
	if b[1] != 2 {
		t.Fatalf("release written with body version %d, want 2", b[1])
	}
	// A version-1 entry is the version-2 body without its last field.
	v1 := append([]byte{byte(TypeJobRelease), 1}, b[2:len(b)-1]...)
	d, err := Decode(v1)
	if err != nil {
		t.Fatalf("decode a version-1 release: %v", err)
	}
	if *d.(*JobRelease) != *c {
		t.Fatalf("version-1 release decoded as %+v", d)
	}
	if _, err := Decode(append([]byte{byte(TypeJobRelease), 3}, b[2:]...)); err == nil {
		t.Fatal("a release with body version 3 decoded")
	}
}
