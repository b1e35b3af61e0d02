package fsm

import "github.com/holdfast/holdfast/internal/secret"

// liveLease returns the lease record for id if its lifecycle has not ended
// at the state's clock. A record past its absolute expiry is treated as
// absent even before a sweep removes it.
func (s *state) liveLease(id secret.Hash) *lease {
	l := s.lease(id)
	if l == nil || s.clock >= l.absoluteExpiresAt {
		return nil
	}
	return l
}

func (s *state) ttlValid(ttl int64) bool {
	return ttl >= s.settings.LeaseTTLMinSeconds && ttl <= s.settings.LeaseTTLMaxSeconds
}

// grant gives l to owner with a fresh fencing token and a short expiry
// capped at the lifecycle's end.
func (s *state) grant(l *lease, c *LeaseAcquire) LeaseResult {
	s.fencing++
	l.fencing = s.fencing
	l.owner = c.Owner
	l.state = leaseHeld
	l.leaseExpiresAt = min(s.clock+secondsToMillis(c.TTLSeconds), l.absoluteExpiresAt)
	return s.leaseResult(LeaseGranted, l)
}

func (s *state) leaseResult(o LeaseOutcome, l *lease) LeaseResult {
	r := LeaseResult{
		Outcome:           o,
		Now:               s.clock,
		FencingToken:      l.fencing,
		AbsoluteExpiresAt: l.absoluteExpiresAt,
	}
	switch l.state {
	case leaseHeld:
		r.LeaseExpiresAt = l.leaseExpiresAt
		r.TTLSeconds = ceilSeconds(l.leaseExpiresAt - s.clock)
	case leaseDone:
		r.CompletedAt = l.completedAt
		r.Result = l.result
	}
	if o == LeaseGranted {
		r.Checkpoint = l.checkpoint
	}
	return r
}

func (s *state) applyLeaseAcquire(c *LeaseAcquire) LeaseResult {
	if !s.ttlValid(c.TTLSeconds) || c.slotCount() > 1 && s.level < 2 {
		// Slots need level 2, which the leader checks before proposing;
		// the state refuses them too, so a snapshot at a lower level, whose
		// format has no slots, never has any to lose.
		return LeaseResult{Outcome: LeaseInvalid, Now: s.clock}
	}
	l := s.liveLease(c.Lease)
	if l == nil {
		// At the bound, a key with an ended record may still reuse it (looked
		// up only then: below the bound a new key costs no second lookup).
		ended := s.lease(c.Lease)
		if s.leaseCount() >= s.settings.MaxLeases && ended == nil {
			return LeaseResult{Outcome: LeaseLimitReached, Now: s.clock, Limit: s.settings.MaxLeases}
		}
		if ended != nil {
			s.dropLease(ended)
		}
		l = &lease{
			id:                c.Lease,
			fingerprint:       c.Fingerprint,
			absoluteExpiresAt: s.clock + secondsToMillis(s.settings.LeaseLifecycleSeconds),
		}
		s.putLease(l)
		s.counts.leases++
		s.timers.arm(leaseTimer(l.id), l.absoluteExpiresAt)
		if n := c.slotCount(); n > 1 {
			l.set = newSlotSet(n)
			return s.grantSlot(l, c)
		}
		return s.grant(l, c)
	}
	if !l.fingerprint.Equal(c.Fingerprint) {
		return LeaseResult{Outcome: LeaseConflict, Now: s.clock, AbsoluteExpiresAt: l.absoluteExpiresAt}
	}
	if c.slotCount() != l.slotCount() {
		return LeaseResult{Outcome: LeaseSlotsConflict, Now: s.clock, AbsoluteExpiresAt: l.absoluteExpiresAt, Slots: l.slotCount()}
	}
	if l.set != nil {
		return s.acquireSlot(l, c)
	}
	switch {
	case l.state == leaseDone:
		return s.leaseResult(LeaseCompleted, l)
	case l.state == leaseHeld && l.leaseExpiresAt > s.clock && l.owner.Equal(c.Owner):
		// The owner token is derived from the caller's request id (random
		// owner tokens never repeat): the same request again gets the same
		// grant, unchanged.
		return s.leaseResult(LeaseGranted, l)
	case l.state == leaseHeld && l.leaseExpiresAt > s.clock:
		r := s.leaseResult(LeaseHeld, l)
		r.TTLSeconds = 0
		r.RetryAfterSeconds = ceilSeconds(l.leaseExpiresAt - s.clock)
		return r
	}
	return s.grant(s.mutLease(l), c)
}

