package fsm

import "github.com/holdfast/holdfast/internal/secret"

// Waiting requests live on the leader, outside the state machine: they ask
// these read-only questions to know whether trying again can succeed, and
// until when nothing can change by time alone.

// ClaimWait reports whether a claim on the queue could take a job at
// nodeNow, and otherwise the earliest later time at which one becomes
// claimable by time alone (a claim window or a release's delay ending, or
// the queue's deadline, when a claim answers that the queue is gone). With
// no queue, ready is true: a claim answers that.
func (f *FSM) ClaimWait(id secret.ID, nodeNow int64) (ready bool, nextAt int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := f.st.readNow(nodeNow)
	q := f.st.liveQueue(id, now)
	if q == nil {
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

// LeaseWait reports whether an acquire of the lease could be answered with
// anything but "held" at nodeNow, and otherwise when the holder's lease
// ends unless it is renewed.
func (f *FSM) LeaseWait(id secret.Hash, nodeNow int64) (ready bool, heldUntil int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := f.st.readNow(nodeNow)
	l := f.st.leases[id]
	if l == nil || now >= l.absoluteExpiresAt || l.state != leaseHeld || l.leaseExpiresAt <= now {
		return true, 0
	}
	return false, l.leaseExpiresAt
}
