//go:build unix

package fault

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"
)

// Slot operation names (the f of the history): acquires, renewals and
// releases of multi-slot keys, apart from the single-slot lease register's.
const (
	fSlotAcquire = "slot-acquire"
	fSlotRenew   = "slot-renew"
	fSlotRelease = "slot-release"
)

// SlotInput is what a slot operation asked for.
type SlotInput struct {
	Kind string `json:"kind"`
	// Slots is the key's slot count, sent with every acquire.
	Slots int64 `json:"slots"`
	// Owner is a short id of the owner token (renew, release), OwnerFence
	// the fence of its grant.
	Owner      string `json:"owner,omitempty"`
	OwnerFence int64  `json:"owner_fence,omitempty"`
	// TTL is the requested lease length (acquire, renew), nanoseconds.
	TTL int64 `json:"ttl_ns,omitempty"`
	// Wait is an acquire's wait_seconds.
	Wait int64 `json:"wait_s,omitempty"`
	// Late marks a renew or release sent on purpose after the slot's lease
	// has certainly expired.
	Late bool `json:"late,omitempty"`
}

// SlotOutput is what the service answered to a slot operation.
type SlotOutput struct {
	// Status is granted, held (every slot taken), renewed, released or
	// lost.
	Status string `json:"status"`
	Owner  string `json:"owner,omitempty"`
	Fence  int64  `json:"fence,omitempty"`
	// ExpTs is lease_expires_at_timestamp (granted, renewed; for held the
	// earliest-expiring holder's).
	ExpTs int64 `json:"exp_ts,omitempty"`
	// Slots and Held are the answer's slots and held.
	Slots int64 `json:"slots,omitempty"`
	Held  int64 `json:"held,omitempty"`
}

func isSlotF(f string) bool {
	return f == fSlotAcquire || f == fSlotRenew || f == fSlotRelease
}

// SlotsReport is what the slot checkers found.
type SlotsReport struct {
	// Grants is the number of acknowledged slot grants; Peak the most
	// grants of one key certainly valid at once.
	Grants, Peak int
	// Overgrant counts grants that, when acknowledged, made more grants of
	// their key certainly valid at once than it has slots.
	Overgrant int
	// HeldAbove counts answers reporting more holders than the key has
	// slots, or another slot count than the key's.
	HeldAbove int
	// FenceOrder counts grants whose fence is not higher than that of a
	// grant acknowledged before they were invoked; DuplicateFence fences
	// given to two owners. Pairs of two single-slot lease grants are left to
	// the lease checker.
	FenceOrder, DuplicateFence int
	// LateOwnerAccepted counts renewals and releases that succeeded after
	// the owner's slot had certainly expired.
	LateOwnerAccepted int
	// Examples describe the first violations of each kind.
	Examples []string
}

// Fencing sums the checks the fencing column shows.
func (r *SlotsReport) Fencing() int {
	return r.Overgrant + r.FenceOrder + r.DuplicateFence + r.LateOwnerAccepted
}

// Violations sums every check that must be 0.
func (r *SlotsReport) Violations() int { return r.Fencing() + r.HeldAbove }

func (r *SlotsReport) example(kind string, count int, format string, args ...any) {
	if count <= 3 {
		r.Examples = append(r.Examples, kind+": "+fmt.Sprintf(format, args...))
	}
}

// slotGrant is an acknowledged grant of a slot or of a single-slot lease.
type slotGrant struct {
	key, owner string
	fence      int64
	call, ret  int64
	slot       bool // false: a single-slot lease grant
	index      int
}

// slotOutputOf returns an ok slot operation's answer.
func slotOutputOf(o Op) (SlotOutput, bool) {
	if o.Type != OK {
		return SlotOutput{}, false
	}
	out, ok := o.Output.(SlotOutput)
	return out, ok
}

// slotValidFrom is a certain lower bound of the expiry a slot grant or
// renewal set: its call plus the ttl, or the answer's whole-second
// timestamp if later.
func slotValidFrom(o Op, out SlotOutput) int64 {
	in := o.Input.(SlotInput)
	return max(satAdd(o.Call, in.TTL), out.ExpTs*int64(time.Second))
}

// slotValidTo is a certain upper bound of that expiry: the return plus the
// ttl, or the end of the answer's second if earlier.
func slotValidTo(o Op, out SlotOutput) int64 {
	in := o.Input.(SlotInput)
	hi := satAdd(o.Ret, in.TTL)
	if out.ExpTs > 0 {
		hi = min(hi, (out.ExpTs+1)*int64(time.Second))
	}
	return hi
}

