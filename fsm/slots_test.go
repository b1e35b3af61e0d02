package fsm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/secret"
)

// slotsHarness is a harness at cluster level 2, where slots exist.
func slotsHarness(t *testing.T) *harness {
	h := newHarness(t)
	if r := h.apply(&SetLevel{Now: h.now, Level: 2}).(*LevelResult); r.Level != 2 {
		t.Fatalf("level %d", r.Level)
	}
	return h
}

func (h *harness) acquireSlots(key, owner string, slots uint32, ttl int64) *LeaseResult {
	h.t.Helper()
	return h.lease(&LeaseAcquire{
		Now:         h.now,
		Lease:       secret.LeaseID("ns_test", key),
		Fingerprint: secret.FingerprintHash("ns_test", key, ""),
		Owner:       secret.OwnerTokenHash(owner),
		TTLSeconds:  ttl,
		Slots:       slots,
	})
}

// TestSlotsGrantUpToN: up to N owners hold a key at once, each with its own
// fencing token from the one counter; the next is refused "held" until the
// earliest lease ends; renew and release act on the caller's slot only.
func TestSlotsGrantUpToN(t *testing.T) {
	h := slotsHarness(t)
	var last uint64
	for i, ttl := range []int64{30, 10, 20} {
		r := h.acquireSlots("crawl:example.org", fmt.Sprint("w", i), 3, ttl)
		if r.Outcome != LeaseGranted || r.FencingToken <= last || r.Slots != 3 || r.Held != uint32(i+1) || r.TTLSeconds != ttl {
			t.Fatalf("grant %d: %+v", i, *r)
		}
		last = r.FencingToken
	}
	h.advance(time.Second)
	r := h.acquireSlots("crawl:example.org", "w3", 3, 60)
	if r.Outcome != LeaseHeld || r.RetryAfterSeconds != 9 || r.Held != 3 || r.Slots != 3 || r.FencingToken != last-1 {
		t.Fatalf("fourth: %+v, want held, retry after 9 s (w1's lease)", *r)
	}
	// The same request again gets its own grant back, unchanged.
	if r := h.acquireSlots("crawl:example.org", "w0", 3, 60); r.Outcome != LeaseGranted || r.FencingToken != last-2 || r.TTLSeconds != 29 {
		t.Fatalf("w0 again: %+v", *r)
	}
	// Renewing w1 moves only w1's expiry: the earliest is now w2's.
	if r := h.renew("crawl:example.org", "w1", 60); r.Outcome != LeaseRenewed || r.FencingToken != last-1 || r.TTLSeconds != 60 {
		t.Fatalf("renew w1: %+v", *r)
	}
	if r := h.acquireSlots("crawl:example.org", "w3", 3, 60); r.Outcome != LeaseHeld || r.RetryAfterSeconds != 19 {
		t.Fatalf("after renew: %+v, want retry after 19 s (w2's lease)", *r)
	}
	if r := h.renew("crawl:example.org", "w3", 60); r.Outcome != LeaseLost {
		t.Fatalf("renew by a non-holder: %+v", *r)
	}
	if r := h.release("crawl:example.org", "w0"); r.Outcome != LeaseReleased || r.FencingToken != last-2 || r.Held != 2 {
		t.Fatalf("release w0: %+v", *r)
	}
	if r := h.release("crawl:example.org", "w0"); r.Outcome != LeaseLost {
		t.Fatalf("release twice: %+v", *r)
	}
	r = h.acquireSlots("crawl:example.org", "w3", 3, 60)
	if r.Outcome != LeaseGranted || r.FencingToken != last+1 || r.Held != 3 {
		t.Fatalf("w3 after a release: %+v", *r)
	}
	// w2's lease ends at t0+20 s: its slot is free without a release.
	h.now = t0 + 20*sec
	if r := h.acquireSlots("crawl:example.org", "w4", 3, 60); r.Outcome != LeaseGranted || r.FencingToken != last+2 {
		t.Fatalf("after w2's lease ended: %+v", *r)
	}
	if r := h.renew("crawl:example.org", "w2", 60); r.Outcome != LeaseLost {
		t.Fatalf("renew of an ended slot: %+v", *r)
	}
}

// TestSlotsRules: the first acquire fixes the slot count; another count,
// or none on a multi-slot key, is a conflict; complete is refused on a
// multi-slot key and changes nothing; slots need level 2.
func TestSlotsRules(t *testing.T) {
	h := newHarness(t)
	if r := h.acquireSlots("k", "a", 2, 60); r.Outcome != LeaseInvalid {
		t.Fatalf("slots at level 0: %+v", *r)
	}
	h = slotsHarness(t)
	h.acquireSlots("k", "a", 2, 60)
	for _, n := range []uint32{0, 1, 3} {
		if r := h.acquireSlots("k", "b", n, 60); r.Outcome != LeaseSlotsConflict || r.Slots != 2 || r.AbsoluteExpiresAt != absT {
			t.Fatalf("acquire with %d slots of a 2-slot key: %+v", n, *r)
		}
	}
	h.acquire("single", "", "a", 60)
	if r := h.acquireSlots("single", "b", 2, 60); r.Outcome != LeaseSlotsConflict || r.Slots != 1 {
		t.Fatalf("acquire with 2 slots of a single-slot key: %+v", *r)
	}
	before := h.f.StateHash()
	if r := h.complete("k", "a", `{"ok":true}`); r.Outcome != LeaseSlotsRefused || r.Slots != 2 {
		t.Fatalf("complete on a 2-slot key: %+v", *r)
	}
	if h.f.StateHash() != before {
		t.Fatal("a refused complete changed the state")
	}
	if r := h.acquireSlots("k", "b", 2, 60); r.Outcome != LeaseGranted || r.Held != 2 {
		t.Fatalf("second slot: %+v", *r)
	}
}

