package fsm

import (
	"fmt"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/secret"
)

func wantOutcome(t *testing.T, r *QueueResult, o QueueOutcome) {
	t.Helper()
	if r.Outcome != o {
		t.Fatalf("outcome %v, want %v (%+v)", r.Outcome, o, *r)
	}
}

func wantJob(t *testing.T, got *JobView, want JobView) {
	t.Helper()
	if got == nil {
		t.Fatal("no job in result")
	}
	if got.ID != want.ID || got.Key != want.Key || string(got.Payload) != string(want.Payload) || got.Status != want.Status ||
		got.Attempts != want.Attempts || got.CreatedAt != want.CreatedAt || got.UpdatedAt != want.UpdatedAt ||
		got.VisibleAt != want.VisibleAt || got.CompletedAt != want.CompletedAt || got.QueueExpiresAt != want.QueueExpiresAt {
		t.Fatalf("job:\n got %+v\nwant %+v", *got, want)
	}
}

func TestQueueCreate(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q1")
	r := h.createQueue(q, "10.0.0.1")
	wantOutcome(t, r, QueueCreated)
	if r.Queue.ID != q.id || r.Queue.CreatedAt != t0 || r.Queue.ExpiresAt != t0+day || r.Queue.Counts != (Counts{}) || r.Job != nil {
		t.Fatalf("created view: %+v", r.Queue)
	}
	wantOutcome(t, h.createQueue(q, "10.0.0.2"), QueueIDTaken)
}

func TestQueueCreationLimitPerClient(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < 20; i++ {
		wantOutcome(t, h.createQueue(mkQueue(fmt.Sprintf("a%d", i)), "10.0.0.1"), QueueCreated)
		h.advance(time.Minute)
	}
	r := h.createQueue(mkQueue("a20"), "10.0.0.1")
	wantOutcome(t, r, QueueRateLimited)
	if want := int64(86400 - 20*60); r.RetryAfterSeconds != want {
		t.Fatalf("retry after %d, want %d", r.RetryAfterSeconds, want)
	}
	wantOutcome(t, h.createQueue(mkQueue("b0"), "10.0.0.2"), QueueCreated)
	// The first creation leaves the window 24 h after it was made.
	h.now = t0 + day
	wantOutcome(t, h.createQueue(mkQueue("a20"), "10.0.0.1"), QueueCreated)
	wantOutcome(t, h.createQueue(mkQueue("a21"), "10.0.0.1"), QueueRateLimited)
	// Sweeps empty the records once every creation is out of the window.
	h.now = t0 + 3*day
	pruned := 0
	for r := h.sweep(1000); ; r = h.sweep(1000) {
		pruned += r.ClientsPruned
		if !r.More {
			break
		}
	}
	if pruned != 2 || int(h.f.st.counts.clients) != 0 {
		t.Fatalf("pruned %d client records, %d left", pruned, int(h.f.st.counts.clients))
	}
}

