package fsm

import "github.com/holdfast/holdfast/internal/secret"

// applySweep handles due timers in their total order, at most c.Limit of
// them, so a single entry never stalls Apply. Every handler re-checks the
// record against the clock, so a stale timer does nothing harmful.
func (s *state) applySweep(c *Sweep) SweepResult {
	r := SweepResult{Now: s.clock}
	limit := max(c.Limit, 1)
	var work int64
	for {
		tm, ok := s.timers.next()
		if !ok || tm.at > s.clock {
			return r
		}
		if work >= limit {
			r.More = true
			return r
		}
		s.timers.pop(tm)
		work++
		switch tm.key.kind {
		case timerLease:
			s.sweepLease(secret.Hash(tm.key.a), &r)
		case timerQueue:
			var id secret.ID
			copy(id[:], tm.key.a[:])
			work += s.sweepQueue(id, &r)
		case timerClaim:
			var id secret.ID
			copy(id[:], tm.key.a[:])
			s.sweepClaim(id, secret.ID(tm.key.b), &r)
		case timerClient:
			s.sweepClient(secret.Hash(tm.key.a), &r)
		case timerSlots:
			s.sweepSlots(secret.Hash(tm.key.a), &r)
		}
	}
}

func (s *state) sweepLease(id secret.Hash, r *SweepResult) {
	if l := s.lease(id); l != nil && l.absoluteExpiresAt <= s.clock {
		s.dropLease(l)
		r.LeasesRemoved++
	}
}

// sweepQueue removes an expired queue and disarms its claim timers. It
// returns the extra work done.
func (s *state) sweepQueue(id secret.ID, r *SweepResult) int64 {
	q := s.queue(id)
	if q == nil || q.expiresAt > s.clock {
		return 0
	}
	var work int64
	for _, j := range q.jobs {
		if j.status == JobClaimedStatus {
			s.timers.cancel(claimTimer(q.id, j.id))
			work++
		}
	}
	s.removeQueue(q)
	r.QueuesRemoved++
	return work
}

func (s *state) sweepClaim(qid, jid secret.ID, r *SweepResult) {
	q := s.queue(qid)
	if q == nil {
		return
	}
	i, ok := q.byID[jid]
	if !ok {
		return
	}
	if j := q.jobs[i]; j.status != JobClaimedStatus || j.visibleAt > s.clock {
		return
	}
	q = s.touchQueue(q)
	j := s.mutJob(q, i)
	if s.endClaim(q, j, j.visibleAt) {
		r.JobsFailed++
	} else {
		r.ClaimsReturned++
	}
}

func (s *state) sweepClient(id secret.Hash, r *SweepResult) {
	cl := s.client(id)
	if cl == nil {
		return
	}
	cl = s.mutClient(cl)
	cl.prune(s.clock)
	if s.rearmClient(cl) {
		r.ClientsPruned++
	}
}