// CheckSlots checks the slot operations of a history: no key has more
// grants certainly valid at once than slots, every answer's counts are
// within the key's slots, fences are unique and increase in real-time
// order across every grant (the single-slot lease grants of the history
// included: the counter is cluster-wide), and no renewal or release
// succeeds after its slot certainly expired. Operations whose outcome is
// unknown never count against the service: an unknown grant is not counted
// as a holder, an unknown release ends its slot's certain validity at its
// call, and an unknown renewal may have extended it indefinitely.
func CheckSlots(all []Op, tol time.Duration) *SlotsReport {
	rep := &SlotsReport{}
	t := int64(tol)
	var grants []slotGrant
	byOwner := map[string][]Op{} // owner -> its renewals and releases, ok or unknown
	slotsOf := map[string]int64{}
	var slotOps []Op
	for _, o := range all {
		switch {
		case isSlotF(o.F):
			if o.Type != OK && o.Type != Info {
				continue
			}
			slotOps = append(slotOps, o)
			in := o.Input.(SlotInput)
			if in.Slots > 0 {
				slotsOf[o.Key] = in.Slots
			}
			if o.F != fSlotAcquire {
				byOwner[in.Owner] = append(byOwner[in.Owner], o)
			}
			if out, ok := slotOutputOf(o); ok && out.Status == stGranted {
				grants = append(grants, slotGrant{key: o.Key, owner: out.Owner, fence: out.Fence, call: o.Call, ret: o.Ret, slot: true, index: o.index})
			}
		case o.F == fAcquire || o.F == fFinalAcquire:
			if out, ok := outputOf(o); ok && out.Status == stGranted {
				grants = append(grants, slotGrant{key: o.Key, owner: out.Owner, fence: out.Fence, call: o.Call, ret: o.Ret, index: o.index})
			}
		}
	}
	for _, g := range grants {
		if g.slot {
			rep.Grants++
		}
	}

	// Answers never report more holders than slots, or another count.
	for _, o := range slotOps {
		out, ok := slotOutputOf(o)
		if !ok || (out.Status != stGranted && out.Status != stHeld && out.Status != stRenewed) {
			continue
		}
		n := slotsOf[o.Key]
		if out.Held > out.Slots || (n > 0 && out.Slots != n) {
			rep.HeldAbove++
			rep.example("slot count", rep.HeldAbove, "%s of %s (#%d) answered %s with held %d, slots %d; the key has %d slots",
				o.F, o.Key, o.index, out.Status, out.Held, out.Slots, n)
		}
	}

	rep.checkFences(grants)
	rep.checkOverlap(slotOps, byOwner, slotsOf, t)
	rep.checkLate(slotOps, byOwner, t)
	return rep
}

// checkFences: no fence given to two owners, and a grant acknowledged
// before another was invoked has the lower fence; pairs of two lease
// grants are the lease checker's.
func (rep *SlotsReport) checkFences(grants []slotGrant) {
	seen := map[int64]slotGrant{}
	for _, g := range grants {
		if prev, ok := seen[g.fence]; ok && prev.owner != g.owner {
			if prev.slot || g.slot {
				rep.DuplicateFence++
				rep.example("duplicate fence", rep.DuplicateFence, "fence %d granted to %s on %s (#%d) and %s on %s (#%d)",
					g.fence, prev.owner, prev.key, prev.index, g.owner, g.key, g.index)
			}
			continue
		}
		seen[g.fence] = g
	}
	byRet := slices.Clone(grants)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
	byCall := slices.Clone(grants)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
	// The highest fence acknowledged so far among slot grants and among
	// lease grants.
	var maxSlot, maxLease *slotGrant
	j := 0
	for i := range byCall {
		b := byCall[i]
		for j < len(byRet) && byRet[j].ret < b.call {
			g := &byRet[j]
			if g.slot && (maxSlot == nil || g.fence > maxSlot.fence) {
				maxSlot = g
			}
			if !g.slot && (maxLease == nil || g.fence > maxLease.fence) {
				maxLease = g
			}
			j++
		}
		for _, a := range []*slotGrant{maxSlot, maxLease} {
			if a == nil || (!a.slot && !b.slot) || b.fence > a.fence {
				continue
			}
			rep.FenceOrder++
			rep.example("fence order", rep.FenceOrder, "grant of fence %d on %s (#%d) invoked after fence %d on %s (#%d) was acknowledged",
				b.fence, b.key, b.index, a.fence, a.key, a.index)
			break
		}
	}
}

