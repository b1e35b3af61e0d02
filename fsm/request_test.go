package fsm

import (
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/secret"
)

func (h *harness) claimByRequest(q testQueue, receipt string, vis int64) *QueueResult {
	h.t.Helper()
	return h.queue(&JobClaim{Now: h.now, Queue: q.id, Token: q.worker, Receipt: secret.ReceiptHash(receipt), VisibilitySeconds: vis, ByRequest: true})
}

func TestClaimByRequestAnswersTheActiveClaimAgain(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	h.createQueue(q, "c")
	h.enqueue(q, "j1", "k1", `1`)
	h.enqueue(q, "j2", "k2", `2`)

	first := h.claimByRequest(q, "req-a", 60)
	wantOutcome(t, first, JobClaimed)
	h.advance(10 * time.Second)
	again := h.claimByRequest(q, "req-a", 300)
	wantOutcome(t, again, JobClaimed)
	wantJob(t, again.Job, *first.Job) // same job, same attempt, same window
	if c := h.f.ReadQueue(q.id, q.read, h.now).Queue.Counts; c != (Counts{Pending: 1, Claimed: 1, Total: 2}) {
		t.Fatalf("a repeated claim changed the counts: %+v", c)
	}
	// Without ByRequest the same receipt is an ordinary claim.
	if r := h.claim(q, "req-a", 60); r.Outcome != JobClaimed || r.Job.ID != jobID("j2") {
		t.Fatalf("claim without ByRequest: %+v", r)
	}
	// Another request id claims another job: here none is left.
	wantOutcome(t, h.claimByRequest(q, "req-b", 60), QueueEmpty)
	// Once j1 is acked, its claim is no longer active: the repeat finds the
	// only active claim with that receipt, j2's.
	wantOutcome(t, h.ack(q, "j1", "req-a"), JobAcked)
	if r := h.claimByRequest(q, "req-a", 60); r.Outcome != JobClaimed || r.Job.ID != jobID("j2") {
		t.Fatalf("repeat after the ack: %+v", r)
	}

	// After the window ends, the repeat is a new claim: a new attempt.
	h2 := newHarness(t)
	h2.createQueue(q, "c")
	h2.enqueue(q, "j", "k", `1`)
	wantOutcome(t, h2.claimByRequest(q, "req", 30), JobClaimed)
	h2.advance(30 * time.Second)
	if r := h2.claimByRequest(q, "req", 30); r.Outcome != JobClaimed || r.Job.Attempts != 2 {
		t.Fatalf("repeat after the window: %+v", r)
	}
	// Through a snapshot the active claim is found alike.
	g := snapshotRestore(t, h2.f)
	if r := h2.claimByRequest(q, "req", 30); r.Outcome != JobClaimed || r.Job.Attempts != 2 {
		t.Fatalf("repeat: %+v", r)
	}
	h2.f = g
	if r := h2.claimByRequest(q, "req", 30); r.Outcome != JobClaimed || r.Job.Attempts != 2 {
		t.Fatalf("repeat on the restored replica: %+v", r)
	}
}

func TestClaimVersion1EntryStillDecodes(t *testing.T) {
	c := &JobClaim{Now: 5, Queue: jobID("q"), Token: secret.RoleTokenHash("t"), Receipt: secret.ReceiptHash("r"), VisibilitySeconds: 60}
	b := Encode(c)
	v1 := append([]byte{byte(TypeJobClaim), 1}, b[2:len(b)-1]...) // without ByRequest
	d, err := Decode(v1)
	if err != nil {
		t.Fatalf("decode a version-1 claim: %v", err)
	}
	if *d.(*JobClaim) != *c {
		t.Fatalf("version-1 claim decoded as %+v", d)
	}
}
