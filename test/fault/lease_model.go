//go:build unix

package fault

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// The lease model.
//
// Each key of the lease register is checked for linearizability on its own
// (porcupine partitions by key) against this sequential specification of
// one lease record:
//
//	state: free | held(owner, fence, expiry) | completed(fence, result)
//
//	acquire (one fingerprint per key, so never "conflict"):
//	  completed            -> 200 completed with the stored result and fence
//	  held, not expired    -> 409 held, reporting the holder's fence and expiry
//	  free, or expired     -> 201 granted: new owner, a fence higher than the
//	                          record's last, expiry = now + ttl
//	renew/release/complete/checkpoint by owner o:
//	  held by o, not expired -> renewed (same fence, expiry = now + ttl) /
//	                            released (free) / completed (result stored,
//	                            checkpoint dropped) / checkpointed (value
//	                            stored with o's fence)
//	  anything else          -> 409 lost, nothing changes
//
// The record also keeps the last stored checkpoint, with the fence of the
// holder that wrote it: a grant returns exactly that (none if never
// written), and a release, an expiry or a new grant keep it.
//
// Time. "now" of an operation is the state machine's clock when it applied
// the operation. The leader stamps it from its wall clock while handling
// the request and the state clock never goes back, so for every operation
// now ∈ [call, return] of that operation as measured by the harness: the
// nodes run on this machine and read the same clock. The model never knows
// an expiry exactly; it keeps bounds [ExpLo, ExpHi]:
//
//	grant/renew with requested ttl:  [call+ttl, return+ttl]
//	intersected with the answer's lease_expires_at_timestamp (whole
//	seconds, rounded down):          [ts, ts+1s)
//	a 409 held answer narrows the current bounds the same way.
//
// An operation may see the lease expired iff return + tol ≥ ExpLo, and
// unexpired iff call − tol < ExpHi. tol (Tolerance) is 250 ms: the only
// timing slack needed when every clock is the same is millisecond
// rounding; a real deployment whose nodes' clocks differ by up to
// --max-clock-skew would need tol of that bound. An answer whose reported
// expiry lies outside [call+ttl−tol, return+ttl+tol] is itself illegal:
// the service used a clock other than the real one (a skewed leader).
//
// Operations whose outcome is unknown (info: timeout, 503 outcome unknown)
// have return = ∞ and may or may not have taken effect, at any time after
// their call: the model steps to both possibilities (porcupine's
// nondeterministic model). An unknown grant gives the lease to an owner no
// client knows, with a fence only known to exceed the last one and an
// expiry bounded only below (call+ttl). The key's 24-hour lifecycle never
// ends during a run (the suite keeps the default), so it is not modelled.

// Tolerance is the lease model's slack on time comparisons.
const Tolerance = 250 * time.Millisecond

// Lease operation names (the f of the history).
const (
	fAcquire      = "acquire"
	fRenew        = "renew"
	fRelease      = "release"
	fComplete     = "complete"
	fCheckpoint   = "checkpoint"
	fFinalAcquire = "final-acquire"
)

// Lease answer statuses as the model sees them.
const (
	stGranted   = "granted"
	stHeld      = "held"
	stCompleted = "completed"
	stLost      = "lost"
	stRenewed   = "renewed"
	stReleased  = "released"
	stConflict  = "conflict"
	// stCheckpointed is a checkpoint's success.
	stCheckpointed = "checkpointed"
)

// LeaseInput is what a lease operation asked for.
type LeaseInput struct {
	Kind string `json:"kind"`
	// Owner is a short id of the owner token (renew, release, complete).
	Owner string `json:"owner,omitempty"`
	// OwnerFence is the fence of Owner's grant, for the fencing checks.
	OwnerFence int64 `json:"owner_fence,omitempty"`
	// TTL is the requested lease length (acquire, renew), nanoseconds.
	TTL int64 `json:"ttl_ns,omitempty"`
	// Wait is an acquire's wait_seconds: the service may hold it that long
	// while the lease is held. The model needs nothing more: the acquire
	// still takes effect at one instant within [call, return].
	Wait int64 `json:"wait_s,omitempty"`
	// Result is the canonical JSON result of a complete.
	Result string `json:"result,omitempty"`
	// Checkpoint is the canonical JSON value of a checkpoint.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Call and Ret are filled from the history for the model.
	Call int64 `json:"-"`
	Ret  int64 `json:"-"`
}

