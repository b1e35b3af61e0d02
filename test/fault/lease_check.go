//go:build unix

package fault

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability verdicts as printed.
const (
	VerdictOK      = "ok"
	VerdictInvalid = "INVALID"
	VerdictUnknown = "unknown"
	VerdictNA      = "n/a"
)

// LeaseReport is what the lease checkers found.
type LeaseReport struct {
	// Verdict is porcupine's linearizability verdict over every key.
	Verdict string
	// info is porcupine's linearization data, for the visualization.
	info  porcupine.LinearizationInfo
	model porcupine.Model
	// Grants is the number of acknowledged grants.
	Grants int

	// FenceOrder counts grants B whose fence is not higher than that of a
	// grant A acknowledged before B was invoked (on any key: the counter is
	// cluster-wide).
	FenceOrder int
	// DuplicateFence counts fences granted to two different owners.
	DuplicateFence int
	// StaleOwnerAccepted counts renew/release/complete answered with
	// success for an owner after a grant with a higher fence on the same
	// key had been acknowledged.
	StaleOwnerAccepted int
	// OverlappingGrant counts grants acknowledged while another owner's
	// grant was certainly still unexpired and not released.
	OverlappingGrant int

	// LostCompletion counts acquires after an acknowledged completion that
	// did not return that completion's result.
	LostCompletion int
	// LostRenewal counts grants to another owner while an acknowledged
	// renewal was certainly still in force.
	LostRenewal int
	// LostRelease counts acquires after an acknowledged release that still
	// saw the released owner holding.
	LostRelease int

	// Checkpoints is the number of acknowledged checkpoint writes, and
	// CheckpointsSeen the grants that returned a checkpoint.
	Checkpoints, CheckpointsSeen int
	// LostCheckpoint counts grants invoked after an acknowledged checkpoint
	// that returned no checkpoint, or one whose write certainly came before
	// the acknowledged one.
	LostCheckpoint int
	// RefusedCheckpointSeen counts grants that returned a checkpoint whose
	// write was refused (409 lost) or certainly not applied, or that nobody
	// wrote; CheckpointFence grants whose checkpoint fence is not the
	// writer's, and checkpoint acknowledgements naming another fence than
	// the writer's grant.
	RefusedCheckpointSeen, CheckpointFence int

	// Examples describe the first violations of each kind.
	Examples []string
}

// FencingViolations sums the fencing checks.
func (r *LeaseReport) FencingViolations() int {
	return r.FenceOrder + r.DuplicateFence + r.StaleOwnerAccepted + r.OverlappingGrant + r.RefusedCheckpointSeen + r.CheckpointFence
}

// Lost sums the lost-acknowledgement checks.
func (r *LeaseReport) Lost() int {
	return r.LostCompletion + r.LostRenewal + r.LostRelease + r.LostCheckpoint
}

func (r *LeaseReport) example(kind string, count int, format string, args ...any) {
	if count <= 3 {
		r.Examples = append(r.Examples, kind+": "+fmt.Sprintf(format, args...))
	}
}

func isLeaseF(f string) bool {
	switch f {
	case fAcquire, fRenew, fRelease, fComplete, fCheckpoint, fFinalAcquire:
		return true
	}
	return false
}

type grant struct {
	key, owner string
	fence      int64
	call, ret  int64
	// validLo is a certain lower bound of the grant's expiry.
	validLo int64
	index   int
}

// leaseOps returns the lease operations of a history that count for the
// checkers: ok and info ones (a fail certainly did not happen).
func leaseOps(ops []Op) []Op {
	var out []Op
	for _, o := range ops {
		if isLeaseF(o.F) && (o.Type == OK || o.Type == Info) {
			out = append(out, o)
		}
	}
	return out
}

func outputOf(o Op) (LeaseOutput, bool) {
	if o.Type != OK {
		return LeaseOutput{}, false
	}
	out, ok := o.Output.(LeaseOutput)
	return out, ok
}

