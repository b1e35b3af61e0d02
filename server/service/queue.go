package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsoncanon"
	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/internal/secret"
)

// QueueAuth is a validated queue id and the hash of a bearer token.
type QueueAuth struct {
	queue secret.ID
	token secret.Hash
}

// ParseQueueAuth validates the queue id and the bearer token's format;
// tokenPresent says whether a token was sent at all.
func ParseQueueAuth(queueID, token string, tokenPresent bool) (QueueAuth, error) {
	id, ok := secret.ParseID(queueID)
	if !ok {
		return QueueAuth{}, &Error{Kind: KindNotFound, Message: "queue not found: queue_id must be 32 lowercase hex characters", Field: "queue_id"}
	}
	if !tokenPresent {
		return QueueAuth{}, &Error{Kind: KindUnauthorized, Message: "a queue token is required: send Authorization: Bearer TOKEN", Field: "Authorization", Challenge: true}
	}
	if !secret.ValidToken(token) {
		return QueueAuth{}, &Error{Kind: KindUnauthorized, Message: "the token is not a queue token: tokens are 64 lowercase hex characters", Field: "Authorization", Challenge: true}
	}
	return QueueAuth{queue: id, token: secret.RoleTokenHash(token)}, nil
}

// CreateQueueRequest asks for a new queue.
type CreateQueueRequest struct {
	// ClientIP is the client's address, counted by the per-client quota.
	ClientIP string
}

// EnqueueRequest adds a job: the body of POST /queue/{id}/jobs.
type EnqueueRequest struct {
	Auth    QueueAuth       `json:"-"`
	JobKey  *string         `json:"job_key" jsonschema:"1 to 64 characters, starting with an ASCII letter or digit, then letters, digits, '.', '_', ':' or '-'; retrying the same key and payload returns the existing job"`
	Payload json.RawMessage `json:"payload" jsonschema:"any JSON value, including null, at most 16384 bytes encoded"`
}

// ClaimRequest claims the next job: the body of POST /queue/{id}/claim.
type ClaimRequest struct {
	Auth              QueueAuth `json:"-"`
	VisibilityTimeout *int64    `json:"visibility_timeout,omitempty" jsonschema:"seconds the claim hides the job from other workers, 30 to 900, default 60; capped at the queue's expiry"`
	RequestID         *string   `json:"request_id,omitempty" jsonschema:"your own secret naming this claim (32 to 128 letters, digits, '-' or '_'): repeated while the claim is active, it answers the same job and receipt"`
	WaitSeconds       *int64    `json:"wait_seconds,omitempty" jsonschema:"seconds to wait for a job when none is available, 0 to 20, default 0; waiting claims are served in arrival order"`
}

// AckJobRequest completes a claimed job: the body of ack.
type AckJobRequest struct {
	Auth    QueueAuth `json:"-"`
	JobID   string    `json:"-"`
	Receipt *string   `json:"receipt" jsonschema:"the secret receipt returned by the claim (64 lowercase hex characters)"`
}

// ReleaseJobRequest gives a claimed job back: the body of release.
type ReleaseJobRequest struct {
	Auth         QueueAuth `json:"-"`
	JobID        string    `json:"-"`
	Receipt      *string   `json:"receipt" jsonschema:"the secret receipt returned by the claim (64 lowercase hex characters)"`
	DelaySeconds *int64    `json:"delay_seconds,omitempty" jsonschema:"seconds before the job may be claimed again, 0 to 900, default 0; capped at the queue's expiry"`
}

// RenewJobRequest extends a claim: the body of renew.
type RenewJobRequest struct {
	Auth              QueueAuth `json:"-"`
	JobID             string    `json:"-"`
	Receipt           *string   `json:"receipt" jsonschema:"the secret receipt returned by the claim (64 lowercase hex characters)"`
	VisibilityTimeout *int64    `json:"visibility_timeout,omitempty" jsonschema:"new visibility window in seconds from now, 30 to 900, default 60; capped at the queue's expiry"`
}

// RetryJobRequest moves a failed job back to pending.
type RetryJobRequest struct {
	Auth  QueueAuth
	JobID string
}

// ReadQueueRequest reads a queue's counts: linearizable unless Stale.
type ReadQueueRequest struct {
	Auth  QueueAuth
	Stale bool
	// Wait must be 0: only a job read can wait.
	Wait time.Duration
}

// ReadJobRequest reads one job: linearizable unless Stale; with Wait, the
// read waits that long for the job's outcome.
type ReadJobRequest struct {
	Auth  QueueAuth
	JobID string
	Stale bool
	Wait  time.Duration
}

// QueueCreated is a new queue with its three secret role tokens.
type QueueCreated struct {
	Queue                              fsm.QueueView
	WriteToken, WorkerToken, ReadToken string
}