// owned returns l (live or nil) if owner holds it, unexpired, at the
// state's clock.
func (s *state) owned(l *lease, owner secret.Hash) *lease {
	if l == nil || l.state != leaseHeld || l.leaseExpiresAt <= s.clock || !l.owner.Equal(owner) {
		return nil
	}
	return l
}

func (s *state) applyLeaseRenew(c *LeaseRenew) LeaseResult {
	if !s.ttlValid(c.TTLSeconds) {
		return LeaseResult{Outcome: LeaseInvalid, Now: s.clock}
	}
	l := s.liveLease(c.Lease)
	if l != nil && l.set != nil {
		return s.renewSlot(l, c)
	}
	if l = s.owned(l, c.Owner); l == nil {
		return LeaseResult{Outcome: LeaseLost, Now: s.clock}
	}
	l = s.mutLease(l)
	l.leaseExpiresAt = min(s.clock+secondsToMillis(c.TTLSeconds), l.absoluteExpiresAt)
	return s.leaseResult(LeaseRenewed, l)
}

// endOwnership returns a writable copy of l (live or nil) if owner holds
// it, with the owner removed and the lease in state next; nil if owner
// does not hold it.
func (s *state) endOwnership(l *lease, owner secret.Hash, next leaseState) *lease {
	if l = s.owned(l, owner); l == nil {
		return nil
	}
	l = s.mutLease(l)
	l.state = next
	l.owner = secret.Hash{}
	l.leaseExpiresAt = 0
	return l
}

func (s *state) applyLeaseRelease(c *LeaseRelease) LeaseResult {
	l := s.liveLease(c.Lease)
	if l != nil && l.set != nil {
		return s.releaseSlot(l, c.Owner)
	}
	if l = s.endOwnership(l, c.Owner, leaseFree); l == nil {
		return LeaseResult{Outcome: LeaseLost, Now: s.clock}
	}
	return s.leaseResult(LeaseReleased, l)
}

func (s *state) applyLeaseComplete(c *LeaseComplete) LeaseResult {
	if int64(len(c.Result)) > s.settings.MaxResultBytes {
		return LeaseResult{Outcome: LeaseInvalid, Now: s.clock}
	}
	l := s.liveLease(c.Lease)
	if l != nil && l.set != nil {
		return LeaseResult{Outcome: LeaseSlotsRefused, Now: s.clock, AbsoluteExpiresAt: l.absoluteExpiresAt, Slots: l.slotCount()}
	}
	if l = s.endOwnership(l, c.Owner, leaseDone); l == nil {
		return LeaseResult{Outcome: LeaseLost, Now: s.clock}
	}
	l.completedAt = s.clock
	l.result = c.Result
	l.checkpoint = nil // the result replaces it
	return s.leaseResult(LeaseCompleted, l)
}

// applyLeaseCheckpoint stores the progress of the key's holder; an owner
// token that does not hold the key stores nothing, so a holder that lost
// its lease can never overwrite its successor's progress.
func (s *state) applyLeaseCheckpoint(c *LeaseCheckpoint) LeaseResult {
	if int64(len(c.Checkpoint)) > s.settings.MaxResultBytes || s.level < 2 {
		return LeaseResult{Outcome: LeaseInvalid, Now: s.clock}
	}
	l := s.liveLease(c.Lease)
	if l != nil && l.set != nil {
		return LeaseResult{Outcome: LeaseSlotsRefused, Now: s.clock, AbsoluteExpiresAt: l.absoluteExpiresAt, Slots: l.slotCount()}
	}
	holder := s.owned(l, c.Owner)
	if holder == nil && plantedLostCheckpoint && l != nil && l.state != leaseDone {
		holder = l
	}
	if holder == nil {
		return LeaseResult{Outcome: LeaseLost, Now: s.clock}
	}
	l = s.mutLease(holder)
	l.checkpoint = &Checkpoint{Value: c.Checkpoint, Fence: l.fencing, At: s.clock}
	r := s.leaseResult(LeaseCheckpointed, l)
	r.Checkpoint = &Checkpoint{Fence: l.fencing, At: s.clock}
	return r
}

// dropLease removes the record l (ended) with what it counts and its slots
// timer.
func (s *state) dropLease(l *lease) {
	s.counts.extraSlots -= l.extraSlots()
	if l.set != nil {
		s.timers.cancel(slotsTimer(l.id))
	}
	s.timers.disarm(leaseTimer(l.id), l.absoluteExpiresAt)
	s.removeLease(l.id)
}