func TestEnqueueRules(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	exp := t0 + day

	r := h.enqueue(q, "j1", "report:42", `{"report_id":42}`)
	wantOutcome(t, r, JobCreated)
	wantJob(t, r.Job, JobView{ID: jobID("j1"), Key: "report:42", Payload: []byte(`{"report_id":42}`), Status: JobPending, CreatedAt: t0, UpdatedAt: t0, QueueExpiresAt: exp})
	if r.Queue.Counts != (Counts{Total: 1}) {
		t.Fatalf("an enqueue's counts %+v: only the total, job answers show no counts", r.Queue.Counts)
	}
	if c := h.f.ReadQueue(q.id, q.read, h.now).Queue.Counts; c != (Counts{Pending: 1, Total: 1}) {
		t.Fatalf("read counts %+v", c)
	}

	h.advance(time.Second)
	r = h.enqueue(q, "j-retry", "report:42", `{"report_id":42}`)
	wantOutcome(t, r, JobDeduplicated)
	wantJob(t, r.Job, JobView{ID: jobID("j1"), Key: "report:42", Payload: []byte(`{"report_id":42}`), Status: JobPending, CreatedAt: t0, UpdatedAt: t0, QueueExpiresAt: exp})

	wantOutcome(t, h.enqueue(q, "j2", "report:42", `{"report_id":43}`), JobKeyConflict)
	wantOutcome(t, h.enqueue(q, "j1", "other", `null`), JobIDTaken)
	wantOutcome(t, h.enqueue(q, "j3", "-bad", `null`), QueueInvalid)
	wantOutcome(t, h.queue(&JobEnqueue{Now: h.now, Queue: q.id, Token: q.write, Job: jobID("j4"), Key: "big", Payload: make([]byte, 16385)}), QueueInvalid)
	wantOutcome(t, h.queue(&JobEnqueue{Now: h.now, Queue: q.id, Token: q.worker, Job: jobID("j5"), Key: "k", Payload: []byte(`1`)}), QueueForbidden)
	wantOutcome(t, h.queue(&JobEnqueue{Now: h.now, Queue: q.id, Token: q.read, Job: jobID("j5"), Key: "k", Payload: []byte(`1`)}), QueueForbidden)
	wantOutcome(t, h.enqueue(mkQueue("nope"), "j6", "k", `1`), QueueNotFound)

	// A job of exactly 16384 bytes is accepted; keys at the 64-character bound too.
	wantOutcome(t, h.queue(&JobEnqueue{Now: h.now, Queue: q.id, Token: q.write, Job: jobID("j7"), Key: "edge", Payload: make([]byte, 16384)}), JobCreated)
	long := "a234567890123456789012345678901234567890123456789012345678901234"
	wantOutcome(t, h.enqueue(q, "j8", long, `1`), JobCreated)
	wantOutcome(t, h.enqueue(q, "j9", long+"5", `1`), QueueInvalid)
}

func TestJobLimit(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	for i := 0; i < 100; i++ {
		wantOutcome(t, h.enqueue(q, fmt.Sprintf("j%d", i), fmt.Sprintf("k%d", i), `1`), JobCreated)
	}
	// Completed jobs still count: the limit is over the queue's lifetime.
	r := h.claim(q, "r", 60)
	wantOutcome(t, r, JobClaimed)
	wantOutcome(t, h.ack(q, "j0", "r"), JobAcked)
	r = h.enqueue(q, "j100", "k100", `1`)
	wantOutcome(t, r, JobLimitReached)
	if r.Queue.Counts.Total != 100 {
		t.Fatalf("total %d", r.Queue.Counts.Total)
	}
	// Deduplication still answers for existing keys.
	wantOutcome(t, h.enqueue(q, "j101", "k5", `1`), JobDeduplicated)
}

