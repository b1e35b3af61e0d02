package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsoncanon"
	"github.com/holdfast/holdfast/internal/secret"
)

// EnqueueInput is the body of POST /queue/{id}/jobs.
type EnqueueInput struct {
	JobKey  *string         `json:"job_key" jsonschema:"1 to 64 characters, starting with an ASCII letter or digit, then letters, digits, '.', '_', ':' or '-'; retrying the same key and payload returns the existing job"`
	Payload json.RawMessage `json:"payload" jsonschema:"any JSON value, including null, at most 16384 bytes encoded"`
}

// ClaimInput is the body of POST /queue/{id}/claim.
type ClaimInput struct {
	VisibilityTimeout *int64  `json:"visibility_timeout,omitempty" jsonschema:"seconds the claim hides the job from other workers, 30 to 900, default 60; capped at the queue's expiry"`
	RequestID         *string `json:"request_id,omitempty" jsonschema:"your own secret naming this claim (32 to 128 letters, digits, '-' or '_'): repeated while the claim is active, it answers the same job and receipt"`
	WaitSeconds       *int64  `json:"wait_seconds,omitempty" jsonschema:"seconds to wait for a job when none is available, 0 to 20, default 0; waiting claims are served in arrival order"`
}

// ReceiptInput is the body of ack and release.
type ReceiptInput struct {
	Receipt *string `json:"receipt" jsonschema:"the secret receipt returned by the claim (64 lowercase hex characters)"`
}

// ReleaseInput is the body of release.
type ReleaseInput struct {
	Receipt      *string `json:"receipt" jsonschema:"the secret receipt returned by the claim (64 lowercase hex characters)"`
	DelaySeconds *int64  `json:"delay_seconds,omitempty" jsonschema:"seconds before the job may be claimed again, 0 to 900, default 0; capped at the queue's expiry"`
}

// RenewInput is the body of renew.
type RenewInput struct {
	Receipt           *string `json:"receipt" jsonschema:"the secret receipt returned by the claim (64 lowercase hex characters)"`
	VisibilityTimeout *int64  `json:"visibility_timeout,omitempty" jsonschema:"new visibility window in seconds from now, 30 to 900, default 60; capped at the queue's expiry"`
}

// queueAuth is a parsed queue id and bearer token.
type queueAuth struct {
	queue secret.ID
	token secret.Hash
}

// parseQueueAuth validates the queue id and the bearer token's format.
func parseQueueAuth(queueID, token string, tokenPresent bool) (queueAuth, *reply) {
	id, ok := secret.ParseID(queueID)
	if !ok {
		r := errReply(http.StatusNotFound, "queue not found: queue_id must be 32 lowercase hex characters", gin.H{"field": "queue_id"})
		return queueAuth{}, &r
	}
	if !tokenPresent {
		r := errReply(http.StatusUnauthorized, "a queue token is required: send Authorization: Bearer TOKEN", nil)
		r.Bearer = true
		return queueAuth{}, &r
	}
	if !secret.ValidToken(token) {
		r := errReply(http.StatusUnauthorized, "the token is not a queue token: tokens are 64 lowercase hex characters", nil)
		r.Bearer = true
		return queueAuth{}, &r
	}
	return queueAuth{queue: id, token: secret.RoleTokenHash(token)}, nil
}

// parseJobID validates a job id.
func parseJobID(jobID string) (secret.ID, *reply) {
	id, ok := secret.ParseID(jobID)
	if !ok {
		r := errReply(http.StatusNotFound, "job not found: job_id must be 32 lowercase hex characters", gin.H{"field": "job_id"})
		return id, &r
	}
	return id, nil
}

// preauthorize, on the leader, refuses a request whose queue or token is
// wrong before anything is proposed; Apply checks again. A leader that has
// not yet applied its predecessors' entries skips the check: its state could
// miss a queue that exists.
func (s *Server) preauthorize(a queueAuth, role fsm.Role) *reply {
	if !s.node.IsReadyLeader() {
		return nil
	}
	if o := s.node.FSM().Authorize(a.queue, role, a.token, s.node.Now()); o != 0 {
		r := queueReply(&fsm.QueueResult{Outcome: o}, nil)
		return &r
	}
	return nil
}