// certainInterval is the time a slot grant was certainly held: from its
// acknowledgement until its expiry's certain lower bound less tol (pushed
// later by acknowledged renewals), cut at the call of the first release
// (acknowledged or unknown) or of any operation of the owner answered lost.
func certainInterval(g Op, out SlotOutput, owned []Op, tol int64) (int64, int64) {
	end := slotValidFrom(g, out) - tol
	cut := int64(math.MaxInt64)
	for _, o := range owned {
		oo, ok := slotOutputOf(o)
		switch {
		case o.F == fSlotRenew && ok && oo.Status == stRenewed:
			end = max(end, slotValidFrom(o, oo)-tol)
		case o.F == fSlotRelease || (ok && oo.Status == stLost):
			cut = min(cut, o.Call)
		}
	}
	return g.Ret, min(end, cut)
}

// checkOverlap sweeps each key's certain intervals: more of them at once
// than the key has slots is an overgrant.
func (rep *SlotsReport) checkOverlap(ops []Op, byOwner map[string][]Op, slotsOf map[string]int64, tol int64) {
	type ev struct {
		at    int64
		start bool
		op    Op
	}
	byKey := map[string][]ev{}
	for _, o := range ops {
		out, ok := slotOutputOf(o)
		if !ok || o.F != fSlotAcquire || out.Status != stGranted {
			continue
		}
		lo, hi := certainInterval(o, out, byOwner[out.Owner], tol)
		if lo >= hi {
			continue
		}
		byKey[o.Key] = append(byKey[o.Key], ev{at: lo, start: true, op: o}, ev{at: hi, op: o})
	}
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		evs := byKey[k]
		// At equal times ends go first: touching intervals do not overlap.
		sort.Slice(evs, func(i, j int) bool {
			if evs[i].at != evs[j].at {
				return evs[i].at < evs[j].at
			}
			return !evs[i].start && evs[j].start
		})
		active := map[int]Op{}
		for _, e := range evs {
			if !e.start {
				delete(active, e.op.index)
				continue
			}
			active[e.op.index] = e.op
			rep.Peak = max(rep.Peak, len(active))
			if n := slotsOf[k]; n > 0 && int64(len(active)) > n {
				rep.Overgrant++
				var fences []int64
				for _, a := range active {
					fences = append(fences, a.Output.(SlotOutput).Fence)
				}
				slices.Sort(fences)
				rep.example("overgrant", rep.Overgrant, "%s has %d slots, but at %s (#%d acknowledged) the grants of fences %v were all certainly valid",
					k, n, fmtNs(e.at), e.op.index, fences)
			}
		}
	}
}

// checkLate: a renewal or release succeeds only while the owner's slot is
// unexpired; its expiry is at most the latest upper bound set by the grant
// or a renewal that may have taken effect first (an unknown one: no bound).
func (rep *SlotsReport) checkLate(ops []Op, byOwner map[string][]Op, tol int64) {
	grantOf := map[string]Op{}
	for _, o := range ops {
		if out, ok := slotOutputOf(o); ok && o.F == fSlotAcquire && out.Status == stGranted {
			grantOf[out.Owner] = o
		}
	}
	for owner, owned := range byOwner {
		g, ok := grantOf[owner]
		if !ok {
			continue
		}
		for _, o := range owned {
			out, ok := slotOutputOf(o)
			if !ok || (out.Status != stRenewed && out.Status != stReleased) {
				continue
			}
			hi := slotValidTo(g, g.Output.(SlotOutput))
			for _, r := range owned {
				if r.F != fSlotRenew || r.Call >= o.Ret || r.index == o.index {
					continue
				}
				if ro, ok := slotOutputOf(r); ok && ro.Status == stRenewed {
					hi = max(hi, slotValidTo(r, ro))
				} else if r.Type == Info {
					hi = math.MaxInt64
				}
			}
			if o.Call-tol > hi {
				rep.LateOwnerAccepted++
				rep.example("late owner accepted", rep.LateOwnerAccepted, "%s by %s (fence %d) on %s (#%d) succeeded at %s, after its slot expired by %s",
					o.F, owner, g.Output.(SlotOutput).Fence, o.Key, o.index, fmtNs(o.Call), fmtNs(hi))
			}
		}
	}
}