func TestClaimAckReleaseRenew(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	exp := t0 + day
	h.enqueue(q, "j1", "first", `"a"`)
	h.enqueue(q, "j2", "second", `"b"`)

	h.advance(time.Second)
	r := h.claim(q, "r1", 60)
	wantOutcome(t, r, JobClaimed)
	claimedAt := t0 + sec
	wantJob(t, r.Job, JobView{ID: jobID("j1"), Key: "first", Payload: []byte(`"a"`), Status: JobClaimedStatus, Attempts: 1, CreatedAt: t0, UpdatedAt: claimedAt, VisibleAt: claimedAt + 60*sec, QueueExpiresAt: exp})
	if c := h.f.ReadQueue(q.id, q.read, h.now).Queue.Counts; c != (Counts{Pending: 1, Claimed: 1, Total: 2}) {
		t.Fatalf("counts %+v", c)
	}

	r = h.claim(q, "r2", 900)
	wantOutcome(t, r, JobClaimed)
	if r.Job.ID != jobID("j2") || r.Job.VisibleAt != claimedAt+900*sec {
		t.Fatalf("second claim %+v", *r.Job)
	}
	wantOutcome(t, h.claim(q, "r3", 60), QueueEmpty)

	// Renew keeps the attempt and moves the window.
	h.advance(30 * time.Second)
	r = h.renewJob(q, "j1", "r1", 120)
	wantOutcome(t, r, JobRenewed)
	wantJob(t, r.Job, JobView{ID: jobID("j1"), Key: "first", Payload: []byte(`"a"`), Status: JobClaimedStatus, Attempts: 1, CreatedAt: t0, UpdatedAt: h.now, VisibleAt: h.now + 120*sec, QueueExpiresAt: exp})

	// Ack completes; a repeated ack with the same receipt succeeds again.
	r = h.ack(q, "j1", "r1")
	wantOutcome(t, r, JobAcked)
	ackAt := h.now
	wantJob(t, r.Job, JobView{ID: jobID("j1"), Key: "first", Payload: []byte(`"a"`), Status: JobCompleted, Attempts: 1, CreatedAt: t0, UpdatedAt: ackAt, CompletedAt: ackAt, QueueExpiresAt: exp})
	h.advance(time.Hour)
	r = h.ack(q, "j1", "r1")
	wantOutcome(t, r, JobAcked)
	if r.Job.CompletedAt != ackAt {
		t.Fatal("a repeated ack changed the completion time")
	}
	for _, rr := range []*QueueResult{h.releaseJob(q, "j1", "r1"), h.renewJob(q, "j1", "r1", 60)} {
		wantOutcome(t, rr, ReceiptRejected)
		if rr.Reason != ReceiptJobCompleted {
			t.Fatalf("reason %v", rr.Reason)
		}
	}
	r = h.ack(q, "j1", "r2")
	wantOutcome(t, r, ReceiptRejected)
	if r.Reason != ReceiptMismatch {
		t.Fatalf("reason %v", r.Reason)
	}

	// Wrong token, unknown job.
	wantOutcome(t, h.queue(&JobAck{Now: h.now, Queue: q.id, Token: q.write, Job: jobID("j2"), Receipt: secret.ReceiptHash("r2")}), QueueForbidden)
	wantOutcome(t, h.ack(q, "nope", "r2"), JobNotFound)
	wantOutcome(t, h.claim(mkQueue("other"), "r9", 60), QueueNotFound)
	wantOutcome(t, h.queue(&JobClaim{Now: h.now, Queue: q.id, Token: q.read, Receipt: secret.ReceiptHash("x"), VisibilitySeconds: 60}), QueueForbidden)
	wantOutcome(t, h.claim(q, "r9", 29), QueueInvalid)
	wantOutcome(t, h.claim(q, "r9", 901), QueueInvalid)
	wantOutcome(t, h.renewJob(q, "j2", "r2", 901), QueueInvalid)
}

func TestReleaseAndRedelivery(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	h.enqueue(q, "j", "k", `{}`)

	wantOutcome(t, h.claim(q, "r1", 60), JobClaimed)
	r := h.releaseJob(q, "j", "r1")
	wantOutcome(t, r, JobReleased)
	if r.Job.Status != JobPending || r.Job.Attempts != 1 || r.Job.VisibleAt != 0 {
		t.Fatalf("released job %+v", *r.Job)
	}
	// The released receipt is no longer valid.
	r = h.releaseJob(q, "j", "r1")
	wantOutcome(t, r, ReceiptRejected)
	if r.Reason != ReceiptExpired {
		t.Fatalf("reason %v", r.Reason)
	}
	r = h.claim(q, "r2", 60)
	wantOutcome(t, r, JobClaimed)
	if r.Job.Attempts != 2 {
		t.Fatalf("attempts %d", r.Job.Attempts)
	}
	// The first receipt is now superseded.
	r = h.ack(q, "j", "r1")
	wantOutcome(t, r, ReceiptRejected)
	if r.Reason != ReceiptMismatch {
		t.Fatalf("reason %v", r.Reason)
	}
	// After its window the claim is rejected as expired and the job is claimable.
	h.advance(60 * time.Second)
	r = h.ack(q, "j", "r2")
	wantOutcome(t, r, ReceiptRejected)
	if r.Reason != ReceiptExpired || r.Job.Status != JobPending {
		t.Fatalf("reason %v status %v", r.Reason, r.Job.Status)
	}
	read := h.f.ReadJob(q.id, q.read, jobID("j"), h.now)
	if read.Outcome != QueueFound || read.Job.Status != JobPending || read.Job.Attempts != 2 {
		t.Fatalf("read after expiry: %+v", read)
	}
	r = h.claim(q, "r3", 60)
	wantOutcome(t, r, JobClaimed)
	if r.Job.Attempts != 3 {
		t.Fatalf("attempts %d", r.Job.Attempts)
	}
}

