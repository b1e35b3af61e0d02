package fsm

import (
	"bytes"
	"slices"

	"github.com/holdfast/holdfast/internal/secret"
)

// Role is a queue capability carried by one of its three tokens.
type Role uint8

// Queue roles.
const (
	RoleWrite Role = iota + 1
	RoleWorker
	RoleRead
)

func (q *queue) token(r Role) secret.Hash {
	switch r {
	case RoleWrite:
		return q.write
	case RoleWorker:
		return q.worker
	case RoleRead:
		return q.read
	}
	return secret.Hash{}
}

// liveQueue returns the queue if it exists and has not reached its deadline.
func (s *state) liveQueue(id secret.ID, now int64) *queue {
	q := s.queue(id)
	if q == nil || now >= q.expiresAt {
		return nil
	}
	return q
}

// authorize finds a live queue and checks the presented token against the
// role's token in constant time.
func (s *state) authorize(id secret.ID, r Role, tok secret.Hash, now int64) (*queue, QueueOutcome) {
	q := s.liveQueue(id, now)
	if q == nil {
		return nil, QueueNotFound
	}
	want := q.token(r)
	if !want.Equal(tok) {
		return nil, QueueForbidden
	}
	return q, 0
}

// effectiveStatus is the job's status at time now, counting a claim whose
// window ended as returned (pending) or, after the last attempt, failed.
func effectiveStatus(j *job, now, maxAttempts int64) JobStatus {
	if j.status == JobClaimedStatus && j.visibleAt <= now {
		if j.attempts >= maxAttempts {
			return JobFailed
		}
		return JobPending
	}
	return j.status
}

func (s *state) jobView(q *queue, j *job, now int64) *JobView {
	v := &JobView{
		ID:             j.id,
		Key:            j.key,
		Payload:        j.payload,
		Status:         effectiveStatus(j, now, s.settings.QueueMaxAttempts),
		Attempts:       j.attempts,
		CreatedAt:      j.createdAt,
		UpdatedAt:      j.updatedAt,
		CompletedAt:    j.completedAt,
		QueueExpiresAt: q.expiresAt,
	}
	switch {
	case v.Status == JobClaimedStatus:
		v.VisibleAt = j.visibleAt
	case j.status == JobClaimedStatus:
		v.UpdatedAt = j.visibleAt // the claim ended when its window did
	case j.status == JobPending && j.visibleAt > now:
		v.AvailableAt = j.visibleAt // released with a delay
	}
	return v
}

// queueHeader is a queue's view without the counts by status, which take a
// pass over its jobs: only Counts.Total is set.
func queueHeader(q *queue) QueueView {
	return QueueView{ID: q.id, CreatedAt: q.createdAt, ExpiresAt: q.expiresAt, Counts: Counts{Total: len(q.jobs)}}
}

// queueView is a queue's view with its jobs counted by status at time now.
func (s *state) queueView(q *queue, now int64) QueueView {
	v := queueHeader(q)
	for _, j := range q.jobs {
		switch effectiveStatus(j, now, s.settings.QueueMaxAttempts) {
		case JobPending:
			v.Counts.Pending++
		case JobClaimedStatus:
			v.Counts.Claimed++
		case JobCompleted:
			v.Counts.Completed++
		case JobFailed:
			v.Counts.Failed++
		}
	}
	return v
}

// queueResult is a command's result. Its queue view has no counts by status
// (see QueueResult.Queue): no answer to a job operation shows them.
func (s *state) queueResult(o QueueOutcome, q *queue, j *job) QueueResult {
	r := QueueResult{Outcome: o, Now: s.clock}
	if q != nil && !s.quiet {
		r.Queue = queueHeader(q)
		if j != nil {
			r.Job = s.jobView(q, j, s.clock)
		}
	}
	return r
}

// queueIndexHint is the most jobs a new queue's indexes are made for.
const queueIndexHint = 128