// LeaseOutput is what the service answered, as the model needs it.
type LeaseOutput struct {
	Status string `json:"status"`
	// Owner is the short id of a granted owner token.
	Owner string `json:"owner,omitempty"`
	Fence int64  `json:"fence,omitempty"`
	// ExpTs is lease_expires_at_timestamp (granted, renewed, held).
	ExpTs  int64  `json:"exp_ts,omitempty"`
	Result string `json:"result,omitempty"`
	// Checkpoint is the checkpoint a grant returned (canonical JSON, ""
	// for none) and CheckpointFence the fence of its writer.
	Checkpoint      string `json:"checkpoint,omitempty"`
	CheckpointFence int64  `json:"checkpoint_fence,omitempty"`
}

type leaseStatus uint8

const (
	lsFree leaseStatus = iota
	lsHeld
	lsCompleted
)

// LeaseState is one lease record in the model. It is a comparable value.
type LeaseState struct {
	Status leaseStatus
	// Owner of a held lease; "" when an unknown acquire may have granted it.
	Owner string
	// Fence is the fence of the latest grant; when FenceExact is false it is
	// only a lower bound (after an unknown grant).
	Fence      int64
	FenceExact bool
	// ExpLo and ExpHi bound the held lease's expiry (wall-clock ns).
	ExpLo, ExpHi int64
	Result       string
	// Checkpoint is the last stored checkpoint ("" for none) and
	// CheckpointFence the fence of the holder that stored it.
	Checkpoint      string
	CheckpointFence int64
}

// free is the record after its holder released it: the fence and the
// checkpoint stay.
func (s LeaseState) free() LeaseState {
	return LeaseState{Status: lsFree, Fence: s.Fence, FenceExact: s.FenceExact, Checkpoint: s.Checkpoint, CheckpointFence: s.CheckpointFence}
}

// checkpointed is s with value stored by its holder.
func (s LeaseState) checkpointed(value string) LeaseState {
	s.Checkpoint, s.CheckpointFence = value, s.Fence
	return s
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

// leaseModel builds the porcupine model with tolerance tol.
func leaseModel(tol time.Duration) porcupine.Model {
	m := leaseStepper{tol: int64(tol)}
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string][]porcupine.Operation{}
			var keys []string
			for _, op := range h {
				k := op.Metadata.(leaseMeta).Key
				if _, ok := byKey[k]; !ok {
					keys = append(keys, k)
				}
				byKey[k] = append(byKey[k], op)
			}
			sort.Strings(keys)
			out := make([][]porcupine.Operation, 0, len(keys))
			for _, k := range keys {
				out = append(out, byKey[k])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{LeaseState{Status: lsFree, FenceExact: true}} },
		Step: func(state, input, output interface{}) []interface{} {
			return m.step(state.(LeaseState), input.(LeaseInput), output.(*LeaseOutput))
		},
		DescribeOperation: func(input, output interface{}) string {
			in := input.(LeaseInput)
			out := output.(*LeaseOutput)
			res := "?"
			if out != nil {
				res = out.Status
				if out.Fence != 0 {
					res += fmt.Sprintf(" fence=%d", out.Fence)
				}
				if out.Owner != "" {
					res += " owner=" + out.Owner
				}
				if out.ExpTs != 0 {
					res += fmt.Sprintf(" exp=%d", out.ExpTs)
				}
				if out.Checkpoint != "" {
					res += fmt.Sprintf(" checkpoint=%s/%d", out.Checkpoint, out.CheckpointFence)
				}
			}
			arg := ""
			if in.Owner != "" {
				arg = fmt.Sprintf("%s/%d", in.Owner, in.OwnerFence)
			}
			if in.Checkpoint != "" {
				arg += " " + in.Checkpoint
			}
			return fmt.Sprintf("%s(%s) -> %s", in.Kind, arg, res)
		},
		DescribeState: func(state interface{}) string {
			s := state.(LeaseState)
			fence := fmt.Sprint(s.Fence)
			if !s.FenceExact {
				fence = ">=" + fence
			}
			cp := ""
			if s.Checkpoint != "" {
				cp = fmt.Sprintf(", checkpoint %s by fence %d", s.Checkpoint, s.CheckpointFence)
			}
			switch s.Status {
			case lsHeld:
				hi := "inf"
				if s.ExpHi != math.MaxInt64 {
					hi = fmt.Sprintf("%.3f", float64(s.ExpHi%1e11)/1e9)
				}
				return fmt.Sprintf("held by %q fence %s exp [%.3f, %s] (s mod 100)%s", s.Owner, fence, float64(s.ExpLo%1e11)/1e9, hi, cp)
			case lsCompleted:
				return fmt.Sprintf("completed fence %s result %s", fence, s.Result)
			}
			return "free, last fence " + fence + cp
		},
		DescribeOperationMetadata: func(info interface{}) string {
			md := info.(leaseMeta)
			return fmt.Sprintf("key %s, process %d via %s, history index %d", md.Key, md.Process, md.Node, md.Index)
		},
	}
	return nm.ToModel()
}