// validFrom is a certain lower bound of the expiry an operation set.
func validFrom(o Op, out LeaseOutput) int64 {
	in := o.Input.(LeaseInput)
	v := satAdd(o.Call, in.TTL)
	if ts := out.ExpTs * int64(time.Second); ts > v {
		v = ts
	}
	return v
}

// CheckLeases runs the lease checkers over a history: porcupine (bounded by
// timeout) and the direct fencing and durability checks.
func CheckLeases(all []Op, tol, timeout time.Duration) *LeaseReport {
	ops := leaseOps(all)
	rep := &LeaseReport{model: leaseModel(tol)}
	t := int64(tol)

	var grants []grant
	byKey := map[string][]Op{}
	for _, o := range ops {
		byKey[o.Key] = append(byKey[o.Key], o)
		if out, ok := outputOf(o); ok && out.Status == stGranted {
			grants = append(grants, grant{key: o.Key, owner: out.Owner, fence: out.Fence, call: o.Call, ret: o.Ret, validLo: validFrom(o, out), index: o.index})
		}
	}
	rep.Grants = len(grants)

	// Fences increase in real-time order, cluster-wide.
	byRet := append([]grant(nil), grants...)
	sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
	byCall := append([]grant(nil), grants...)
	sort.Slice(byCall, func(i, j int) bool { return byCall[i].call < byCall[j].call })
	var maxG *grant
	j := 0
	for i := range byCall {
		b := byCall[i]
		for j < len(byRet) && byRet[j].ret < b.call {
			if maxG == nil || byRet[j].fence > maxG.fence {
				maxG = &byRet[j]
			}
			j++
		}
		if maxG != nil && b.fence <= maxG.fence {
			rep.FenceOrder++
			rep.example("fence order", rep.FenceOrder, "grant of fence %d on %s (history #%d) invoked after fence %d on %s (#%d) was acknowledged",
				b.fence, b.key, b.index, maxG.fence, maxG.key, maxG.index)
		}
	}
	// At most one owner per fence.
	seen := map[int64]grant{}
	for _, g := range grants {
		if prev, ok := seen[g.fence]; ok && prev.owner != g.owner {
			rep.DuplicateFence++
			rep.example("duplicate fence", rep.DuplicateFence, "fence %d granted to %s (#%d) and %s (#%d)", g.fence, prev.owner, prev.index, g.owner, g.index)
			continue
		}
		seen[g.fence] = g
	}

	keys := slices.Sorted(maps.Keys(byKey))
	for _, k := range keys {
		rep.checkKey(k, byKey[k], t)
	}
	rep.checkCheckpoints(all)

	rep.Verdict = rep.linearizable(ops, timeout)
	return rep
}

