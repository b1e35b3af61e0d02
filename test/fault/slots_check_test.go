//go:build unix

package fault

import "testing"

// slotGrant records an acknowledged grant of a slot of key (slots slots,
// held holders after it), expiring ttl after its call.
func (h *histBuilder) slotGrant(proc int, key string, slots int64, callMs, retMs int64, owner string, fence, held int64) {
	h.add(proc, fSlotAcquire, key, callMs, retMs, OK, SlotInput{Kind: fSlotAcquire, Slots: slots, TTL: ttl},
		SlotOutput{Status: stGranted, Owner: owner, Fence: fence, ExpTs: expTs(callMs), Slots: slots, Held: held})
}

// slotOwner records a renewal or release by owner (typ OK with out, or
// Info with a nil out and retMs -1).
func (h *histBuilder) slotOwner(proc int, f, key string, callMs, retMs int64, typ, owner string, fence int64, out any) {
	in := SlotInput{Kind: f, Owner: owner, OwnerFence: fence}
	if f == fSlotRenew {
		in.TTL = ttl
	}
	h.add(proc, f, key, callMs, retMs, typ, in, out)
}

func TestSlotsCheckerAcceptsACorrectHistory(t *testing.T) {
	var h histBuilder
	h.slotGrant(0, "s", 2, 0, 10, "A", 1, 1)
	h.slotGrant(1, "s", 2, 20, 30, "B", 2, 2)
	// Every slot held: refused, naming the earliest holder.
	h.add(2, fSlotAcquire, "s", 40, 50, OK, SlotInput{Kind: fSlotAcquire, Slots: 2, TTL: ttl},
		SlotOutput{Status: stHeld, Fence: 1, ExpTs: expTs(0), Slots: 2, Held: 2})
	h.slotOwner(0, fSlotRelease, "s", 300, 310, OK, "A", 1, SlotOutput{Status: stReleased, Fence: 1})
	h.slotGrant(2, "s", 2, 400, 410, "C", 3, 2)
	h.slotOwner(1, fSlotRenew, "s", 500, 510, OK, "B", 2, SlotOutput{Status: stRenewed, Fence: 2, ExpTs: expTs(500), Slots: 2, Held: 2})
	h.slotOwner(1, fSlotRelease, "s", 600, 610, OK, "B", 2, SlotOutput{Status: stReleased, Fence: 2})
	// C walks away; its slot is free once its lease has ended.
	h.slotGrant(3, "s", 2, 700, 710, "D", 4, 2)
	h.slotGrant(0, "s", 2, 2500, 2510, "E", 5, 2)
	h.slotOwner(2, fSlotRenew, "s", 3000, 3010, OK, "C", 3, SlotOutput{Status: stLost})
	// D's release has an unknown outcome: it may have freed D's slot at
	// once, so two later grants while E holds are legal.
	h.slotOwner(3, fSlotRelease, "s", 2600, -1, Info, "D", 4, nil)
	h.slotGrant(4, "s", 2, 2700, 2710, "F", 6, 2)
	// An acquire whose answer was lost may hold a slot nobody knows.
	h.add(5, fSlotAcquire, "s", 2800, -1, Info, SlotInput{Kind: fSlotAcquire, Slots: 2, TTL: ttl}, nil)
	// A renewal of unknown outcome may have kept E's slot: its late release
	// is not judged.
	h.slotOwner(0, fSlotRenew, "s", 3000, -1, Info, "E", 5, nil)
	h.slotOwner(6, fSlotRelease, "s", 5500, 5510, OK, "E", 5, SlotOutput{Status: stReleased, Fence: 5})
	// A single-slot lease grant takes the next fence of the one counter.
	h.grant(7, "k", 6000, 6010, "G", 7)
	rep := CheckSlots(h.ops, Tolerance)
	if rep.Violations() != 0 {
		t.Fatalf("correct history has %d violations: %+v", rep.Violations(), rep)
	}
	if rep.Grants != 6 || rep.Peak != 2 {
		t.Errorf("grants %d, peak %d; want 6 and 2", rep.Grants, rep.Peak)
	}
}

