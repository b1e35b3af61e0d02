//go:build unix

package fault

import (
	"math"
	"testing"
	"time"
)

// These tests feed the checkers small hand-made histories: each check must
// pass a correct history and fail the broken one it exists for.

// t0 is a whole second, so expiry timestamps are easy to compute.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC).UnixNano()

type histBuilder struct{ ops []Op }

// add appends an operation with call and ret in milliseconds after t0
// (ret < 0: the outcome is unknown).
func (h *histBuilder) add(proc int, f, key string, callMs, retMs int64, typ string, in, out any) {
	o := Op{Process: proc, Node: "n", F: f, Key: key, Call: t0 + callMs*1e6, Ret: math.MaxInt64, Type: typ, Input: in, Output: out, index: len(h.ops)}
	if retMs >= 0 {
		o.Ret = t0 + retMs*1e6
	}
	if typ == OK {
		o.Status = 200
	}
	h.ops = append(h.ops, o)
}

const ttl = int64(2 * time.Second)

// expTs is the lease_expires_at_timestamp of a lease granted at ms.
func expTs(ms int64) int64 { return (t0 + ms*1e6 + ttl) / 1e9 }

func (h *histBuilder) grant(proc int, key string, callMs, retMs int64, owner string, fence int64) {
	h.add(proc, fAcquire, key, callMs, retMs, OK, LeaseInput{Kind: fAcquire, TTL: ttl}, LeaseOutput{Status: stGranted, Owner: owner, Fence: fence, ExpTs: expTs(callMs)})
}

func (h *histBuilder) acquireSaw(proc int, key string, callMs, retMs int64, out LeaseOutput) {
	h.add(proc, fAcquire, key, callMs, retMs, OK, LeaseInput{Kind: fAcquire, TTL: ttl}, out)
}

func (h *histBuilder) owner(proc int, f, key string, callMs, retMs int64, owner string, fence int64, result string, out LeaseOutput) {
	in := LeaseInput{Kind: f, Owner: owner, OwnerFence: fence, Result: result}
	if f == fRenew {
		in.TTL = ttl
	}
	h.add(proc, f, key, callMs, retMs, OK, in, out)
}

func TestLeaseCheckersAcceptACorrectHistory(t *testing.T) {
	var h histBuilder
	h.grant(0, "k", 0, 10, "A", 1)
	h.acquireSaw(1, "k", 20, 30, LeaseOutput{Status: stHeld, Fence: 1, ExpTs: expTs(0)})
	h.owner(0, fRenew, "k", 500, 510, "A", 1, "", LeaseOutput{Status: stRenewed, Fence: 1, ExpTs: expTs(500)})
	h.owner(0, fRelease, "k", 600, 610, "A", 1, "", LeaseOutput{Status: stReleased, Fence: 1})
	h.grant(1, "k", 700, 710, "B", 2)
	h.owner(1, fComplete, "k", 800, 810, "B", 2, `{"r":1}`, LeaseOutput{Status: stCompleted, Fence: 2, Result: `{"r":1}`})
	h.acquireSaw(2, "k", 900, 910, LeaseOutput{Status: stCompleted, Fence: 2, Result: `{"r":1}`})
	// A stale owner is refused.
	h.owner(0, fRenew, "k", 950, 960, "A", 1, "", LeaseOutput{Status: stLost})
	// Another key: the first holder's lease expires, a later grant is fine.
	h.grant(3, "j", 1000, 1010, "C", 3)
	h.grant(4, "j", 3100, 3110, "D", 4)
	h.owner(3, fRelease, "j", 3200, 3210, "C", 3, "", LeaseOutput{Status: stLost})
	rep := CheckLeases(h.ops, Tolerance, 10*time.Second)
	if rep.Verdict != VerdictOK || rep.FencingViolations() != 0 || rep.Lost() != 0 {
		t.Fatalf("correct history judged %s, fencing %d, lost %d: %v", rep.Verdict, rep.FencingViolations(), rep.Lost(), rep.Examples)
	}
}

func TestLeaseCheckersUnknownOutcomes(t *testing.T) {
	var h histBuilder
	// An acquire whose answer was lost may have granted the lease to
	// nobody we know: later "held" answers with an unseen fence are legal,
	// and so is a grant once that unknown lease must have expired.
	h.add(0, fAcquire, "k", 0, -1, Info, LeaseInput{Kind: fAcquire, TTL: ttl}, nil)
	h.acquireSaw(1, "k", 100, 110, LeaseOutput{Status: stHeld, Fence: 7, ExpTs: expTs(50)})
	h.grant(1, "k", 2300, 2310, "B", 8)
	rep := CheckLeases(h.ops, Tolerance, 10*time.Second)
	if rep.Verdict != VerdictOK {
		t.Fatalf("history explained by an unknown grant judged %s: %v", rep.Verdict, rep.Examples)
	}
}