const maxIDRetries = 3

func (s *Server) createQueue(ctx context.Context, clientIP string) reply {
	for attempt := 0; attempt < maxIDRetries; attempt++ {
		id, err := secret.NewID()
		if err != nil {
			return errReply(http.StatusInternalServerError, "could not generate a queue id", nil)
		}
		var toks [3]string
		for i := range toks {
			if toks[i], err = secret.NewToken(); err != nil {
				return errReply(http.StatusInternalServerError, "could not generate queue tokens", nil)
			}
		}
		r, rep := s.leadQueue(ctx, &leaderOp{cmd: &fsm.QueueCreate{
			Queue:      id,
			WriteToken: secret.RoleTokenHash(toks[0]), WorkerToken: secret.RoleTokenHash(toks[1]), ReadToken: secret.RoleTokenHash(toks[2]),
			Client: secret.ClientHash(clientIP),
		}})
		if r == nil {
			return rep
		}
		if r.Outcome == fsm.QueueIDTaken {
			continue
		}
		if r.Outcome != fsm.QueueCreated {
			return queueReply(r, nil)
		}
		body := queueBody(r.Queue)
		body["write_token"], body["worker_token"], body["read_token"] = toks[0], toks[1], toks[2]
		return okReply(http.StatusCreated, body)
	}
	return errReply(http.StatusInternalServerError, "could not allocate a unique queue id", nil)
}

func (s *Server) enqueue(ctx context.Context, a queueAuth, in EnqueueInput) reply {
	if in.JobKey == nil {
		return invalid("job_key", "is required")
	}
	if fsm.ValidJobKey(*in.JobKey) != nil {
		return invalid("job_key", fsm.JobKeyRule)
	}
	if in.Payload == nil {
		return invalid("payload", "is required: any JSON value, including null")
	}
	payload, err := jsoncanon.Canonicalize(in.Payload)
	if err != nil {
		return invalid("payload", "must be valid JSON: "+err.Error())
	}
	for attempt := 0; attempt < maxIDRetries; attempt++ {
		job, err := secret.NewID()
		if err != nil {
			return errReply(http.StatusInternalServerError, "could not generate a job id", nil)
		}
		r, rep := s.leadQueue(ctx, &leaderOp{cmd: &fsm.JobEnqueue{Queue: a.queue, Token: a.token, Job: job, Key: *in.JobKey, Payload: payload}})
		if r == nil {
			return rep
		}
		if r.Outcome != fsm.JobIDTaken {
			return queueReply(r, nil)
		}
	}
	return errReply(http.StatusInternalServerError, "could not allocate a unique job id", nil)
}

func (s *Server) claim(ctx context.Context, a queueAuth, in ClaimInput) reply {
	wait, bad := waitSeconds(in.WaitSeconds, maxClaimWaitSeconds)
	if bad != nil {
		return *bad
	}
	receipt, bad := requestSecret(in.RequestID, "a receipt",
		func(rid string) string { return secret.ReceiptOfRequest(a.queue, rid) }, secret.NewToken)
	if bad != nil {
		return *bad
	}
	cmd := &fsm.JobClaim{Queue: a.queue, Token: a.token, Receipt: secret.ReceiptHash(receipt), ByRequest: in.RequestID != nil}
	r, rep := s.leadQueue(ctx, &leaderOp{cmd: cmd, visibility: in.VisibilityTimeout, wait: wait})
	if r == nil {
		return rep
	}
	return queueReply(r, &receipt)
}

// jobOp is ack, release or renew.
type jobOp int

const (
	opAck jobOp = iota
	opJobRelease
	opJobRenew
)

// receiptArgs are the fields of ack, release and renew: the receipt, a
// release's delay and a renewal's visibility window (nil when not given).
type receiptArgs struct {
	receipt           *string
	delay, visibility *int64
}