func TestFiveAttemptsThenFailed(t *testing.T) {
	for _, how := range []string{"expire", "release", "sweep"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t)
			q := mkQueue("q")
			h.createQueue(q, "c")
			h.enqueue(q, "j", "k", `1`)
			for attempt := int64(1); attempt <= 5; attempt++ {
				receipt := fmt.Sprintf("r%d", attempt)
				r := h.claim(q, receipt, 30)
				wantOutcome(t, r, JobClaimed)
				if r.Job.Attempts != attempt {
					t.Fatalf("attempt %d, want %d", r.Job.Attempts, attempt)
				}
				switch how {
				case "expire":
					h.advance(30 * time.Second)
				case "release":
					wantOutcome(t, h.releaseJob(q, "j", receipt), JobReleased)
				case "sweep":
					h.advance(30 * time.Second)
					s := h.sweep(100)
					if attempt < 5 && s.ClaimsReturned != 1 || attempt == 5 && s.JobsFailed != 1 {
						t.Fatalf("attempt %d sweep: %+v", attempt, s)
					}
				}
			}
			wantOutcome(t, h.claim(q, "r6", 30), QueueEmpty)
			read := h.f.ReadQueue(q.id, q.read, h.now)
			if read.Queue.Counts != (Counts{Failed: 1, Total: 1}) {
				t.Fatalf("counts %+v", read.Queue.Counts)
			}
			job := h.f.ReadJob(q.id, q.read, jobID("j"), h.now)
			if job.Job.Status != JobFailed || job.Job.Attempts != 5 {
				t.Fatalf("job %+v", *job.Job)
			}
		})
	}
}

func TestQueueDeadline(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	exp := t0 + day
	h.enqueue(q, "j1", "k1", `1`)
	h.enqueue(q, "j2", "k2", `2`)

	// A claim near the end is capped at the queue's deadline; so is renewal.
	h.now = exp - 45*sec
	r := h.claim(q, "r1", 60)
	if r.Job.VisibleAt != exp {
		t.Fatalf("visible at %d, want capped at %d", r.Job.VisibleAt, exp)
	}
	h.claim(q, "r2", 30)
	h.now = exp - 20*sec
	r = h.renewJob(q, "j2", "r2", 900)
	if r.Job.VisibleAt != exp || r.Job.QueueExpiresAt != exp {
		t.Fatalf("renewed %+v", *r.Job)
	}
	if at, _ := h.f.NextDeadline(); at != exp {
		t.Fatalf("next deadline %d, want %d", at, exp)
	}
	// Nothing extended the deadline; at it the queue is gone for everyone.
	h.now = exp
	wantOutcome(t, h.ack(q, "j1", "r1"), QueueNotFound)
	wantOutcome(t, h.enqueue(q, "j3", "k3", `3`), QueueNotFound)
	wantOutcome(t, h.claim(q, "r3", 60), QueueNotFound)
	if o := h.f.ReadQueue(q.id, q.read, h.now).Outcome; o != QueueNotFound {
		t.Fatalf("read after deadline: %v", o)
	}
	// Reads judge by the later of the state clock and the node clock.
	h2 := newHarness(t)
	h2.createQueue(q, "c")
	if o := h2.f.ReadQueue(q.id, q.read, exp).Outcome; o != QueueNotFound {
		t.Fatalf("read with the node clock past the deadline: %v", o)
	}
	if o := h2.f.ReadQueue(q.id, q.read, t0-day).Outcome; o != QueueFound {
		t.Fatalf("read with a lagging node clock: %v", o)
	}

	s := h.sweep(1000)
	if s.QueuesRemoved != 1 || s.More {
		t.Fatalf("sweep %+v", s)
	}
	// The creator's record leaves the window at the same instant.
	if _, armed := h.f.NextDeadline(); s.ClientsPruned != 1 || h.f.st.counts.queues != 0 || armed {
		t.Fatalf("sweep %+v left queues %d, a timer armed: %v", s, h.f.st.counts.queues, armed)
	}
}