func TestLeaseCheckersCatchViolations(t *testing.T) {
	cases := []struct {
		name  string
		build func(h *histBuilder)
		check func(r *LeaseReport) bool
		// crossKey: porcupine checks each key alone and cannot see it.
		crossKey bool
	}{
		{"grant while held", func(h *histBuilder) {
			h.grant(0, "k", 0, 10, "A", 1)
			h.grant(1, "k", 1500, 1510, "B", 2)
		}, func(r *LeaseReport) bool { return r.OverlappingGrant == 1 }, false},
		{"fence goes back", func(h *histBuilder) {
			h.grant(0, "k", 0, 10, "A", 5)
			h.owner(0, fRelease, "k", 20, 30, "A", 5, "", LeaseOutput{Status: stReleased, Fence: 5})
			h.grant(1, "k", 100, 110, "B", 3)
		}, func(r *LeaseReport) bool { return r.FenceOrder == 1 }, false},
		{"fence reused on another key", func(h *histBuilder) {
			h.grant(0, "k", 0, 10, "A", 4)
			h.grant(1, "j", 100, 110, "B", 4)
		}, func(r *LeaseReport) bool { return r.DuplicateFence == 1 && r.FenceOrder == 1 }, true},
		{"stale owner renews", func(h *histBuilder) {
			h.grant(0, "k", 0, 10, "A", 1)
			h.grant(1, "k", 2500, 2510, "B", 2)
			h.owner(0, fRenew, "k", 2600, 2610, "A", 1, "", LeaseOutput{Status: stRenewed, Fence: 1, ExpTs: expTs(2600)})
		}, func(r *LeaseReport) bool { return r.StaleOwnerAccepted == 1 }, false},
		{"completion lost", func(h *histBuilder) {
			h.grant(0, "k", 0, 10, "A", 1)
			h.owner(0, fComplete, "k", 100, 110, "A", 1, `{"r":1}`, LeaseOutput{Status: stCompleted, Fence: 1, Result: `{"r":1}`})
			h.grant(1, "k", 200, 210, "B", 2)
		}, func(r *LeaseReport) bool { return r.LostCompletion == 1 }, false},
		{"release lost", func(h *histBuilder) {
			h.grant(0, "k", 0, 10, "A", 1)
			h.owner(0, fRelease, "k", 100, 110, "A", 1, "", LeaseOutput{Status: stReleased, Fence: 1})
			h.acquireSaw(1, "k", 200, 210, LeaseOutput{Status: stHeld, Fence: 1, ExpTs: expTs(0)})
		}, func(r *LeaseReport) bool { return r.LostRelease == 1 }, false},
		{"renewal lost", func(h *histBuilder) {
			h.grant(0, "k", 0, 10, "A", 1)
			h.owner(0, fRenew, "k", 1500, 1510, "A", 1, "", LeaseOutput{Status: stRenewed, Fence: 1, ExpTs: expTs(1500)})
			h.grant(1, "k", 2500, 2510, "B", 2)
		}, func(r *LeaseReport) bool { return r.LostRenewal == 1 }, false},
		{"expiry from another clock", func(h *histBuilder) {
			// The answer claims the lease ends 10 s later than any clock
			// reading inside the request could give.
			h.acquireSaw(0, "k", 0, 10, LeaseOutput{Status: stGranted, Owner: "A", Fence: 1, ExpTs: expTs(0) + 10})
		}, func(r *LeaseReport) bool { return true }, false},
		{"held after expiry", func(h *histBuilder) {
			h.grant(0, "k", 0, 10, "A", 1)
			h.acquireSaw(1, "k", 3000, 3010, LeaseOutput{Status: stHeld, Fence: 1, ExpTs: expTs(0)})
		}, func(r *LeaseReport) bool { return true }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h histBuilder
			c.build(&h)
			rep := CheckLeases(h.ops, Tolerance, 10*time.Second)
			if want := map[bool]string{false: VerdictInvalid, true: VerdictOK}[c.crossKey]; rep.Verdict != want {
				t.Errorf("porcupine verdict %s, want %s", rep.Verdict, want)
			}
			if !c.check(rep) {
				t.Errorf("direct checks missed it: %+v", rep)
			}
		})
	}
}

