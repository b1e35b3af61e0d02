package server

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/server/service"
)

// fail writes a JSON error body and stops the handler chain.
func fail(c *gin.Context, status int, msg string) {
	errReply(status, msg, nil).write(c)
}

// kindStatus is the HTTP status of an error kind.
func kindStatus(k service.Kind) int {
	switch k {
	case service.KindInvalid:
		return http.StatusBadRequest
	case service.KindUnauthorized:
		return http.StatusUnauthorized
	case service.KindForbidden:
		return http.StatusForbidden
	case service.KindNotFound:
		return http.StatusNotFound
	case service.KindConflict, service.KindLost:
		return http.StatusConflict
	case service.KindTooLarge:
		return http.StatusRequestEntityTooLarge
	case service.KindTooMany:
		return http.StatusTooManyRequests
	case service.KindNotApplied, service.KindOutcomeUnknown:
		return http.StatusServiceUnavailable
	case service.KindStorageFull:
		return http.StatusInsufficientStorage
	}
	return http.StatusInternalServerError
}

// errorReply is the answer to an operation the service refused: the
// status of its kind, its body, Retry-After and the bearer challenge. An
// error that is not the service's is a 500.
func errorReply(err error) reply {
	e, ok := err.(*service.Error) // what the service returns, without an allocation
	if !ok {
		var wrapped *service.Error
		if !errors.As(err, &wrapped) {
			return errReply(http.StatusInternalServerError, "internal error", nil)
		}
		e = wrapped
	}
	b, berr := e.Body()
	if berr != nil {
		return errReply(http.StatusInternalServerError, "internal error: the answer could not be encoded", nil)
	}
	return reply{Status: kindStatus(e.Kind), RetryAfter: e.RetryAfter, Bearer: e.Challenge, raw: b}
}

// The replies of the service's operations take what the operation
// returned: its result, or the error that is the answer instead.

// namespaceReply is the answer of a minted namespace.
func namespaceReply(ns string, err error) reply {
	if err != nil {
		return errorReply(err)
	}
	return okReply(http.StatusOK, jsonenc.H{"namespace": ns, "entropy_bits": service.NamespaceEntropyBits})
}

// heldBody is the body of a lease the caller holds.
func heldBody(r *fsm.LeaseResult) jsonenc.H {
	return service.WithSlots(r, jsonenc.H{
		"status":                        "held",
		"ttl_seconds":                   r.TTLSeconds,
		"fencing_token":                 r.FencingToken,
		"lease_expires_at_timestamp":    service.UnixSeconds(r.LeaseExpiresAt),
		"lease_expires_at":              service.RFC3339(r.LeaseExpiresAt),
		"absolute_expires_at_timestamp": service.UnixSeconds(r.AbsoluteExpiresAt),
		"absolute_expires_at":           service.RFC3339(r.AbsoluteExpiresAt),
	})
}

// leaseReply is the answer of a lease operation.
func leaseReply(a service.LeaseAnswer, err error) reply {
	if err != nil {
		return errorReply(err)
	}
	r := a.Result
	switch r.Outcome {
	case fsm.LeaseGranted:
		body := heldBody(r)
		body["owner_token"] = a.OwnerToken
		if cp := r.Checkpoint; cp != nil {
			body["checkpoint"] = jsonenc.Stored(cp.Value)
			body["checkpoint_fencing_token"] = cp.Fence
			body["checkpoint_at_timestamp"] = service.UnixSeconds(cp.At)
			body["checkpoint_at"] = service.RFC3339(cp.At)
		}
		return okReply(http.StatusCreated, body)
	case fsm.LeaseCheckpointed:
		if r.Checkpoint == nil {
			break
		}
		return okReply(http.StatusOK, jsonenc.H{
			"status":                  "checkpointed",
			"fencing_token":           r.FencingToken,
			"checkpoint_at_timestamp": service.UnixSeconds(r.Checkpoint.At),
			"checkpoint_at":           service.RFC3339(r.Checkpoint.At),
		})
	case fsm.LeaseCompleted:
		return okReply(http.StatusOK, jsonenc.H{
			"status":                        "completed",
			"completed_at_timestamp":        service.UnixSeconds(r.CompletedAt),
			"completed_at":                  service.RFC3339(r.CompletedAt),
			"result":                        jsonenc.Stored(r.Result),
			"fencing_token":                 r.FencingToken,
			"absolute_expires_at_timestamp": service.UnixSeconds(r.AbsoluteExpiresAt),
			"absolute_expires_at":           service.RFC3339(r.AbsoluteExpiresAt),
		})
	case fsm.LeaseRenewed:
		return okReply(http.StatusOK, heldBody(r))
	case fsm.LeaseReleased:
		return okReply(http.StatusOK, service.WithSlots(r, jsonenc.H{"status": "released", "fencing_token": r.FencingToken}))
	}
	return errReply(http.StatusInternalServerError, "unexpected lease outcome "+r.Outcome.String(), nil)
}

// queueBody is the body of a queue's counts.
func queueBody(q fsm.QueueView) jsonenc.H {
	return jsonenc.H{
		"queue_id":             q.ID.String(),
		"created_at_timestamp": service.UnixSeconds(q.CreatedAt),
		"expire_timestamp":     service.UnixSeconds(q.ExpiresAt),
		"counts": jsonenc.H{
			"pending":   q.Counts.Pending,
			"claimed":   q.Counts.Claimed,
			"completed": q.Counts.Completed,
			"failed":    q.Counts.Failed,
			"total":     q.Counts.Total,
		},
	}
}

// queueCreatedReply is the answer of a new queue, with its role tokens.
func queueCreatedReply(q service.QueueCreated, err error) reply {
	if err != nil {
		return errorReply(err)
	}
	body := queueBody(q.Queue)
	body["write_token"], body["worker_token"], body["read_token"] = q.WriteToken, q.WorkerToken, q.ReadToken
	return okReply(http.StatusCreated, body)
}

// queueReply is the answer of a queue read.
func queueReply(q fsm.QueueView, err error) reply {
	if err != nil {
		return errorReply(err)
	}
	return okReply(http.StatusOK, queueBody(q))
}

// jobReadReply is the answer of a job read.
func jobReadReply(j *fsm.JobView, err error) reply {
	if err != nil {
		return errorReply(err)
	}
	return jobReply(http.StatusOK, j, nil, nil)
}

// jobAnswerReply is the answer of a job operation.
func jobAnswerReply(a service.JobAnswer, err error) reply {
	if err != nil {
		return errorReply(err)
	}
	r := a.Result
	switch r.Outcome {
	case fsm.JobCreated, fsm.JobDeduplicated:
		status := http.StatusCreated
		if r.Outcome == fsm.JobDeduplicated {
			status = http.StatusOK
		}
		dedup := r.Outcome == fsm.JobDeduplicated
		return jobReply(status, r.Job, nil, &dedup)
	case fsm.QueueEmpty:
		return okReply(http.StatusOK, jsonenc.H{"job": nil})
	case fsm.JobClaimed, fsm.JobAcked, fsm.JobReleased, fsm.JobRenewed, fsm.JobRetried:
		var receipt *string
		if a.Receipt != "" {
			receipt = &a.Receipt
		}
		return jobReply(http.StatusOK, r.Job, receipt, nil)
	}
	return errReply(http.StatusInternalServerError, "unexpected queue outcome "+r.Outcome.String(), nil)
}
