package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsoncanon"
	"github.com/holdfast/holdfast/internal/secret"
)

// LeaseAcquireInput is the body of POST /lease (and /lease/acquire) and the
// arguments of the acquire_lease tool.
type LeaseAcquireInput struct {
	Namespace   *string `json:"namespace,omitempty" jsonschema:"namespace minted by create_lease_namespace (ns_ followed by 43 base64url characters); lets the key be readable"`
	Key         *string `json:"key" jsonschema:"the work's key: with a namespace 1 to 512 bytes (e.g. invoice:2026-09-05); without one a high-entropy printable ASCII value of 32 to 200 characters"`
	TTLSeconds  *int64  `json:"ttl_seconds,omitempty" jsonschema:"lease length in seconds, 1 to 86400, default 60; capped at the key's 24-hour lifecycle end"`
	Fingerprint *string `json:"fingerprint,omitempty" jsonschema:"binds the key to its input for the 24-hour lifecycle; another fingerprint gets status conflict"`
	RequestID   *string `json:"request_id,omitempty" jsonschema:"your own secret naming this acquire (32 to 128 letters, digits, '-' or '_'): repeated while the grant holds, it answers the same owner token and fencing token"`
	WaitSeconds *int64  `json:"wait_seconds,omitempty" jsonschema:"seconds to wait while the lease is held, 0 to 60, default 0: the longest waiter gets the lease (or the stored result) when it is released, expires or completes"`
}

// LeaseOwnerInput is the body of POST /lease/renew, /lease/release and
// /lease/complete (result only for complete, ttl_seconds only for renew).
type LeaseOwnerInput struct {
	Namespace  *string         `json:"namespace,omitempty" jsonschema:"the namespace used to acquire"`
	Key        *string         `json:"key" jsonschema:"the key used to acquire"`
	OwnerToken *string         `json:"owner_token" jsonschema:"the secret owner token returned by acquire"`
	TTLSeconds *int64          `json:"ttl_seconds,omitempty" jsonschema:"renew only: new lease length in seconds, 1 to 86400, default 60"`
	Result     json.RawMessage `json:"result,omitempty" jsonschema:"complete only: JSON result to store, at most 32 KB after redaction"`
}

// leaseID validates namespace and key and returns the lease identity and
// the hash of the fingerprint (absent fingerprint hashed as empty).
func leaseIdentity(nsp, keyp, fpp *string) (lease, fp secret.Hash, bad *reply) {
	ns := ""
	if nsp != nil {
		ns = *nsp
		if !secret.ValidNamespace(ns) {
			r := invalid("namespace", "must be a namespace minted by POST /services/v1/lease/namespace: ns_ followed by 43 base64url characters")
			return lease, fp, &r
		}
	}
	if keyp == nil {
		r := invalid("key", "is required")
		return lease, fp, &r
	}
	key := *keyp
	if ns == "" {
		if err := secret.HighEntropyKey(key); err != nil {
			r := invalid("key", "without a namespace "+trimWeakKey(err.Error()))
			return lease, fp, &r
		}
	} else if r := checkText("key", key); r != nil {
		return lease, fp, r
	}
	fingerprint := ""
	if fpp != nil {
		if r := checkText("fingerprint", *fpp); r != nil {
			return lease, fp, r
		}
		fingerprint = *fpp
	}
	return secret.LeaseID(ns, key), secret.FingerprintHash(ns, key, fingerprint), nil
}