func (s *state) applyQueueCreate(c *QueueCreate) QueueResult {
	if s.counts.queues >= s.settings.MaxQueues {
		return QueueResult{Outcome: QueueLimitReached, Now: s.clock, Limit: s.settings.MaxQueues}
	}
	cl := s.client(c.Client)
	if cl != nil {
		cl = s.mutClient(cl)
		cl.prune(s.clock)
		s.rearmClient(cl)
		if int64(len(cl.leaves)) >= s.settings.QueuesPerClient {
			return QueueResult{
				Outcome:           QueueRateLimited,
				Now:               s.clock,
				RetryAfterSeconds: max(1, ceilSeconds(slices.Min(cl.leaves)-s.clock)),
			}
		}
	}
	if s.queue(c.Queue) != nil {
		return QueueResult{Outcome: QueueIDTaken, Now: s.clock}
	}
	if cl == nil || len(cl.leaves) == 0 {
		// Absent, or removed just now with its last entry.
		s.counts.clients++
		cl = s.mutClient(&client{id: c.Client})
	}
	cl.add(s.clock + secondsToMillis(s.settings.QueueCreateWindowSeconds))
	s.rearmClient(cl)

	q := &queue{
		id:        c.Queue,
		createdAt: s.clock,
		expiresAt: s.clock + secondsToMillis(s.settings.QueueLifetimeSeconds),
		write:     c.WriteToken,
		worker:    c.WorkerToken,
		read:      c.ReadToken,
		// Room for the jobs a queue takes at the default limit, so that
		// enqueues do not grow the indexes step by step.
		byKey: make(map[string]int, min(s.settings.QueueMaxJobs, queueIndexHint)),
		byID:  make(map[secret.ID]int, min(s.settings.QueueMaxJobs, queueIndexHint)),
	}
	s.mutQueue(q)
	s.counts.queues++
	s.timers.arm(queueTimer(q.id), q.expiresAt)
	return s.queueResult(QueueCreated, q, nil)
}

// prune drops the creations that have left the window at now.
func (c *client) prune(now int64) {
	k := 0
	for i, t := range c.leaves {
		if t <= now {
			if c.seqs[i] != 0 {
				c.gone = append(c.gone, c.seqs[i])
			}
			continue
		}
		c.leaves[k], c.seqs[k] = t, c.seqs[i]
		k++
	}
	c.leaves, c.seqs = c.leaves[:k], c.seqs[:k]
}

// add records a creation that leaves the window at t.
func (c *client) add(t int64) {
	c.leaves = append(c.leaves, t)
	c.seqs = append(c.seqs, 0)
}

// rearmClient keeps the client's timer a pure function of its record: armed
// at its earliest entry, or the record removed when it has none. It reports
// whether the record was removed.
func (s *state) rearmClient(cl *client) bool {
	if len(cl.leaves) == 0 {
		s.removeClient(cl)
		s.timers.cancel(clientTimer(cl.id))
		return true
	}
	s.timers.set(clientTimer(cl.id), slices.Min(cl.leaves))
	return false
}

func (s *state) applyJobEnqueue(c *JobEnqueue) QueueResult {
	q, o := s.authorize(c.Queue, RoleWrite, c.Token, s.clock)
	if q == nil {
		return QueueResult{Outcome: o, Now: s.clock}
	}
	if ValidJobKey(c.Key) != nil || int64(len(c.Payload)) > s.settings.MaxPayloadBytes {
		return QueueResult{Outcome: QueueInvalid, Now: s.clock}
	}
	if i, ok := q.byKey[c.Key]; ok {
		j := q.jobs[i]
		if bytes.Equal(j.payload, c.Payload) {
			return s.queueResult(JobDeduplicated, q, j)
		}
		return s.queueResult(JobKeyConflict, q, j)
	}
	if int64(len(q.jobs)) >= s.settings.QueueMaxJobs {
		return s.queueResult(JobLimitReached, q, nil)
	}
	if _, taken := q.byID[c.Job]; taken {
		return QueueResult{Outcome: JobIDTaken, Now: s.clock}
	}
	q = s.touchQueue(q) // the header does not count jobs
	j := &job{
		id:        c.Job,
		key:       c.Key,
		payload:   c.Payload,
		status:    JobPending,
		createdAt: s.clock,
		updatedAt: s.clock,
	}
	q.addJob(j)
	s.mutJob(q, len(q.jobs)-1)
	return s.queueResult(JobCreated, q, j)
}