func TestSlotsCheckerCatchesViolations(t *testing.T) {
	cases := []struct {
		name  string
		build func(h *histBuilder)
		check func(r *SlotsReport) int
	}{
		{"one grant too many", func(h *histBuilder) {
			h.slotGrant(0, "s", 2, 0, 10, "A", 1, 1)
			h.slotGrant(1, "s", 2, 20, 30, "B", 2, 2)
			h.slotGrant(2, "s", 2, 40, 50, "C", 3, 2)
		}, func(r *SlotsReport) int { return r.Overgrant }},
		{"renewals keep the slots held", func(h *histBuilder) {
			h.slotGrant(0, "s", 2, 0, 10, "A", 1, 1)
			h.slotGrant(1, "s", 2, 20, 30, "B", 2, 2)
			h.slotOwner(0, fSlotRenew, "s", 1500, 1510, OK, "A", 1, SlotOutput{Status: stRenewed, Fence: 1, ExpTs: expTs(1500), Slots: 2, Held: 2})
			h.slotOwner(1, fSlotRenew, "s", 1500, 1510, OK, "B", 2, SlotOutput{Status: stRenewed, Fence: 2, ExpTs: expTs(1500), Slots: 2, Held: 2})
			h.slotGrant(2, "s", 2, 2600, 2610, "C", 3, 2)
		}, func(r *SlotsReport) int { return r.Overgrant }},
		{"more holders than slots", func(h *histBuilder) {
			h.slotGrant(0, "s", 2, 0, 10, "A", 1, 3)
		}, func(r *SlotsReport) int { return r.HeldAbove }},
		{"another slot count", func(h *histBuilder) {
			h.add(0, fSlotAcquire, "s", 0, 10, OK, SlotInput{Kind: fSlotAcquire, Slots: 2, TTL: ttl},
				SlotOutput{Status: stHeld, Fence: 1, ExpTs: expTs(0), Slots: 3, Held: 3})
		}, func(r *SlotsReport) int { return r.HeldAbove }},
		{"fence shared by a slot and a lease", func(h *histBuilder) {
			h.slotGrant(0, "s", 2, 0, 10, "A", 4, 1)
			h.grant(1, "k", 0, 10, "B", 4)
		}, func(r *SlotsReport) int { return r.DuplicateFence }},
		{"fence goes back after a slot grant", func(h *histBuilder) {
			h.slotGrant(0, "s", 2, 0, 10, "A", 5, 1)
			h.grant(1, "k", 100, 110, "B", 3)
		}, func(r *SlotsReport) int { return r.FenceOrder }},
		{"renewal after expiry", func(h *histBuilder) {
			h.slotGrant(0, "s", 2, 0, 10, "A", 1, 1)
			h.slotOwner(0, fSlotRenew, "s", 3000, 3010, OK, "A", 1, SlotOutput{Status: stRenewed, Fence: 1, ExpTs: expTs(3000), Slots: 2, Held: 1})
		}, func(r *SlotsReport) int { return r.LateOwnerAccepted }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h histBuilder
			c.build(&h)
			rep := CheckSlots(h.ops, Tolerance)
			if c.check(rep) == 0 || rep.Violations() == 0 {
				t.Errorf("not caught: %+v", rep)
			}
		})
	}
}

// Two single-slot lease grants are the lease checker's: the slot checker
// does not count them twice.
func TestSlotsCheckerLeavesLeasePairsAlone(t *testing.T) {
	var h histBuilder
	h.grant(0, "k", 0, 10, "A", 5)
	h.grant(1, "j", 100, 110, "B", 5)
	if rep := CheckSlots(h.ops, Tolerance); rep.Violations() != 0 {
		t.Errorf("lease-only history counted: %+v", rep)
	}
}