func (h *histBuilder) enqueue(proc int, key, id string, callMs, retMs int64) {
	h.add(proc, fEnqueue, key, callMs, retMs, OK, QueueInput{Queue: "q", Key: key}, QueueOutput{JobID: id, Key: key, Status: "pending"})
}

func (h *histBuilder) claim(proc int, key, id, receipt string, attempts int, callMs, retMs int64) {
	h.add(proc, fClaim, "", callMs, retMs, OK, QueueInput{Queue: "q", Vis: 2},
		QueueOutput{JobID: id, Key: key, Status: "claimed", Attempts: attempts, Receipt: receipt, ClaimExpTs: (t0 + callMs*1e6 + 2e9) / 1e9})
}

func (h *histBuilder) receipt(proc int, f, key, id, receipt string, callMs, retMs int64, ok bool) {
	typ, out := OK, QueueOutput{JobID: id, Key: key, Status: "completed"}
	if !ok {
		typ, out = Fail, QueueOutput{Reason: "expired"}
	}
	h.add(proc, f, key, callMs, retMs, typ, QueueInput{Queue: "q", Key: key, JobID: id, Receipt: receipt, Vis: 2}, out)
}

func (h *histBuilder) read(proc int, f, id string, callMs, retMs int64, out QueueOutput) {
	out.JobID = id
	h.add(proc, f, "", callMs, retMs, OK, QueueInput{Queue: "q", JobID: id}, out)
}

func TestQueueCheckerAcceptsACorrectHistory(t *testing.T) {
	var h histBuilder
	h.enqueue(0, "a", "J1", 0, 10)
	h.enqueue(0, "b", "J2", 20, 30)
	h.claim(1, "a", "J1", "r1", 1, 40, 50)
	h.receipt(1, fAck, "a", "J1", "r1", 60, 70, true)
	h.claim(2, "b", "J2", "r2", 1, 80, 90)
	// r2 expires; the job is delivered again and the late ack is refused.
	h.claim(3, "b", "J2", "r3", 2, 2200, 2210)
	h.receipt(2, fAck, "b", "J2", "r2", 2300, 2310, false)
	h.receipt(3, fJobRelease, "b", "J2", "r3", 2400, 2410, true)
	h.claim(1, "b", "J2", "r4", 3, 2500, 2510)
	h.read(4, fRead, "J1", 100, 110, QueueOutput{Key: "a", Status: "completed", Attempts: 1})
	h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{Key: "a", Status: "completed", Attempts: 1})
	h.read(4, fFinalRead, "J2", 5000, 5010, QueueOutput{Key: "b", Status: "pending", Attempts: 3})
	rep := CheckQueue(h.ops, 5, Tolerance)
	if rep.Violations() != 0 {
		t.Fatalf("correct history has %d violations: %v", rep.Violations(), rep.Examples)
	}
	if rep.Duplicates != 2 || rep.RedeliveredAfterExpiry != 1 || rep.RedeliveredAfterRelease != 1 {
		t.Errorf("duplicates %d (after expiry %d, after release %d), want 2 (1, 1)", rep.Duplicates, rep.RedeliveredAfterExpiry, rep.RedeliveredAfterRelease)
	}
}

