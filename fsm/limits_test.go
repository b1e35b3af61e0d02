package fsm

import (
	"bytes"
	"os"
	"testing"
	"time"
)

// setLimits applies a SetSettings naming only max_leases and max_queues.
func (h *harness) setLimits(leases, queues int64) {
	h.t.Helper()
	r := h.apply(&SetSettings{Now: h.now, Patch: SettingsPatch{MaxLeases: &leases, MaxQueues: &queues}}).(*SettingsResult)
	if !r.Applied {
		h.t.Fatalf("limits not applied: %+v", r)
	}
}

// TestMaxLeasesRefusesOnlyNewKeys fills the cluster's lease records and
// checks that only an acquire of a key without a record is refused, that the
// refusal changes nothing, and that a record's slot comes back when the
// sweep removes it or the limit is raised.
func TestMaxLeasesRefusesOnlyNewKeys(t *testing.T) {
	h := newHarness(t)
	h.setLimits(2, 10)
	if r := h.acquire("a", "f", "A", 60); r.Outcome != LeaseGranted {
		t.Fatalf("acquire a: %+v", *r)
	}
	if r := h.acquire("b", "f", "B", 60); r.Outcome != LeaseGranted {
		t.Fatalf("acquire b: %+v", *r)
	}
	before := h.f.StateHash()
	r := h.acquire("c", "f", "C", 60)
	if r.Outcome != LeaseLimitReached || r.Limit != 2 {
		t.Fatalf("acquire of a third key: %+v, want limit_reached with limit 2", *r)
	}
	if h.f.StateHash() != before {
		t.Fatal("a refused acquire changed the state")
	}

	// Keys with a record work as before: held, released, granted again, completed.
	if r := h.acquire("a", "f", "X", 60); r.Outcome != LeaseHeld {
		t.Fatalf("acquire of a held key at the limit: %+v", *r)
	}
	if r := h.release("a", "A"); r.Outcome != LeaseReleased {
		t.Fatalf("release at the limit: %+v", *r)
	}
	if r := h.acquire("a", "f", "A2", 60); r.Outcome != LeaseGranted || r.FencingToken != 3 {
		t.Fatalf("acquire of a released key at the limit: %+v", *r)
	}
	if r := h.complete("b", "B", `{"ok":1}`); r.Outcome != LeaseCompleted {
		t.Fatalf("complete at the limit: %+v", *r)
	}
	if r := h.acquire("b", "f", "Y", 60); r.Outcome != LeaseCompleted {
		t.Fatalf("acquire of a completed key at the limit: %+v", *r)
	}

	// Lowering the limit below the records held refuses new keys only.
	h.setLimits(1, 10)
	if r := h.renew("a", "A2", 60); r.Outcome != LeaseRenewed {
		t.Fatalf("renew under a lowered limit: %+v", *r)
	}
	h.setLimits(3, 10)
	if r := h.acquire("c", "f", "C", 60); r.Outcome != LeaseGranted {
		t.Fatalf("acquire after raising the limit: %+v", *r)
	}
	if r := h.acquire("d", "f", "D", 60); r.Outcome != LeaseLimitReached {
		t.Fatalf("acquire of a fourth key: %+v", *r)
	}

	// A key whose lifecycle ended reuses its own record before the sweep;
	// other new keys wait for the sweep to free the ended records.
	h.now = absT
	if r := h.acquire("a", "f", "A3", 60); r.Outcome != LeaseGranted {
		t.Fatalf("acquire of an ended key before the sweep: %+v", *r)
	}
	if r := h.acquire("d", "f", "D", 60); r.Outcome != LeaseLimitReached {
		t.Fatalf("acquire of a new key before the sweep: %+v", *r)
	}
	if r := h.sweep(100); r.LeasesRemoved != 2 {
		t.Fatalf("sweep: %+v, want the two ended records removed", *r)
	}
	if r := h.acquire("d", "f", "D", 60); r.Outcome != LeaseGranted {
		t.Fatalf("acquire of a new key after the sweep: %+v", *r)
	}
}

// TestMaxQueuesRefusesOnlyCreation fills the cluster's queues and checks
// that creation is refused before the per-client quota is touched, that the
// queues keep working, and that a slot comes back when a queue ends.
func TestMaxQueuesRefusesOnlyCreation(t *testing.T) {
	h := newHarness(t)
	h.setLimits(10, 1)
	q1, q2 := mkQueue("q1"), mkQueue("q2")
	wantOutcome(t, h.createQueue(q1, "c"), QueueCreated)
	before := h.f.StateHash()
	r := h.createQueue(q2, "c")
	wantOutcome(t, r, QueueLimitReached)
	if r.Limit != 1 {
		t.Fatalf("limit %d, want 1", r.Limit)
	}
	if h.f.StateHash() != before {
		t.Fatal("a refused creation changed the state (the client's quota included)")
	}
	wantOutcome(t, h.enqueue(q1, "j", "k", `{"n":1}`), JobCreated)
	wantOutcome(t, h.claim(q1, "r1", 60), JobClaimed)
	wantOutcome(t, h.ack(q1, "j", "r1"), JobAcked)

	h.advance(24 * time.Hour)
	if r := h.sweep(100); r.QueuesRemoved != 1 {
		t.Fatalf("sweep: %+v, want the ended queue removed", *r)
	}
	wantOutcome(t, h.createQueue(q2, "c"), QueueCreated)
}

// TestSnapshotVersion1Restores restores a snapshot written by the version 1
// layout (testdata/snapshot-v1.bin, the state seedFSM builds, written before
// max_leases and max_queues existed): it must restore to that same state,
// with the new settings at their initial bounds, and snapshot again in the
// current layout exactly as the state built today does.
func TestSnapshotVersion1Restores(t *testing.T) {
	v1, err := os.ReadFile("testdata/snapshot-v1.bin")
	if err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(&nopCloser{Reader: bytes.NewReader(v1)}); err != nil {
		t.Fatalf("restore a version 1 snapshot: %v", err)
	}
	want := seedFSM()
	if g.Settings() != want.Settings() || g.Settings().MaxLeases != initialMaxLeases || g.Settings().MaxQueues != initialMaxQueues {
		t.Fatalf("settings %+v, want %+v", g.Settings(), want.Settings())
	}
	if !bytes.Equal(g.SnapshotBytes(), want.SnapshotBytes()) {
		t.Fatal("a restored version 1 snapshot differs from the state it was taken of")
	}
	if s := g.Stats(); s.Leases == 0 || s.Queues == 0 {
		t.Fatalf("restored state is empty: %+v", s)
	}
}

// TestInspectSnapshotCountsLikeStats summarises a snapshot without building
// its state: the counts must be those of the state itself at its clock.
func TestInspectSnapshotCountsLikeStats(t *testing.T) {
	f := seedFSM()
	sum, err := InspectSnapshot(f.SnapshotBytes())
	if err != nil {
		t.Fatal(err)
	}
	want := scanStats(t, f, f.Clock())
	if sum.Stats != want || sum.ClockUnixMs != f.Clock() || sum.Nodes == 0 || sum.FencingCounter == 0 {
		t.Fatalf("summary %+v, want the stats %+v at clock %d", sum, want, f.Clock())
	}
	if want.Leases == 0 || want.Queues == 0 || want.Jobs.Total == 0 {
		t.Fatalf("the seed state is too empty to test with: %+v", want)
	}
	if _, err := InspectSnapshot(f.SnapshotBytes()[1:]); err == nil {
		t.Fatal("a damaged snapshot was summarised")
	}
}
