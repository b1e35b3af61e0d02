//go:build unix

package fault

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// FencedStore is the protected resource of the fenced-resource workload: a
// register per key living in the harness that, like the system a lease
// protects, remembers the highest fencing token it has seen and rejects a
// write carrying a lower one. With the fence check disabled it accepts
// every write, which is what a system without fencing does.
type FencedStore struct {
	check bool

	mu   sync.Mutex
	regs map[string]*register
}

type register struct {
	maxFence int64
	value    string
	log      []StoreWrite
}

// StoreWrite is one write the store was asked to make.
type StoreWrite struct {
	Key      string `json:"key"`
	Value    string `json:"value"`
	Fence    int64  `json:"fence"`
	Owner    string `json:"owner"`
	Process  int    `json:"process"`
	At       int64  `json:"at_ns"`
	Accepted bool   `json:"accepted"`
	// Seq is the write's position in its key's log.
	Seq int `json:"seq"`
}

// NewFencedStore returns an empty store; check enables the fence check.
func NewFencedStore(check bool) *FencedStore {
	return &FencedStore{check: check, regs: map[string]*register{}}
}

// Write applies value to key if fence is not lower than the highest fence
// the key has seen (or always, without the check). It reports acceptance.
func (s *FencedStore) Write(key, value string, fence int64, owner string, process int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.regs[key]
	if r == nil {
		r = &register{}
		s.regs[key] = r
	}
	ok := !s.check || fence >= r.maxFence
	if ok {
		r.value = value
		if fence > r.maxFence {
			r.maxFence = fence
		}
	}
	r.log = append(r.log, StoreWrite{Key: key, Value: value, Fence: fence, Owner: owner, Process: process, At: time.Now().UnixNano(), Accepted: ok, Seq: len(r.log)})
	return ok
}

// Log returns every write of every key, by key then sequence.
func (s *FencedStore) Log() []StoreWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := slices.Sorted(maps.Keys(s.regs))
	var out []StoreWrite
	for _, k := range keys {
		out = append(out, s.regs[k].log...)
	}
	return out
}

// Value returns a key's current value.
func (s *FencedStore) Value(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.regs[key]; r != nil {
		return r.value
	}
	return ""
}

// StoreReport is what the fenced-resource checker found.
type StoreReport struct {
	Writes, Accepted, Rejected int
	// StaleAttempts counts writes made after the writer's lease had
	// certainly expired (the workload's deliberate "paused worker" writes).
	StaleAttempts int
	// LostUpdates counts accepted writes that overwrote a newer owner's
	// accepted write (a lower fence accepted after a higher one): the newer
	// owner's update is lost.
	LostUpdates int
	// SharedToken counts fences whose accepted writes came from two owners.
	SharedToken int
	// ValidHolderRejected counts writes rejected although the writer's lease
	// was certainly still valid: someone wrote with a higher fence during a
	// valid lease, so fences or mutual exclusion were broken upstream.
	ValidHolderRejected int
	Examples            []string
}

type validSpan struct{ from, until int64 }

// CheckStore checks the store's log against the lease history.
func CheckStore(log []StoreWrite, ops []Op, stale map[string]bool, tol time.Duration) *StoreReport {
	rep := &StoreReport{}
	ex := func(count int, format string, args ...any) {
		if count <= 3 {
			rep.Examples = append(rep.Examples, fmt.Sprintf(format, args...))
		}
	}
	// Spans during which each owner's lease was certainly valid: from the
	// return of an acknowledged grant or renewal to its certain expiry bound
	// minus tol, cut short by the owner's own release or completion.
	spans := map[string][]validSpan{}
	for _, o := range leaseOps(ops) {
		out, ok := outputOf(o)
		if !ok {
			continue
		}
		in := o.Input.(LeaseInput)
		switch {
		case (o.F == fAcquire || o.F == fFinalAcquire) && out.Status == stGranted:
			spans[out.Owner] = append(spans[out.Owner], validSpan{o.Ret, validFrom(o, out) - int64(tol)})
		case o.F == fRenew && out.Status == stRenewed:
			spans[in.Owner] = append(spans[in.Owner], validSpan{o.Ret, validFrom(o, out) - int64(tol)})
		}
	}
	validAt := func(owner string, t int64) bool {
		for _, s := range spans[owner] {
			if t >= s.from && t < s.until {
				return true
			}
		}
		return false
	}

	owners := map[string]map[int64]string{} // key -> fence -> owner
	byKey := map[string][]StoreWrite{}
	for _, w := range log {
		byKey[w.Key] = append(byKey[w.Key], w)
	}
	keys := slices.Sorted(maps.Keys(byKey))
	for _, k := range keys {
		var maxFence int64
		maxOwner := ""
		for _, w := range byKey[k] {
			rep.Writes++
			if stale[w.Value] {
				rep.StaleAttempts++
			}
			if !w.Accepted {
				rep.Rejected++
				if validAt(w.Owner, w.At) {
					rep.ValidHolderRejected++
					ex(rep.ValidHolderRejected, "write %s by %s with fence %d on %s rejected while its lease was certainly valid (store had seen fence %d)", w.Value, w.Owner, w.Fence, k, maxFence)
				}
				continue
			}
			rep.Accepted++
			if w.Fence < maxFence {
				rep.LostUpdates++
				ex(rep.LostUpdates, "write %s by %s with fence %d on %s overwrote the newer write of %s with fence %d", w.Value, w.Owner, w.Fence, k, maxOwner, maxFence)
			} else {
				maxFence, maxOwner = w.Fence, w.Owner
			}
			if owners[k] == nil {
				owners[k] = map[int64]string{}
			}
			if prev, ok := owners[k][w.Fence]; ok && prev != w.Owner {
				rep.SharedToken++
				ex(rep.SharedToken, "fence %d on %s was used by two owners: %s and %s", w.Fence, k, prev, w.Owner)
			} else {
				owners[k][w.Fence] = w.Owner
			}
		}
	}
	return rep
}