// checkKey runs the per-key direct checks.
func (rep *LeaseReport) checkKey(key string, ops []Op, tol int64) {
	var grants []grant
	for _, o := range ops {
		if out, ok := outputOf(o); ok && out.Status == stGranted {
			grants = append(grants, grant{key: key, owner: out.Owner, fence: out.Fence, call: o.Call, ret: o.Ret, validLo: validFrom(o, out), index: o.index})
		}
	}
	sort.Slice(grants, func(i, j int) bool { return grants[i].ret < grants[j].ret })
	// maxFenceBefore returns the highest fence granted and acknowledged
	// before t, with the grant.
	maxFenceBefore := func(t int64) (grant, bool) {
		var best grant
		found := false
		for _, g := range grants {
			if g.ret >= t {
				break
			}
			if !found || g.fence > best.fence {
				best, found = g, true
			}
		}
		return best, found
	}
	// endedBefore reports whether owner may have released or completed its
	// lease before t (an ok or unknown release/complete invoked before t).
	endedBefore := func(owner string, t int64) bool {
		for _, o := range ops {
			in := o.Input.(LeaseInput)
			if (o.F == fRelease || o.F == fComplete) && in.Owner == owner && o.Call < t {
				if o.Type == Info {
					return true
				}
				if out, ok := outputOf(o); ok && out.Status != stLost {
					return true
				}
			}
		}
		return false
	}

	for _, o := range ops {
		in := o.Input.(LeaseInput)
		out, ok := outputOf(o)
		if !ok {
			continue
		}
		switch {
		case (o.F == fRenew && out.Status == stRenewed) || (o.F == fRelease && out.Status == stReleased) || (o.F == fComplete && out.Status == stCompleted) ||
			(o.F == fCheckpoint && out.Status == stCheckpointed):
			if g, found := maxFenceBefore(o.Call); found && g.fence > in.OwnerFence && g.owner != in.Owner {
				rep.StaleOwnerAccepted++
				rep.example("stale owner accepted", rep.StaleOwnerAccepted, "%s by %s (fence %d) on %s (#%d) succeeded after fence %d was granted to %s (#%d)",
					o.F, in.Owner, in.OwnerFence, key, o.index, g.fence, g.owner, g.index)
			}
		}
		// An acknowledged grant or renewal must not be overtaken by another
		// owner's grant while it is certainly in force.
		if (o.F == fAcquire || o.F == fFinalAcquire) && out.Status == stGranted || o.F == fRenew && out.Status == stRenewed {
			owner, fence := out.Owner, out.Fence
			if o.F == fRenew {
				owner, fence = in.Owner, in.OwnerFence
			}
			valid := validFrom(o, out)
			for _, g := range grants {
				if g.owner == owner || g.fence <= fence || g.ret >= valid-tol || g.ret < o.Call {
					continue
				}
				if endedBefore(owner, g.ret) {
					continue
				}
				if o.F == fRenew {
					rep.LostRenewal++
					rep.example("lost renewal", rep.LostRenewal, "%s renewed %s (#%d) until at least %s, but fence %d was granted to %s at %s (#%d)",
						owner, key, o.index, fmtNs(valid), g.fence, g.owner, fmtNs(g.ret), g.index)
				} else {
					rep.OverlappingGrant++
					rep.example("overlapping grant", rep.OverlappingGrant, "%s held %s (fence %d, #%d) until at least %s, but fence %d was granted to %s at %s (#%d)",
						owner, key, fence, o.index, fmtNs(valid), g.fence, g.owner, fmtNs(g.ret), g.index)
				}
			}
		}
	}

	// Completions and releases are durable.
	for _, c := range ops {
		cin := c.Input.(LeaseInput)
		cout, ok := outputOf(c)
		if !ok {
			continue
		}
		for _, a := range ops {
			if (a.F != fAcquire && a.F != fFinalAcquire) || a.Call <= c.Ret {
				continue
			}
			aout, ok := outputOf(a)
			if !ok {
				continue
			}
			switch {
			case c.F == fComplete && cout.Status == stCompleted:
				if aout.Status != stCompleted || aout.Result != cin.Result {
					rep.LostCompletion++
					rep.example("lost completion", rep.LostCompletion, "%s completed %s with %s (#%d), a later acquire (#%d) got %s %s",
						cin.Owner, key, cin.Result, c.index, a.index, aout.Status, aout.Result)
				}
			case c.F == fRelease && cout.Status == stReleased:
				if aout.Status == stHeld && aout.Fence == cin.OwnerFence {
					rep.LostRelease++
					rep.example("lost release", rep.LostRelease, "%s released %s (fence %d, #%d), a later acquire (#%d) found it still held with that fence",
						cin.Owner, key, cin.OwnerFence, c.index, a.index)
				}
			}
		}
	}
}