// receiptBody decodes the body of ack, release or renew with decode, which
// reports whether it succeeded (a failure is answered by decode's caller).
func receiptBody(op jobOp, decode func(any) bool) (receiptArgs, bool) {
	switch op {
	case opJobRenew:
		var b RenewInput
		ok := decode(&b)
		return receiptArgs{receipt: b.Receipt, visibility: b.VisibilityTimeout}, ok
	case opJobRelease:
		var b ReleaseInput
		ok := decode(&b)
		return receiptArgs{receipt: b.Receipt, delay: b.DelaySeconds}, ok
	}
	var b ReceiptInput
	ok := decode(&b)
	return receiptArgs{receipt: b.Receipt}, ok
}

func (s *Server) receiptOp(ctx context.Context, jop jobOp, a queueAuth, jobID string, in receiptArgs) reply {
	job, bad := parseJobID(jobID)
	if bad != nil {
		return *bad
	}
	if in.receipt == nil {
		return invalid("receipt", "is required")
	}
	if !secret.ValidToken(*in.receipt) {
		return invalid("receipt", "must be the receipt returned by claim: 64 lowercase hex characters")
	}
	var delay int64
	if in.delay != nil {
		if delay = *in.delay; delay < 0 || delay > fsm.MaxReleaseDelaySeconds {
			return invalid("delay_seconds", fmt.Sprintf("must be an integer from 0 to %d", fsm.MaxReleaseDelaySeconds))
		}
	}
	rh := secret.ReceiptHash(*in.receipt)
	op := &leaderOp{}
	switch jop {
	case opAck:
		op.cmd = &fsm.JobAck{Queue: a.queue, Token: a.token, Job: job, Receipt: rh}
	case opJobRelease:
		op.cmd = &fsm.JobRelease{Queue: a.queue, Token: a.token, Job: job, Receipt: rh, DelaySeconds: delay}
	case opJobRenew:
		op.cmd, op.visibility = &fsm.JobRenew{Queue: a.queue, Token: a.token, Job: job, Receipt: rh}, in.visibility
	}
	r, rep := s.leadQueue(ctx, op)
	if r == nil {
		return rep
	}
	return queueReply(r, nil)
}

// retryJob moves a failed job back to pending (write token).
func (s *Server) retryJob(ctx context.Context, a queueAuth, jobID string) reply {
	job, bad := parseJobID(jobID)
	if bad != nil {
		return *bad
	}
	r, rep := s.leadQueue(ctx, &leaderOp{cmd: &fsm.JobRetry{Queue: a.queue, Token: a.token, Job: job}})
	if r == nil {
		return rep
	}
	return queueReply(r, nil)
}

// readQueue answers GET /queue/{id}: linearizable unless stale is set. A
// job read may wait for the job's outcome.
func (s *Server) readQueue(ctx context.Context, a queueAuth, jobID string, stale bool, wait time.Duration) reply {
	switch {
	case wait > 0 && jobID == "":
		return invalid("wait_seconds", "only a job read can wait (GET /queue/{queue_id}/jobs/{job_id})")
	case wait > 0 && stale:
		return invalid("wait_seconds", "a stale read answers at once: leave out stale=true to wait")
	}
	var job secret.ID
	if jobID != "" {
		var bad *reply
		if job, bad = parseJobID(jobID); bad != nil {
			return *bad
		}
	}
	q := &queueRead{queue: a.queue, token: a.token, job: job, withJob: jobID != ""}
	var r *fsm.QueueResult
	if stale || plantedStaleRead {
		res := s.executeStaleRead(q)
		r = &res
	} else {
		var rep reply
		if r, rep = s.leadQueue(ctx, &leaderOp{read: q, wait: wait}); r == nil {
			return rep
		}
	}
	if r.Outcome != fsm.QueueFound {
		return queueReply(r, nil)
	}
	if jobID == "" {
		return okReply(http.StatusOK, queueBody(r.Queue))
	}
	return jobReply(http.StatusOK, r.Job, nil, nil)
}