// leaseMeta travels with each porcupine operation.
type leaseMeta struct {
	Key     string
	Process int
	Node    string
	Index   int
}

type leaseStepper struct{ tol int64 }

func (m leaseStepper) canBeExpired(in LeaseInput, s LeaseState) bool {
	return in.Ret >= s.ExpLo-m.tol
}

func (m leaseStepper) canBeUnexpired(in LeaseInput, s LeaseState) bool {
	return in.Call < satAdd(s.ExpHi, m.tol)
}

// expiryBounds computes the bounds of an expiry set by an operation with
// ttl, narrowed by the answer's whole-second timestamp; ok is false when the
// timestamp contradicts the operation's real-time window.
func (m leaseStepper) expiryBounds(in LeaseInput, ttl, ts int64) (lo, hi int64, ok bool) {
	lo, hi = satAdd(in.Call, ttl), satAdd(in.Ret, ttl)
	if ts <= 0 {
		return lo, hi, true
	}
	return m.narrow(lo, hi, ts)
}

// narrow intersects [lo, hi] with [ts, ts+1s), allowing tol of slack.
func (m leaseStepper) narrow(lo, hi, ts int64) (int64, int64, bool) {
	tsLo := ts * int64(time.Second)
	tsHi := tsLo + int64(time.Second)
	if satAdd(tsHi, m.tol) < lo || tsLo-m.tol > hi {
		return lo, hi, false
	}
	nlo, nhi := max(lo, tsLo), min(hi, tsHi)
	if nlo > nhi {
		nlo, nhi = nhi, nlo
	}
	return nlo, nhi, true
}

// fenceMatches checks a fence reported for the current record and returns
// the state with the fence made exact.
func fenceMatches(s LeaseState, f int64) (LeaseState, bool) {
	if s.FenceExact {
		return s, f == s.Fence
	}
	if f < s.Fence {
		return s, false
	}
	s.Fence, s.FenceExact = f, true
	return s, true
}

