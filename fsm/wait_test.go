package fsm

import (
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/secret"
)

func claimOf(q testQueue) *JobClaim { return &JobClaim{Queue: q.id, Receipt: secret.ReceiptHash("w")} }

func TestClaimWaitFollowsClaimability(t *testing.T) {
	h := newHarness(t)
	q := mkQueue("q")
	if ready, _ := h.f.ClaimWait(claimOf(q), h.now); !ready {
		t.Fatal("no queue: a claim answers at once")
	}
	h.createQueue(q, "c")
	if ready, next := h.f.ClaimWait(claimOf(q), h.now); ready || next != t0+day {
		t.Fatalf("empty queue: ready %v next %d, want the deadline", ready, next)
	}
	h.enqueue(q, "j", "k", `1`)
	if ready, _ := h.f.ClaimWait(claimOf(q), h.now); !ready {
		t.Fatal("a pending job is claimable")
	}
	h.claim(q, "r", 60)
	if ready, next := h.f.ClaimWait(claimOf(q), h.now); ready || next != h.now+60*sec {
		t.Fatalf("claimed: ready %v next %d, want the window's end", ready, next)
	}
	if ready, _ := h.f.ClaimWait(claimOf(q), h.now+60*sec); !ready {
		t.Fatal("a claim whose window ended is claimable again")
	}
	h.releaseAfter(q, "j", "r", 120)
	if ready, next := h.f.ClaimWait(claimOf(q), h.now); ready || next != h.now+120*sec {
		t.Fatalf("released with a delay: ready %v next %d", ready, next)
	}
	// The last attempt's window ending fails the job: nothing to wait for
	// but the deadline.
	h.advance(120 * time.Second)
	for i := 0; i < 4; i++ {
		h.claim(q, "r", 30)
		h.advance(30 * time.Second)
	}
	if ready, next := h.f.ClaimWait(claimOf(q), h.now); ready || next != t0+day {
		t.Fatalf("failed job: ready %v next %d", ready, next)
	}
	if ready, _ := h.f.ClaimWait(claimOf(q), t0+day); !ready {
		t.Fatal("at the deadline a claim answers (not found)")
	}
	// A claim by request id whose claim is active is answered at once.
	h2 := newHarness(t)
	h2.createQueue(q, "c")
	h2.enqueue(q, "j", "k", `1`)
	h2.claimByRequest(q, "w", 60)
	byRequest := claimOf(q)
	byRequest.ByRequest = true
	if ready, _ := h2.f.ClaimWait(claimOf(q), h2.now); ready {
		t.Fatal("the only job is claimed: not ready")
	}
	if ready, _ := h2.f.ClaimWait(byRequest, h2.now); !ready {
		t.Fatal("a repeated claim by request id whose claim is active: ready")
	}
}

func TestAcquireWaitAnswersLikeAcquire(t *testing.T) {
	h := newHarness(t)
	ask := func(fp, owner string) *LeaseAcquire {
		return &LeaseAcquire{Lease: secret.LeaseID("ns_test", "k"), Fingerprint: secret.FingerprintHash("ns_test", "k", fp), Owner: secret.OwnerTokenHash(owner), TTLSeconds: 60}
	}
	if _, ready := h.f.AcquireWait(ask("f", "B"), h.now); !ready {
		t.Fatal("no record: ready")
	}
	g := h.acquire("k", "f", "A", 60)
	h.advance(10 * time.Second)
	held, ready := h.f.AcquireWait(ask("f", "B"), h.now)
	if ready || held.Outcome != LeaseHeld || held.LeaseExpiresAt != g.LeaseExpiresAt || held.RetryAfterSeconds != 50 || held.FencingToken != g.FencingToken {
		t.Fatalf("held: ready %v, %+v", ready, held)
	}
	// The probe's "held" is what an acquire answers.
	c := ask("f", "B")
	c.Now = h.now
	wantLease(t, h.lease(c), held)
	for name, c := range map[string]*LeaseAcquire{"another fingerprint": ask("other", "B"), "the holder's own request": ask("f", "A")} {
		if _, ready := h.f.AcquireWait(c, h.now); !ready {
			t.Errorf("%s: not ready, but an acquire answers at once", name)
		}
	}
	if _, ready := h.f.AcquireWait(ask("f", "B"), g.LeaseExpiresAt); !ready {
		t.Fatal("expired: ready")
	}
	h.complete("k", "A", `1`)
	if _, ready := h.f.AcquireWait(ask("f", "B"), h.now); !ready {
		t.Fatal("completed: ready (an acquire answers the result)")
	}
}