// TestSlotsCountTowardMaxLeases: each held slot counts toward max_leases;
// a freed slot (released, or swept after its lease ended) stops counting.
func TestSlotsCountTowardMaxLeases(t *testing.T) {
	h := slotsHarness(t)
	max4 := int64(4)
	h.apply(&SetSettings{Now: h.now, Patch: SettingsPatch{MaxLeases: &max4}})
	for i := range 3 {
		if r := h.acquireSlots("k", fmt.Sprint("o", i), 5, 10); r.Outcome != LeaseGranted {
			t.Fatalf("slot %d: %+v", i, *r)
		}
	}
	if r := h.acquire("other", "", "x", 60); r.Outcome != LeaseGranted {
		t.Fatalf("fourth record: %+v", *r)
	}
	if r := h.acquireSlots("k", "o3", 5, 10); r.Outcome != LeaseLimitReached || r.Limit != 4 {
		t.Fatalf("a slot beyond max_leases: %+v", *r)
	}
	h.release("k", "o0")
	if r := h.acquireSlots("k", "o3", 5, 10); r.Outcome != LeaseGranted {
		t.Fatalf("after a release: %+v", *r)
	}
	// The leases end at t0+10 s; a sweep frees their slots.
	h.now = t0 + 11*sec
	if sw := h.sweep(100); sw.SlotsFreed != 3 {
		t.Fatalf("sweep freed %d slots, want 3", sw.SlotsFreed)
	}
	if got := h.f.st.leaseCount(); got != 2 {
		t.Fatalf("lease count %d after the sweep, want 2 (the records)", got)
	}
	if at, ok := h.f.NextDeadline(); ok && at < absT {
		t.Fatalf("a timer remains at %d after every slot was freed", at)
	}
}

// TestSlotsSnapshotRoundTrip: a level 2 snapshot keeps slots and holders,
// equal states give equal bytes, and the restored state counts and times
// the same.
func TestSlotsSnapshotRoundTrip(t *testing.T) {
	h := slotsHarness(t)
	h.acquireSlots("k", "a", 3, 30)
	h.acquireSlots("k", "b", 3, 10)
	h.acquireSlots("j", "c", 2, 20)
	h.release("j", "c")
	h.acquire("single", "", "d", 60)
	b := h.f.SnapshotBytes()
	if got := b[len(snapshotMagic)]; got != snapshotVersion {
		t.Fatalf("format %d at level 2, want %d", got, snapshotVersion)
	}
	g := snapshotRestore(t, h.f)
	if !bytes.Equal(g.SnapshotBytes(), b) {
		t.Fatal("the restored state writes other bytes")
	}
	if g.st.counts.extraSlots != h.f.st.counts.extraSlots || g.st.counts.extraSlots != 1 {
		t.Fatalf("extra slots %d restored, %d before", g.st.counts.extraSlots, h.f.st.counts.extraSlots)
	}
	h2 := &harness{t: t, f: g, now: h.now, index: h.index}
	if r := h2.acquireSlots("k", "e", 3, 60); r.Outcome != LeaseGranted || r.Held != 3 {
		t.Fatalf("third slot after restore: %+v", *r)
	}
	if r := h2.acquireSlots("k", "f", 3, 60); r.Outcome != LeaseHeld || r.RetryAfterSeconds != 10 {
		t.Fatalf("fourth after restore: %+v", *r)
	}
	if r := h2.renew("k", "a", 60); r.Outcome != LeaseRenewed {
		t.Fatalf("renew after restore: %+v", *r)
	}
}

// TestSlotsWait: a waiting acquire is ready when a slot is free or its
// holder's lease ended, and otherwise learns the earliest expiry.
func TestSlotsWait(t *testing.T) {
	h := slotsHarness(t)
	h.acquireSlots("k", "a", 2, 30)
	h.acquireSlots("k", "b", 2, 10)
	c := &LeaseAcquire{Lease: secret.LeaseID("ns_test", "k"), Fingerprint: secret.FingerprintHash("ns_test", "k", ""), Owner: secret.OwnerTokenHash("c"), TTLSeconds: 60, Slots: 2}
	held, ready := h.f.AcquireWait(c, h.now)
	if ready || held.LeaseExpiresAt != t0+10*sec || held.Held != 2 {
		t.Fatalf("both held: ready %v, %+v", ready, held)
	}
	if _, ready := h.f.AcquireWait(c, t0+10*sec); !ready {
		t.Fatal("not ready once b's lease ended")
	}
	c.Owner = secret.OwnerTokenHash("a")
	if _, ready := h.f.AcquireWait(c, h.now); !ready {
		t.Fatal("a holder's own acquire is not ready")
	}
}