// trimWeakKey drops the "key without namespace" prefix the secret package
// puts on its messages, since the caller names the field itself.
func trimWeakKey(msg string) string {
	const p = "key without namespace "
	if len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

func (s *Server) createNamespace() reply {
	ns, err := secret.NewNamespace()
	if err != nil {
		return errReply(http.StatusInternalServerError, "could not generate a namespace", nil)
	}
	return okReply(http.StatusOK, gin.H{"namespace": ns, "entropy_bits": 256})
}

func (s *Server) acquireLease(ctx context.Context, in LeaseAcquireInput) reply {
	lease, fp, bad := leaseIdentity(in.Namespace, in.Key, in.Fingerprint)
	if bad != nil {
		return *bad
	}
	wait, bad := waitSeconds(in.WaitSeconds, maxAcquireWaitSeconds)
	if bad != nil {
		return *bad
	}
	owner, bad := requestSecret(in.RequestID, "an owner token",
		func(rid string) string { return secret.OwnerTokenOfRequest(lease, rid) }, secret.NewOwnerToken)
	if bad != nil {
		return *bad
	}
	r, rep := s.leadLease(ctx, &leaderOp{cmd: &fsm.LeaseAcquire{Lease: lease, Fingerprint: fp, Owner: secret.OwnerTokenHash(owner)}, ttl: in.TTLSeconds, wait: wait})
	if r == nil {
		return rep
	}
	if r.Outcome == fsm.LeaseGranted {
		body := heldBody(r)
		body["owner_token"] = owner
		return okReply(http.StatusCreated, body)
	}
	return leaseReply(r)
}

// leaseOp is renew, release or complete.
type leaseOp int

const (
	opRenew leaseOp = iota
	opRelease
	opComplete
)

func (s *Server) ownerLease(ctx context.Context, op0 leaseOp, in LeaseOwnerInput) reply {
	lease, _, bad := leaseIdentity(in.Namespace, in.Key, nil)
	if bad != nil {
		return *bad
	}
	if in.OwnerToken == nil {
		return invalid("owner_token", "is required")
	}
	if !secret.ValidOwnerToken(*in.OwnerToken) {
		// An invalid owner is answered like any other owner that does not
		// hold the lease, as the specification says.
		return leaseReply(&fsm.LeaseResult{Outcome: fsm.LeaseLost})
	}
	owner := secret.OwnerTokenHash(*in.OwnerToken)
	op := &leaderOp{}
	switch op0 {
	case opRenew:
		if in.Result != nil {
			return invalid("result", "is accepted only by complete")
		}
		op.cmd, op.ttl = &fsm.LeaseRenew{Lease: lease, Owner: owner}, in.TTLSeconds
	case opRelease:
		if in.Result != nil || in.TTLSeconds != nil {
			return invalid("body", "of release takes only namespace, key and owner_token")
		}
		op.cmd = &fsm.LeaseRelease{Lease: lease, Owner: owner}
	case opComplete:
		if in.TTLSeconds != nil {
			return invalid("ttl_seconds", "is accepted only by acquire and renew")
		}
		result, bad := canonicalResult(in.Result)
		if bad != nil {
			return *bad
		}
		op.cmd = &fsm.LeaseComplete{Lease: lease, Owner: owner, Result: result}
	}
	r, rep := s.leadLease(ctx, op)
	if r == nil {
		return rep
	}
	return leaseReply(r)
}

// canonicalResult redacts and canonicalises a completion result; its size
// is judged by the leader against the replicated limit.
func canonicalResult(raw json.RawMessage) ([]byte, *reply) {
	if raw == nil {
		r := invalid("result", "is required: any JSON value, at most 32 KB after redaction")
		return nil, &r
	}
	out, err := jsoncanon.CanonicalizeRedacted(raw)
	if err != nil {
		r := invalid("result", "must be valid JSON: "+err.Error())
		return nil, &r
	}
	return out, nil
}

// leadLease runs a lease operation on the leader, mapping its refusals to replies.
func (s *Server) leadLease(ctx context.Context, op *leaderOp) (*fsm.LeaseResult, reply) {
	return leadFor(s, ctx, op, "lease", func(r opResult) *fsm.LeaseResult { return r.lease })
}

func heldBody(r *fsm.LeaseResult) gin.H {
	return gin.H{
		"status":                        "held",
		"ttl_seconds":                   r.TTLSeconds,
		"fencing_token":                 r.FencingToken,
		"lease_expires_at_timestamp":    secondsOf(r.LeaseExpiresAt),
		"lease_expires_at":              rfc3339Of(r.LeaseExpiresAt),
		"absolute_expires_at_timestamp": secondsOf(r.AbsoluteExpiresAt),
		"absolute_expires_at":           rfc3339Of(r.AbsoluteExpiresAt),
	}
}

// leaseReply maps every outcome but a grant to its reply.
func leaseReply(r *fsm.LeaseResult) reply {
	switch r.Outcome {
	case fsm.LeaseHeld:
		rep := errReply(http.StatusConflict, "Lease is held", gin.H{
			"status":                        "held",
			"retry_after_seconds":           r.RetryAfterSeconds,
			"fencing_token":                 r.FencingToken,
			"lease_expires_at_timestamp":    secondsOf(r.LeaseExpiresAt),
			"lease_expires_at":              rfc3339Of(r.LeaseExpiresAt),
			"absolute_expires_at_timestamp": secondsOf(r.AbsoluteExpiresAt),
			"absolute_expires_at":           rfc3339Of(r.AbsoluteExpiresAt),
		})
		rep.RetryAfter = int(r.RetryAfterSeconds)
		return rep
	case fsm.LeaseCompleted:
		return okReply(http.StatusOK, gin.H{
			"status":                        "completed",
			"completed_at_timestamp":        secondsOf(r.CompletedAt),
			"completed_at":                  rfc3339Of(r.CompletedAt),
			"result":                        storedJSON(r.Result),
			"fencing_token":                 r.FencingToken,
			"absolute_expires_at_timestamp": secondsOf(r.AbsoluteExpiresAt),
			"absolute_expires_at":           rfc3339Of(r.AbsoluteExpiresAt),
		})
	case fsm.LeaseConflict:
		return errReply(http.StatusConflict, "Key is bound to another fingerprint until its 24-hour lifecycle ends", gin.H{
			"status":                        "conflict",
			"absolute_expires_at_timestamp": secondsOf(r.AbsoluteExpiresAt),
			"absolute_expires_at":           rfc3339Of(r.AbsoluteExpiresAt),
		})
	case fsm.LeaseRenewed:
		return okReply(http.StatusOK, heldBody(r))
	case fsm.LeaseReleased:
		return okReply(http.StatusOK, gin.H{"status": "released", "fencing_token": r.FencingToken})
	case fsm.LeaseLost:
		return errReply(http.StatusConflict, "Lease is not held by this owner token: it expired, was released or completed, or belongs to a newer owner", gin.H{"status": "lost"})
	case fsm.LeaseLimitReached:
		return errReply(http.StatusInsufficientStorage, fmt.Sprintf("the cluster holds its maximum of %d lease records (the replicated setting max_leases, see GET /cluster/settings): keys that have a record work as before, a new key is refused until records end their 24-hour lifecycle or an operator raises max_leases", r.Limit),
			gin.H{"status": "limit_reached", "setting": "max_leases", "limit": r.Limit})
	case fsm.LeaseInvalid:
		return errReply(http.StatusBadRequest, "the request broke a limit that changed while it was processed; check /cluster/settings and retry", nil)
	}
	return errReply(http.StatusInternalServerError, "unexpected lease outcome "+r.Outcome.String(), nil)
}