func (s *state) visibilityValid(v int64) bool {
	return v >= s.settings.VisibilityMinSeconds && v <= s.settings.VisibilityMaxSeconds
}

// endClaim moves a claimed job back to pending, or to failed when it has used
// its last attempt, and disarms its timer. It reports whether the job failed.
func (s *state) endClaim(q *queue, j *job, at int64) bool {
	s.timers.cancel(claimTimer(q.id, j.id))
	j.updatedAt = at
	j.visibleAt = 0
	if j.attempts >= s.settings.QueueMaxAttempts {
		j.status = JobFailed
		return true
	}
	j.status = JobPending
	return false
}

func (s *state) applyJobClaim(c *JobClaim) QueueResult {
	q, o := s.authorize(c.Queue, RoleWorker, c.Token, s.clock)
	if q == nil {
		return QueueResult{Outcome: o, Now: s.clock}
	}
	if !s.visibilityValid(c.VisibilitySeconds) {
		return QueueResult{Outcome: QueueInvalid, Now: s.clock}
	}
	if c.ByRequest {
		if j := q.activeClaim(c.Receipt, s.clock); j != nil {
			return s.queueResult(JobClaimed, q, j) // the same request again
		}
	}
	for i := q.settled; i < len(q.jobs); i++ {
		j := q.jobs[i]
		if j.status == JobClaimedStatus && j.visibleAt <= s.clock {
			q = s.touchQueue(q)
			j = s.mutJob(q, i)
			s.endClaim(q, j, j.visibleAt)
		}
		if j.status != JobPending || j.visibleAt > s.clock {
			continue // settled, claimed, or released with a delay not yet over
		}
		q = s.touchQueue(q)
		j = s.mutJob(q, i)
		j.status = JobClaimedStatus
		j.attempts++
		j.receipt = c.Receipt
		j.updatedAt = s.clock
		j.visibleAt = min(s.clock+secondsToMillis(c.VisibilitySeconds), q.expiresAt)
		s.timers.set(claimTimer(q.id, j.id), j.visibleAt)
		q.skipSettled()
		return s.queueResult(JobClaimed, q, j)
	}
	return s.queueResult(QueueEmpty, q, nil)
}

// activeClaim returns the job whose claim, unexpired at now, has receipt.
func (q *queue) activeClaim(receipt secret.Hash, now int64) *job {
	for _, j := range q.jobs[q.settled:] {
		if j.status == JobClaimedStatus && j.visibleAt > now && j.receipt.Equal(receipt) {
			return j
		}
	}
	return nil
}

// skipSettled moves q.settled past leading jobs that are completed or
// failed. q must be writable.
func (q *queue) skipSettled() {
	for q.settled < len(q.jobs) {
		if st := q.jobs[q.settled].status; st != JobCompleted && st != JobFailed {
			return
		}
		q.settled++
	}
}