// checkCheckpoints checks what grants return against the checkpoint
// writes (values are unique per write): never a value whose write was
// refused or certainly not applied, always with its writer's fence, and
// never an older value (or none) once a checkpoint write had been
// acknowledged before the grant was invoked.
func (rep *LeaseReport) checkCheckpoints(all []Op) {
	writes := map[string]Op{}  // value -> its write
	acked := map[string][]Op{} // key -> acknowledged writes
	var grants []Op
	for _, o := range all {
		switch o.F {
		case fCheckpoint:
			in := o.Input.(LeaseInput)
			writes[o.Key+"\x00"+in.Checkpoint] = o
			out, ok := outputOf(o)
			if !ok || out.Status != stCheckpointed {
				continue
			}
			rep.Checkpoints++
			acked[o.Key] = append(acked[o.Key], o)
			if out.Fence != in.OwnerFence {
				rep.CheckpointFence++
				rep.example("checkpoint fence", rep.CheckpointFence, "checkpoint %s by %s (fence %d) on %s (#%d) acknowledged with fence %d",
					in.Checkpoint, in.Owner, in.OwnerFence, o.Key, o.index, out.Fence)
			}
		case fAcquire, fFinalAcquire:
			if out, ok := outputOf(o); ok && out.Status == stGranted {
				grants = append(grants, o)
			}
		}
	}
	for _, g := range grants {
		out := g.Output.(LeaseOutput)
		var w Op
		found := false
		if out.Checkpoint != "" {
			rep.CheckpointsSeen++
			w, found = writes[g.Key+"\x00"+out.Checkpoint]
			var wout LeaseOutput
			if found {
				wout, _ = outputOf(w)
			}
			switch {
			case !found || w.Type == Fail || (w.Type == OK && wout.Status != stCheckpointed) || w.Call > g.Ret:
				rep.RefusedCheckpointSeen++
				rep.example("refused checkpoint seen", rep.RefusedCheckpointSeen, "grant on %s (#%d) returned checkpoint %s, whose write could not have taken effect (%s)",
					g.Key, g.index, out.Checkpoint, describeWrite(w, found))
			case out.CheckpointFence != w.Input.(LeaseInput).OwnerFence:
				rep.CheckpointFence++
				rep.example("checkpoint fence", rep.CheckpointFence, "grant on %s (#%d) returned checkpoint %s with fence %d, written by fence %d (#%d)",
					g.Key, g.index, out.Checkpoint, out.CheckpointFence, w.Input.(LeaseInput).OwnerFence, w.index)
			}
		}
		for _, a := range acked[g.Key] {
			if a.Ret >= g.Call || (found && w.index == a.index) {
				continue
			}
			if !found || w.Ret < a.Call {
				rep.LostCheckpoint++
				rep.example("lost checkpoint", rep.LostCheckpoint, "checkpoint %s on %s (#%d) was acknowledged before a grant (#%d) that returned %q",
					a.Input.(LeaseInput).Checkpoint, g.Key, a.index, g.index, out.Checkpoint)
				break
			}
		}
	}
}

func describeWrite(w Op, found bool) string {
	switch {
	case !found:
		return "nobody wrote it"
	case w.Type == Fail:
		return fmt.Sprintf("#%d certainly not applied: %s", w.index, w.Err)
	case w.Call > 0 && w.Type == OK:
		if out, _ := outputOf(w); out.Status != stCheckpointed {
			return fmt.Sprintf("#%d answered %s", w.index, out.Status)
		}
	}
	return fmt.Sprintf("#%d invoked after the grant returned", w.index)
}

// linearizable runs porcupine over the lease operations.
func (rep *LeaseReport) linearizable(ops []Op, timeout time.Duration) string {
	if len(ops) == 0 {
		return VerdictNA
	}
	hist := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		in := o.Input.(LeaseInput)
		in.Call, in.Ret = o.Call, o.Ret
		var out *LeaseOutput
		if lo, ok := outputOf(o); ok {
			out = &lo
		}
		ret := o.Ret
		if o.Type == Info {
			ret = math.MaxInt64
		}
		hist = append(hist, porcupine.Operation{
			ClientId: o.Process,
			Input:    in,
			Call:     o.Call,
			Output:   out,
			Return:   ret,
			Metadata: leaseMeta{Key: o.Key, Process: o.Process, Node: o.Node, Index: o.index},
		})
	}
	res, info := porcupine.CheckOperationsVerbose(rep.model, hist, timeout)
	rep.info = info
	switch res {
	case porcupine.Ok:
		return VerdictOK
	case porcupine.Illegal:
		return VerdictInvalid
	}
	return VerdictUnknown
}

// fmtNs formats wall-clock nanoseconds as a time of day with milliseconds.
func fmtNs(ns int64) string {
	if ns == math.MaxInt64 {
		return "never"
	}
	return time.Unix(0, ns).UTC().Format("15:04:05.000")
}