// JobAnswer is a job operation's success: the state machine's result (a
// job created or deduplicated, claimed, acked, released, renewed or
// retried, or an empty queue) and, for a claim, the secret receipt ("" for
// every other operation).
type JobAnswer struct {
	Result  *fsm.QueueResult
	Receipt string
}

// parseJobID validates a job id.
func parseJobID(jobID string) (secret.ID, *Error) {
	id, ok := secret.ParseID(jobID)
	if !ok {
		return id, &Error{Kind: KindNotFound, Message: "job not found: job_id must be 32 lowercase hex characters", Field: "job_id"}
	}
	return id, nil
}

// preauthorize, on the leader, refuses a request whose queue or token is
// wrong before anything is proposed; Apply checks again. A leader that has
// not yet applied its predecessors' entries skips the check: its state could
// miss a queue that exists.
func (s *Service) preauthorize(a QueueAuth, role fsm.Role) *Error {
	if !s.node.IsReadyLeader() {
		return nil
	}
	if o := s.node.FSM().Authorize(a.queue, role, a.token, s.node.Now()); o != 0 {
		return queueError(&fsm.QueueResult{Outcome: o})
	}
	return nil
}

const maxIDRetries = 3

// CreateQueue creates a queue with fresh role tokens.
func (s *Service) CreateQueue(ctx context.Context, in CreateQueueRequest) (QueueCreated, error) {
	for attempt := 0; attempt < maxIDRetries; attempt++ {
		id, err := secret.NewID()
		if err != nil {
			return QueueCreated{}, Fail(KindInternal, "could not generate a queue id", nil)
		}
		var toks [3]string
		for i := range toks {
			if toks[i], err = secret.NewToken(); err != nil {
				return QueueCreated{}, Fail(KindInternal, "could not generate queue tokens", nil)
			}
		}
		r, bad := s.leadQueue(ctx, &leaderOp{cmd: &fsm.QueueCreate{
			Queue:      id,
			WriteToken: secret.RoleTokenHash(toks[0]), WorkerToken: secret.RoleTokenHash(toks[1]), ReadToken: secret.RoleTokenHash(toks[2]),
			Client: secret.ClientHash(in.ClientIP),
		}})
		if bad != nil {
			return QueueCreated{}, bad
		}
		if r.Outcome == fsm.QueueIDTaken {
			continue
		}
		if r.Outcome != fsm.QueueCreated {
			return QueueCreated{}, queueError(r)
		}
		return QueueCreated{Queue: r.Queue, WriteToken: toks[0], WorkerToken: toks[1], ReadToken: toks[2]}, nil
	}
	return QueueCreated{}, Fail(KindInternal, "could not allocate a unique queue id", nil)
}

// Enqueue adds a job to a queue, or finds the job its key already names.
func (s *Service) Enqueue(ctx context.Context, in EnqueueRequest) (JobAnswer, error) {
	if in.JobKey == nil {
		return JobAnswer{}, Invalid("job_key", "is required")
	}
	if fsm.ValidJobKey(*in.JobKey) != nil {
		return JobAnswer{}, Invalid("job_key", fsm.JobKeyRule)
	}
	if in.Payload == nil {
		return JobAnswer{}, Invalid("payload", "is required: any JSON value, including null")
	}
	payload, err := jsoncanon.Canonicalize(in.Payload)
	if err != nil {
		return JobAnswer{}, Invalid("payload", "must be valid JSON: "+err.Error())
	}
	a := in.Auth
	for attempt := 0; attempt < maxIDRetries; attempt++ {
		job, err := secret.NewID()
		if err != nil {
			return JobAnswer{}, Fail(KindInternal, "could not generate a job id", nil)
		}
		r, bad := s.leadQueue(ctx, &leaderOp{cmd: &fsm.JobEnqueue{Queue: a.queue, Token: a.token, Job: job, Key: *in.JobKey, Payload: payload}})
		if bad != nil {
			return JobAnswer{}, bad
		}
		if r.Outcome != fsm.JobIDTaken {
			return jobAnswer(r, "")
		}
	}
	return JobAnswer{}, Fail(KindInternal, "could not allocate a unique job id", nil)
}