func TestReads(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	h.enqueue(q, "j1", "k1", `{"a":1}`)
	h.enqueue(q, "j2", "k2", `2`)
	h.enqueue(q, "j3", "k3", `3`)
	h.claim(q, "r1", 60)
	h.ack(q, "j1", "r1")
	h.claim(q, "r2", 60)

	r := h.f.ReadQueue(q.id, q.read, h.now)
	if r.Outcome != QueueFound || r.Queue.Counts != (Counts{Pending: 1, Claimed: 1, Completed: 1, Total: 3}) ||
		r.Queue.CreatedAt != t0 || r.Queue.ExpiresAt != t0+day {
		t.Fatalf("queue read %+v", r)
	}
	// At a later node time the claim has lapsed.
	r = h.f.ReadQueue(q.id, q.read, h.now+61*sec)
	if r.Queue.Counts != (Counts{Pending: 2, Completed: 1, Total: 3}) {
		t.Fatalf("later counts %+v", r.Queue.Counts)
	}
	j := h.f.ReadJob(q.id, q.read, jobID("j1"), h.now)
	wantJob(t, j.Job, JobView{ID: jobID("j1"), Key: "k1", Payload: []byte(`{"a":1}`), Status: JobCompleted, Attempts: 1, CreatedAt: t0, UpdatedAt: t0, CompletedAt: t0, QueueExpiresAt: t0 + day})
	for _, tok := range []secret.Hash{q.write, q.worker, secret.RoleTokenHash("nope")} {
		if o := h.f.ReadQueue(q.id, tok, h.now).Outcome; o != QueueForbidden {
			t.Fatalf("read with a non-read token: %v", o)
		}
	}
	if o := h.f.ReadJob(q.id, q.read, jobID("none"), h.now).Outcome; o != JobNotFound {
		t.Fatalf("unknown job: %v", o)
	}
	if o := h.f.Authorize(q.id, RoleWorker, q.worker, h.now); o != 0 {
		t.Fatalf("Authorize worker: %v", o)
	}
	if o := h.f.Authorize(q.id, RoleWorker, q.write, h.now); o != QueueForbidden {
		t.Fatalf("Authorize with the write token: %v", o)
	}
}

func TestSettingsChangeOnlyByCommand(t *testing.T) {
	h := newHarness(t)
	s := DefaultSettings()
	s.VisibilityMinSeconds = 1
	s.QueueMaxJobs = 2
	r := h.apply(&SetSettings{Now: h.now, Patch: PatchOf(s)}).(*SettingsResult)
	if !r.Applied || h.f.Settings() != s {
		t.Fatalf("settings not applied: %+v", r)
	}
	q := mkQueue("q")
	h.createQueue(q, "c")
	h.enqueue(q, "a", "a", `1`)
	h.enqueue(q, "b", "b", `1`)
	wantOutcome(t, h.enqueue(q, "c", "c", `1`), JobLimitReached)
	wantOutcome(t, h.claim(q, "r", 1), JobClaimed)

	tooLong := int64(1000)
	r = h.apply(&SetSettings{Now: h.now, Patch: SettingsPatch{VisibilityDefaultSeconds: &tooLong}}).(*SettingsResult)
	if r.Applied || r.Error == "" || h.f.Settings() != s {
		t.Fatalf("invalid settings applied: %+v", r)
	}
	if DefaultSettings().Validate() != nil {
		t.Fatal("default settings do not validate")
	}
	// Patches naming different settings compose instead of undoing each other.
	jobs, attempts := int64(7), int64(3)
	h.apply(&SetSettings{Now: h.now, Patch: SettingsPatch{QueueMaxJobs: &jobs}})
	h.apply(&SetSettings{Now: h.now, Patch: SettingsPatch{QueueMaxAttempts: &attempts}})
	if got := h.f.Settings(); got.QueueMaxJobs != 7 || got.QueueMaxAttempts != 3 || got.VisibilityMinSeconds != 1 {
		t.Fatalf("patches did not compose: %+v", got)
	}
	if (SettingsPatch{}).Empty() != true || PatchOf(s).Empty() {
		t.Fatal("Empty is wrong")
	}
	if _, err := Decode([]byte{byte(TypeSetSettings), 1, 0, 0x80, 0x80, 0x01}); err == nil {
		t.Fatal("a patch naming an unknown setting decoded")
	}
}