// leadQueue runs a queue operation on the leader, mapping its refusals to replies.
func (s *Server) leadQueue(ctx context.Context, op *leaderOp) (*fsm.QueueResult, reply) {
	return leadFor(s, ctx, op, "queue", func(r opResult) *fsm.QueueResult { return r.queue })
}

func queueBody(q fsm.QueueView) gin.H {
	return gin.H{
		"queue_id":             q.ID.String(),
		"created_at_timestamp": secondsOf(q.CreatedAt),
		"expire_timestamp":     secondsOf(q.ExpiresAt),
		"counts": gin.H{
			"pending":   q.Counts.Pending,
			"claimed":   q.Counts.Claimed,
			"completed": q.Counts.Completed,
			"failed":    q.Counts.Failed,
			"total":     q.Counts.Total,
		},
	}
}

// queueReply maps a queue outcome to its reply. receipt is the raw receipt
// of a claim, which only the leader's handler knows.
func queueReply(r *fsm.QueueResult, receipt *string) reply {
	switch r.Outcome {
	case fsm.QueueNotFound:
		return errReply(http.StatusNotFound, "queue not found (it never existed or has expired)", nil)
	case fsm.QueueForbidden:
		return errReply(http.StatusForbidden, "this token does not allow this operation on this queue", nil)
	case fsm.JobNotFound:
		return errReply(http.StatusNotFound, "job not found in this queue", nil)
	case fsm.QueueRateLimited:
		msg := fmt.Sprintf("queue creation limit reached for this client address (the replicated setting queues_per_client, see GET /cluster/settings); retry in %d seconds", r.RetryAfterSeconds)
		rep := errReply(http.StatusTooManyRequests, msg, gin.H{"retry_after_seconds": r.RetryAfterSeconds})
		rep.RetryAfter = int(r.RetryAfterSeconds)
		return rep
	case fsm.QueueLimitReached:
		return errReply(http.StatusInsufficientStorage, fmt.Sprintf("the cluster holds its maximum of %d live queues (the replicated setting max_queues, see GET /cluster/settings): existing queues work as before, a new queue is refused until queues reach the end of their 24-hour lifetime or an operator raises max_queues", r.Limit),
			gin.H{"setting": "max_queues", "limit": r.Limit})
	case fsm.JobCreated, fsm.JobDeduplicated:
		status := http.StatusCreated
		if r.Outcome == fsm.JobDeduplicated {
			status = http.StatusOK
		}
		dedup := r.Outcome == fsm.JobDeduplicated
		return jobReply(status, r.Job, nil, &dedup)
	case fsm.JobKeyConflict:
		return errReply(http.StatusConflict, "a job with this job_key exists with a different payload", gin.H{"job_id": r.Job.ID.String()})
	case fsm.JobLimitReached:
		return errReply(http.StatusConflict, "the queue holds its maximum number of distinct jobs", gin.H{"limit": r.Queue.Counts.Total})
	case fsm.QueueEmpty:
		return okReply(http.StatusOK, gin.H{"job": nil})
	case fsm.JobClaimed, fsm.JobAcked, fsm.JobReleased, fsm.JobRenewed, fsm.JobRetried:
		return jobReply(http.StatusOK, r.Job, receipt, nil)
	case fsm.JobNotFailed:
		st := r.Job.Status.String()
		return errReply(http.StatusConflict, "only a failed job can be retried; this job is "+st, gin.H{"job_status": st})
	case fsm.ReceiptRejected:
		return errReply(http.StatusConflict, rejectMessage(r.Reason), gin.H{"reason": r.Reason.String()})
	case fsm.QueueInvalid:
		return errReply(http.StatusBadRequest, "the request broke a limit that changed while it was processed; check /cluster/settings and retry", nil)
	}
	return errReply(http.StatusInternalServerError, "unexpected queue outcome "+r.Outcome.String(), nil)
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