// Claim claims the first claimable job, waiting up to its wait_seconds
// for one.
func (s *Service) Claim(ctx context.Context, in ClaimRequest) (JobAnswer, error) {
	wait, err := WaitSeconds(in.WaitSeconds, MaxClaimWaitSeconds)
	if err != nil {
		return JobAnswer{}, err
	}
	a := in.Auth
	receipt, bad := requestSecret(in.RequestID, "a receipt",
		func(rid string) string { return secret.ReceiptOfRequest(a.queue, rid) }, secret.NewToken)
	if bad != nil {
		return JobAnswer{}, bad
	}
	cmd := &fsm.JobClaim{Queue: a.queue, Token: a.token, Receipt: secret.ReceiptHash(receipt), ByRequest: in.RequestID != nil}
	r, bad := s.leadQueue(ctx, &leaderOp{cmd: cmd, visibility: in.VisibilityTimeout, wait: wait})
	if bad != nil {
		return JobAnswer{}, bad
	}
	return jobAnswer(r, receipt)
}

// AckJob marks a claimed job completed.
func (s *Service) AckJob(ctx context.Context, in AckJobRequest) (JobAnswer, error) {
	return s.receiptOp(ctx, in.Auth, in.JobID, in.Receipt, func(q QueueAuth, job secret.ID, rh secret.Hash) (leaderOp, *Error) {
		return leaderOp{cmd: &fsm.JobAck{Queue: q.queue, Token: q.token, Job: job, Receipt: rh}}, nil
	})
}

// ReleaseJob gives a claimed job back, to be claimed again after its delay.
func (s *Service) ReleaseJob(ctx context.Context, in ReleaseJobRequest) (JobAnswer, error) {
	return s.receiptOp(ctx, in.Auth, in.JobID, in.Receipt, func(q QueueAuth, job secret.ID, rh secret.Hash) (leaderOp, *Error) {
		var delay int64
		if in.DelaySeconds != nil {
			if delay = *in.DelaySeconds; delay < 0 || delay > fsm.MaxReleaseDelaySeconds {
				return leaderOp{}, Invalid("delay_seconds", fmt.Sprintf("must be an integer from 0 to %d", fsm.MaxReleaseDelaySeconds))
			}
		}
		return leaderOp{cmd: &fsm.JobRelease{Queue: q.queue, Token: q.token, Job: job, Receipt: rh, DelaySeconds: delay}}, nil
	})
}

// RenewJob extends a claim's visibility window.
func (s *Service) RenewJob(ctx context.Context, in RenewJobRequest) (JobAnswer, error) {
	return s.receiptOp(ctx, in.Auth, in.JobID, in.Receipt, func(q QueueAuth, job secret.ID, rh secret.Hash) (leaderOp, *Error) {
		return leaderOp{cmd: &fsm.JobRenew{Queue: q.queue, Token: q.token, Job: job, Receipt: rh}, visibility: in.VisibilityTimeout}, nil
	})
}

// receiptOp validates the job id and the receipt of ack, release or renew
// and runs the operation build makes of them.
func (s *Service) receiptOp(ctx context.Context, a QueueAuth, jobID string, receipt *string,
	build func(QueueAuth, secret.ID, secret.Hash) (leaderOp, *Error)) (JobAnswer, error) {
	job, bad := parseJobID(jobID)
	if bad != nil {
		return JobAnswer{}, bad
	}
	if receipt == nil {
		return JobAnswer{}, Invalid("receipt", "is required")
	}
	if !secret.ValidToken(*receipt) {
		return JobAnswer{}, Invalid("receipt", "must be the receipt returned by claim: 64 lowercase hex characters")
	}
	op, bad := build(a, job, secret.ReceiptHash(*receipt))
	if bad != nil {
		return JobAnswer{}, bad
	}
	r, bad := s.leadQueue(ctx, &op)
	if bad != nil {
		return JobAnswer{}, bad
	}
	return jobAnswer(r, "")
}

// RetryJob moves a failed job back to pending (write token).
func (s *Service) RetryJob(ctx context.Context, in RetryJobRequest) (JobAnswer, error) {
	job, bad := parseJobID(in.JobID)
	if bad != nil {
		return JobAnswer{}, bad
	}
	r, bad := s.leadQueue(ctx, &leaderOp{cmd: &fsm.JobRetry{Queue: in.Auth.queue, Token: in.Auth.token, Job: job}})
	if bad != nil {
		return JobAnswer{}, bad
	}
	return jobAnswer(r, "")
}

// ReadQueue reads a queue's counts.
func (s *Service) ReadQueue(ctx context.Context, in ReadQueueRequest) (fsm.QueueView, error) {
	if in.Wait > 0 {
		return fsm.QueueView{}, Invalid("wait_seconds", "only a job read can wait (GET /queue/{queue_id}/jobs/{job_id})")
	}
	r, bad := s.read(ctx, &queueRead{queue: in.Auth.queue, token: in.Auth.token}, in.Stale, 0)
	if bad != nil {
		return fsm.QueueView{}, bad
	}
	return r.Queue, nil
}