func (m leaseStepper) step(s LeaseState, in LeaseInput, out *LeaseOutput) []interface{} {
	if out == nil {
		return m.stepUnknown(s, in)
	}
	heldByCaller := s.Status == lsHeld && in.Owner != "" && s.Owner == in.Owner
	switch in.Kind {
	case fAcquire, fFinalAcquire:
		switch out.Status {
		case stCompleted:
			if s.Status != lsCompleted || out.Result != s.Result {
				return nil
			}
			if ns, ok := fenceMatches(s, out.Fence); ok {
				return []interface{}{ns}
			}
			return nil
		case stHeld:
			if s.Status != lsHeld || !m.canBeUnexpired(in, s) {
				return nil
			}
			ns, ok := fenceMatches(s, out.Fence)
			if !ok {
				return nil
			}
			if out.ExpTs > 0 {
				lo, hi, ok := m.narrow(ns.ExpLo, ns.ExpHi, out.ExpTs)
				if !ok {
					return nil
				}
				ns.ExpLo, ns.ExpHi = lo, hi
			}
			return []interface{}{ns}
		case stGranted:
			switch {
			case s.Status == lsCompleted:
				return nil
			case s.Status == lsHeld && !m.canBeExpired(in, s):
				return nil
			case out.Fence <= s.Fence:
				return nil
			case out.Checkpoint != s.Checkpoint || out.CheckpointFence != s.CheckpointFence:
				// A grant returns exactly the last stored checkpoint.
				return nil
			}
			lo, hi, ok := m.expiryBounds(in, in.TTL, out.ExpTs)
			if !ok {
				return nil
			}
			return []interface{}{LeaseState{Status: lsHeld, Owner: out.Owner, Fence: out.Fence, FenceExact: true, ExpLo: lo, ExpHi: hi,
				Checkpoint: s.Checkpoint, CheckpointFence: s.CheckpointFence}}
		}
		return nil
	case fRenew, fRelease, fComplete, fCheckpoint:
		if out.Status == stLost {
			if !heldByCaller || m.canBeExpired(in, s) {
				return []interface{}{s}
			}
			return nil
		}
		if !heldByCaller || !m.canBeUnexpired(in, s) {
			return nil
		}
		ns, ok := fenceMatches(s, out.Fence)
		if !ok {
			return nil
		}
		switch {
		case in.Kind == fRenew && out.Status == stRenewed:
			lo, hi, ok := m.expiryBounds(in, in.TTL, out.ExpTs)
			if !ok {
				return nil
			}
			ns.ExpLo, ns.ExpHi = lo, hi
			return []interface{}{ns}
		case in.Kind == fRelease && out.Status == stReleased:
			return []interface{}{ns.free()}
		case in.Kind == fCheckpoint && out.Status == stCheckpointed:
			return []interface{}{ns.checkpointed(in.Checkpoint)}
		case in.Kind == fComplete && out.Status == stCompleted:
			if out.Result != in.Result {
				return nil
			}
			return []interface{}{LeaseState{Status: lsCompleted, Fence: ns.Fence, FenceExact: ns.FenceExact, Result: in.Result}}
		}
		return nil
	}
	return nil
}

// stepUnknown gives the states after an operation whose outcome is unknown:
// unchanged, or changed as a success would have changed it at some time
// after the call.
func (m leaseStepper) stepUnknown(s LeaseState, in LeaseInput) []interface{} {
	out := []interface{}{s}
	heldByCaller := s.Status == lsHeld && in.Owner != "" && s.Owner == in.Owner
	switch in.Kind {
	case fAcquire, fFinalAcquire:
		if s.Status == lsFree || (s.Status == lsHeld && m.canBeExpired(in, s)) {
			out = append(out, LeaseState{Status: lsHeld, Fence: s.Fence + 1, FenceExact: false,
				ExpLo: satAdd(in.Call, in.TTL), ExpHi: math.MaxInt64, Checkpoint: s.Checkpoint, CheckpointFence: s.CheckpointFence})
		}
	case fRenew:
		if heldByCaller && m.canBeUnexpired(in, s) {
			ns := s
			ns.ExpLo, ns.ExpHi = satAdd(in.Call, in.TTL), math.MaxInt64
			out = append(out, ns)
		}
	case fRelease:
		if heldByCaller && m.canBeUnexpired(in, s) {
			out = append(out, s.free())
		}
	case fCheckpoint:
		if heldByCaller && m.canBeUnexpired(in, s) {
			out = append(out, s.checkpointed(in.Checkpoint))
		}
	case fComplete:
		if heldByCaller && m.canBeUnexpired(in, s) {
			out = append(out, LeaseState{Status: lsCompleted, Fence: s.Fence, FenceExact: s.FenceExact, Result: in.Result})
		}
	}
	return out
}

// canonicalJSON re-encodes a JSON value with sorted object keys and no
// insignificant space, so results can be compared as strings.
func canonicalJSON(raw []byte) string {
	if len(raw) == 0 {
		return ""
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return string(raw)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return string(raw)
	}
	return string(b)
}