// receiptJob resolves the queue, the job and the receipt shared by ack,
// release and renew. On success it returns writable copies and the job's index.
func (s *state) receiptJob(qid secret.ID, tok secret.Hash, jid secret.ID, rcpt secret.Hash, ack bool) (*queue, *job, QueueResult) {
	q, o := s.authorize(qid, RoleWorker, tok, s.clock)
	if q == nil {
		return nil, nil, QueueResult{Outcome: o, Now: s.clock}
	}
	i, ok := q.byID[jid]
	if !ok {
		return nil, nil, QueueResult{Outcome: JobNotFound, Now: s.clock}
	}
	j := q.jobs[i]
	reject := func(r RejectReason) (*queue, *job, QueueResult) {
		res := s.queueResult(ReceiptRejected, q, j)
		res.Reason = r
		return nil, nil, res
	}
	switch {
	case j.receipt.IsZero() || !j.receipt.Equal(rcpt) && !(plantedSupersededReceipt && j.status == JobClaimedStatus):
		return reject(ReceiptMismatch)
	case j.status == JobCompleted && ack:
		return nil, nil, s.queueResult(JobAcked, q, j)
	case j.status == JobCompleted:
		return reject(ReceiptJobCompleted)
	case j.status != JobClaimedStatus || j.visibleAt <= s.clock:
		return reject(ReceiptExpired)
	}
	q = s.touchQueue(q)
	return q, s.mutJob(q, i), QueueResult{}
}

func (s *state) applyJobAck(c *JobAck) QueueResult {
	q, j, r := s.receiptJob(c.Queue, c.Token, c.Job, c.Receipt, true)
	if j == nil {
		return r
	}
	s.timers.cancel(claimTimer(q.id, j.id))
	j.status = JobCompleted
	j.updatedAt = s.clock
	j.completedAt = s.clock
	j.visibleAt = 0
	return s.queueResult(JobAcked, q, j)
}

// MaxReleaseDelaySeconds bounds a release's delay_seconds.
const MaxReleaseDelaySeconds = 900

func (s *state) applyJobRelease(c *JobRelease) QueueResult {
	if c.DelaySeconds < 0 || c.DelaySeconds > MaxReleaseDelaySeconds {
		return QueueResult{Outcome: QueueInvalid, Now: s.clock}
	}
	q, j, r := s.receiptJob(c.Queue, c.Token, c.Job, c.Receipt, false)
	if j == nil {
		return r
	}
	if !s.endClaim(q, j, s.clock) && c.DelaySeconds > 0 {
		// A pending job's visibleAt is when it may be claimed again; the
		// queue's deadline caps it like any claim window.
		j.visibleAt = min(s.clock+secondsToMillis(c.DelaySeconds), q.expiresAt)
	}
	return s.queueResult(JobReleased, q, j)
}

// applyJobRetry moves a failed job, or one whose last claim's window has
// ended, back to pending with no attempts.
func (s *state) applyJobRetry(c *JobRetry) QueueResult {
	q, o := s.authorize(c.Queue, RoleWrite, c.Token, s.clock)
	if q == nil {
		return QueueResult{Outcome: o, Now: s.clock}
	}
	i, ok := q.byID[c.Job]
	if !ok {
		return QueueResult{Outcome: JobNotFound, Now: s.clock}
	}
	if effectiveStatus(q.jobs[i], s.clock, s.settings.QueueMaxAttempts) != JobFailed {
		return s.queueResult(JobNotFailed, q, q.jobs[i])
	}
	q = s.mutQueue(q) // settled may move back: the header must say so
	j := s.mutJob(q, i)
	if j.status == JobClaimedStatus {
		s.endClaim(q, j, j.visibleAt)
	}
	j.status = JobPending
	j.attempts = 0
	j.updatedAt = s.clock
	j.visibleAt = 0
	q.settled = min(q.settled, i)
	return s.queueResult(JobRetried, q, j)
}

func (s *state) applyJobRenew(c *JobRenew) QueueResult {
	if !s.visibilityValid(c.VisibilitySeconds) {
		return QueueResult{Outcome: QueueInvalid, Now: s.clock}
	}
	q, j, r := s.receiptJob(c.Queue, c.Token, c.Job, c.Receipt, false)
	if j == nil {
		return r
	}
	j.visibleAt = min(s.clock+secondsToMillis(c.VisibilitySeconds), q.expiresAt)
	j.updatedAt = s.clock
	s.timers.set(claimTimer(q.id, j.id), j.visibleAt)
	return s.queueResult(JobRenewed, q, j)
}