// ReadJob reads one job, waiting for its outcome up to in.Wait.
func (s *Service) ReadJob(ctx context.Context, in ReadJobRequest) (*fsm.JobView, error) {
	if in.Wait > 0 && in.Stale {
		return nil, Invalid("wait_seconds", "a stale read answers at once: leave out stale=true to wait")
	}
	job, bad := parseJobID(in.JobID)
	if bad != nil {
		return nil, bad
	}
	r, bad := s.read(ctx, &queueRead{queue: in.Auth.queue, token: in.Auth.token, job: job, withJob: true}, in.Stale, in.Wait)
	if bad != nil {
		return nil, bad
	}
	return r.Job, nil
}

// read runs q: linearizably on the leader unless stale.
func (s *Service) read(ctx context.Context, q *queueRead, stale bool, wait time.Duration) (*fsm.QueueResult, *Error) {
	var r *fsm.QueueResult
	if stale || PlantedStaleRead {
		res := s.executeStaleRead(q)
		r = &res
	} else {
		var bad *Error
		if r, bad = s.leadQueue(ctx, &leaderOp{read: q, wait: wait}); bad != nil {
			return nil, bad
		}
	}
	if r.Outcome != fsm.QueueFound {
		return nil, queueError(r)
	}
	return r, nil
}

// leadQueue runs a queue operation on the leader.
func (s *Service) leadQueue(ctx context.Context, op *leaderOp) (*fsm.QueueResult, *Error) {
	return leadFor(s, ctx, op, "queue", func(r opResult) *fsm.QueueResult { return r.queue })
}

// jobAnswer is the answer of a job operation's outcome: a success, or the
// error that states why not. receipt is the raw receipt of a claim, which
// only the node that took the claim knows.
func jobAnswer(r *fsm.QueueResult, receipt string) (JobAnswer, error) {
	switch r.Outcome {
	case fsm.JobCreated, fsm.JobDeduplicated, fsm.QueueEmpty,
		fsm.JobClaimed, fsm.JobAcked, fsm.JobReleased, fsm.JobRenewed, fsm.JobRetried:
		return JobAnswer{Result: r, Receipt: receipt}, nil
	}
	return JobAnswer{}, queueError(r)
}

// queueError is the error of a queue outcome that is not a success.
func queueError(r *fsm.QueueResult) *Error {
	switch r.Outcome {
	case fsm.QueueNotFound:
		return Fail(KindNotFound, "queue not found (it never existed or has expired)", nil)
	case fsm.QueueForbidden:
		return Fail(KindForbidden, "this token does not allow this operation on this queue", nil)
	case fsm.JobNotFound:
		return Fail(KindNotFound, "job not found in this queue", nil)
	case fsm.QueueRateLimited:
		msg := fmt.Sprintf("queue creation limit reached for this client address (the replicated setting queues_per_client, see GET /cluster/settings); retry in %d seconds", r.RetryAfterSeconds)
		e := Fail(KindTooMany, msg, jsonenc.H{"retry_after_seconds": r.RetryAfterSeconds})
		e.RetryAfter = int(r.RetryAfterSeconds)
		return e
	case fsm.QueueLimitReached:
		return Fail(KindStorageFull, fmt.Sprintf("the cluster holds its maximum of %d live queues (the replicated setting max_queues, see GET /cluster/settings): existing queues work as before, a new queue is refused until queues reach the end of their 24-hour lifetime or an operator raises max_queues", r.Limit),
			jsonenc.H{"setting": "max_queues", "limit": r.Limit})
	case fsm.JobKeyConflict:
		return Fail(KindConflict, "a job with this job_key exists with a different payload", jsonenc.H{"job_id": r.Job.ID.String()})
	case fsm.JobLimitReached:
		return Fail(KindConflict, "the queue holds its maximum number of distinct jobs", jsonenc.H{"limit": r.Queue.Counts.Total})
	case fsm.JobNotFailed:
		st := r.Job.Status.String()
		return Fail(KindConflict, "only a failed job can be retried; this job is "+st, jsonenc.H{"job_status": st})
	case fsm.ReceiptRejected:
		return Fail(KindConflict, rejectMessage(r.Reason), jsonenc.H{"reason": r.Reason.String()})
	case fsm.QueueInvalid:
		return Fail(KindInvalid, "the request broke a limit that changed while it was processed; check /cluster/settings and retry", nil)
	}
	return Fail(KindInternal, "unexpected queue outcome "+r.Outcome.String(), nil)
}

func rejectMessage(r fsm.RejectReason) string {
	switch r {
	case fsm.ReceiptExpired:
		return "the receipt's claim has ended (its visibility window passed or it was released); claim the job again"
	case fsm.ReceiptJobCompleted:
		return "the job is already completed"
	}
	return "the receipt is not the job's current claim (superseded by a later claim, or never issued for this job)"
}
