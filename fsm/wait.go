package fsm

// Waiting requests live on the leader, outside the state machine: they ask
// these read-only questions to know whether trying again can succeed, and
// until when nothing can change by time alone.

// ClaimWait reports whether the claim c could be answered with a job at
// nodeNow (a claimable job, or for a claim by request id its active claim),
// and otherwise the earliest later time at which a job becomes claimable by
// time alone (a claim window or a release's delay ending, or the queue's
// deadline, when a claim answers that the queue is gone). With no queue,
// ready is true: a claim answers that.
func (f *FSM) ClaimWait(c *JobClaim, nodeNow int64) (ready bool, nextAt int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := f.st.readNow(nodeNow)
	q := f.st.liveQueue(c.Queue, now)
	if q == nil || c.ByRequest && q.activeClaim(c.Receipt, now) != nil {
		return true, 0
	}
	nextAt = q.expiresAt
	for _, j := range q.jobs[q.settled:] {
		switch {
		case j.status == JobPending && j.visibleAt <= now:
			return true, 0
		case j.status == JobClaimedStatus && j.visibleAt <= now:
			if j.attempts < f.st.settings.QueueMaxAttempts {
				return true, 0
			}
		case j.status == JobPending || j.status == JobClaimedStatus && j.attempts < f.st.settings.QueueMaxAttempts:
			nextAt = min(nextAt, j.visibleAt)
		}
	}
	return false, nextAt
}

// AcquireWait reports whether the acquire c could be answered with
// anything but "held" at nodeNow (granted, completed, conflict, the same
// grant again); if not, held is the "held" answer it would get now, whose
// LeaseExpiresAt is when the holder's lease ends unless it is renewed.
func (f *FSM) AcquireWait(c *LeaseAcquire, nodeNow int64) (held LeaseResult, ready bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := f.st.readNow(nodeNow)
	l := f.st.lease(c.Lease)
	if l != nil && l.set != nil && now < l.absoluteExpiresAt && l.fingerprint.Equal(c.Fingerprint) {
		return slotsWait(l, c, now)
	}
	if l == nil || now >= l.absoluteExpiresAt || !l.fingerprint.Equal(c.Fingerprint) ||
		c.slotCount() != l.slotCount() || l.state != leaseHeld || l.leaseExpiresAt <= now || l.owner.Equal(c.Owner) {
		return LeaseResult{}, true
	}
	return heldAnswer(l, now, l.fencing, l.leaseExpiresAt), false
}

// heldAnswer is the "held" answer a waiting acquire of l would get at now,
// naming the holder's fence and expiry (of the earliest-ending holder of a
// multi-slot key).
func heldAnswer(l *lease, now int64, fence uint64, expiresAt int64) LeaseResult {
	r := LeaseResult{
		Outcome:           LeaseHeld,
		Now:               now,
		FencingToken:      fence,
		LeaseExpiresAt:    expiresAt,
		AbsoluteExpiresAt: l.absoluteExpiresAt,
		RetryAfterSeconds: ceilSeconds(expiresAt - now),
	}
	if l.set != nil {
		r.Slots, r.Held = l.slotCount(), uint32(l.set.len())
	}
	return r
}