func TestQueueCheckerCatchesViolations(t *testing.T) {
	cases := []struct {
		name  string
		build func(h *histBuilder)
		check func(r *QueueReport) int
	}{
		{"two valid claims", func(h *histBuilder) {
			h.enqueue(0, "a", "J1", 0, 10)
			h.claim(1, "a", "J1", "r1", 1, 20, 30)
			h.claim(2, "a", "J1", "r2", 2, 500, 510)
			h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{Key: "a", Status: "pending", Attempts: 2})
		}, func(r *QueueReport) int { return r.DoubleClaims }},
		{"superseded receipt accepted", func(h *histBuilder) {
			h.enqueue(0, "a", "J1", 0, 10)
			h.claim(1, "a", "J1", "r1", 1, 20, 30)
			h.claim(2, "a", "J1", "r2", 2, 2500, 2510)
			h.receipt(1, fAck, "a", "J1", "r1", 2600, 2610, true)
			h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{Key: "a", Status: "completed", Attempts: 2})
		}, func(r *QueueReport) int { return r.StaleReceiptAccepted }},
		{"acked job delivered again", func(h *histBuilder) {
			h.enqueue(0, "a", "J1", 0, 10)
			h.claim(1, "a", "J1", "r1", 1, 20, 30)
			h.receipt(1, fAck, "a", "J1", "r1", 40, 50, true)
			h.claim(2, "a", "J1", "r2", 2, 2500, 2510)
			h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{Key: "a", Status: "completed", Attempts: 2})
		}, func(r *QueueReport) int { return r.AckedRedelivered }},
		{"job lost", func(h *histBuilder) {
			h.enqueue(0, "a", "J1", 0, 10)
			h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{NotFound: true})
		}, func(r *QueueReport) int { return r.LostJobs }},
		{"ack lost", func(h *histBuilder) {
			h.enqueue(0, "a", "J1", 0, 10)
			h.claim(1, "a", "J1", "r1", 1, 20, 30)
			h.receipt(1, fAck, "a", "J1", "r1", 40, 50, true)
			h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{Key: "a", Status: "pending", Attempts: 1})
		}, func(r *QueueReport) int { return r.LostAcks }},
		{"stale read", func(h *histBuilder) {
			h.enqueue(0, "a", "J1", 0, 10)
			h.claim(1, "a", "J1", "r1", 1, 20, 30)
			h.receipt(1, fAck, "a", "J1", "r1", 40, 50, true)
			h.read(4, fRead, "J1", 100, 110, QueueOutput{Key: "a", Status: "claimed", Attempts: 1})
			h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{Key: "a", Status: "completed", Attempts: 1})
		}, func(r *QueueReport) int { return r.StaleReads }},
		{"job never enqueued", func(h *histBuilder) {
			h.claim(1, "zz", "J9", "r1", 1, 20, 30)
		}, func(r *QueueReport) int { return r.Unexpected }},
		{"two ids for one key", func(h *histBuilder) {
			h.enqueue(0, "a", "J1", 0, 10)
			h.enqueue(1, "a", "J2", 20, 30)
			h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{Key: "a", Status: "pending"})
			h.read(4, fFinalRead, "J2", 5000, 5010, QueueOutput{Key: "a", Status: "pending"})
		}, func(r *QueueReport) int { return r.JobIDMismatch }},
		{"too many attempts", func(h *histBuilder) {
			h.enqueue(0, "a", "J1", 0, 10)
			h.read(4, fFinalRead, "J1", 5000, 5010, QueueOutput{Key: "a", Status: "failed", Attempts: 6})
		}, func(r *QueueReport) int { return r.AttemptsExceeded }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h histBuilder
			c.build(&h)
			rep := CheckQueue(h.ops, 5, Tolerance)
			if c.check(rep) == 0 || rep.Violations() == 0 {
				t.Errorf("not caught: %+v", rep)
			}
		})
	}
}

func TestStoreCheckerNeedsTheFence(t *testing.T) {
	var h histBuilder
	h.grant(0, "k", 0, 10, "A", 1)
	h.grant(1, "k", 2500, 2510, "B", 2)
	for _, check := range []bool{true, false} {
		s := NewFencedStore(check)
		s.Write("k", "a1", 1, "A", 0)
		s.Write("k", "b1", 2, "B", 1)
		s.Write("k", "a2-stale", 1, "A", 0) // A wakes after its lease ended
		rep := CheckStore(s.Log(), h.ops, map[string]bool{"a2-stale": true}, Tolerance)
		switch {
		case check && (rep.LostUpdates != 0 || rep.Rejected != 1 || s.Value("k") != "b1"):
			t.Errorf("fenced store: %+v, value %q", rep, s.Value("k"))
		case !check && (rep.LostUpdates != 1 || s.Value("k") != "a2-stale"):
			t.Errorf("unfenced store: want one lost update, got %+v, value %q", rep, s.Value("k"))
		}
		if rep.StaleAttempts != 1 {
			t.Errorf("stale attempts %d, want 1", rep.StaleAttempts)
		}
	}
}

func TestStoreCheckerCatchesAValidHolderRejected(t *testing.T) {
	var h histBuilder
	h.grant(0, "k", 0, 10, "A", 2)
	s := NewFencedStore(true)
	s.Write("k", "x", 3, "X", 1) // a fence higher than the valid holder's
	s.Write("k", "a1", 2, "A", 0)
	// Writes are stamped now; make A's write fall inside its lease.
	log := s.Log()
	for i := range log {
		log[i].At = t0 + 100*1e6
	}
	rep := CheckStore(log, h.ops, nil, Tolerance)
	if rep.ValidHolderRejected != 1 {
		t.Errorf("valid holder rejected %d, want 1: %+v", rep.ValidHolderRejected, rep)
	}
}
