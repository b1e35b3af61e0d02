package service

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsoncanon"
	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/internal/secret"
)

// AcquireLeaseRequest asks for a lease: the body of POST /lease (and
// /lease/acquire) and the arguments of the acquire_lease tool.
type AcquireLeaseRequest struct {
	Namespace   *string `json:"namespace,omitempty" jsonschema:"namespace minted by create_lease_namespace (ns_ followed by 43 base64url characters); lets the key be readable"`
	Key         *string `json:"key" jsonschema:"the work's key: with a namespace 1 to 512 bytes (e.g. invoice:2026-09-05); without one a high-entropy printable ASCII value of 32 to 200 characters"`
	TTLSeconds  *int64  `json:"ttl_seconds,omitempty" jsonschema:"lease length in seconds, 1 to 86400, default 60; capped at the key's 24-hour lifecycle end"`
	Fingerprint *string `json:"fingerprint,omitempty" jsonschema:"binds the key to its input for the 24-hour lifecycle; another fingerprint gets status conflict"`
	RequestID   *string `json:"request_id,omitempty" jsonschema:"your own secret naming this acquire (32 to 128 letters, digits, '-' or '_'): repeated while the grant holds, it answers the same owner token and fencing token"`
	WaitSeconds *int64  `json:"wait_seconds,omitempty" jsonschema:"seconds to wait while the lease is held, 0 to 60, default 0: the longest waiter gets the lease (or the stored result) when it is released, expires or completes"`
	Slots       *int64  `json:"slots,omitempty" jsonschema:"how many owners may hold the key at once, 1 to 1000, default 1; the key's first acquire in its 24-hour lifecycle fixes it, and an acquire naming another count gets status conflict"`
}

// LeaseOwnerRequest is an owner's renew, release, complete or checkpoint:
// the body of POST /lease/renew, /lease/release, /lease/complete and
// /lease/checkpoint (result only for complete, checkpoint only for
// checkpoint, ttl_seconds only for renew).
type LeaseOwnerRequest struct {
	Namespace  *string         `json:"namespace,omitempty" jsonschema:"the namespace used to acquire"`
	Key        *string         `json:"key" jsonschema:"the key used to acquire"`
	OwnerToken *string         `json:"owner_token" jsonschema:"the secret owner token returned by acquire"`
	TTLSeconds *int64          `json:"ttl_seconds,omitempty" jsonschema:"renew only: new lease length in seconds, 1 to 86400, default 60"`
	Result     json.RawMessage `json:"result,omitempty" jsonschema:"complete only: JSON result to store, at most 32 KB after redaction"`
	Checkpoint json.RawMessage `json:"checkpoint,omitempty" jsonschema:"checkpoint only: JSON progress to store, at most 32 KB after redaction; every later grant of the key in its lifecycle returns it"`
}

// LeaseAnswer is a lease operation's success: the state machine's result
// (granted, completed, renewed or released) and, for a grant, the secret
// owner token.
type LeaseAnswer struct {
	Result     *fsm.LeaseResult
	OwnerToken string
}

// NamespaceEntropyBits is the number of random bits in a namespace.
const NamespaceEntropyBits = 256

// leaseIdentity validates namespace and key and returns the lease identity and
// the hash of the fingerprint (absent fingerprint hashed as empty).
func leaseIdentity(nsp, keyp, fpp *string) (lease, fp secret.Hash, bad *Error) {
	ns := ""
	if nsp != nil {
		ns = *nsp
		if !secret.ValidNamespace(ns) {
			return lease, fp, Invalid("namespace", "must be a namespace minted by POST /services/v1/lease/namespace: ns_ followed by 43 base64url characters")
		}
	}
	if keyp == nil {
		return lease, fp, Invalid("key", "is required")
	}
	key := *keyp
	if ns == "" {
		if err := secret.HighEntropyKey(key); err != nil {
			return lease, fp, Invalid("key", "without a namespace "+trimWeakKey(err.Error()))
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

// CreateNamespace mints a lease namespace.
func (s *Service) CreateNamespace() (string, error) {
	ns, err := secret.NewNamespace()
	if err != nil {
		return "", Fail(KindInternal, "could not generate a namespace", nil)
	}
	return ns, nil
}

// AcquireLease acquires the lease on a key, waiting up to its wait_seconds
// while the lease is held.
func (s *Service) AcquireLease(ctx context.Context, in AcquireLeaseRequest) (LeaseAnswer, error) {
	lease, fp, bad := leaseIdentity(in.Namespace, in.Key, in.Fingerprint)
	if bad != nil {
		return LeaseAnswer{}, bad
	}
	wait, err := WaitSeconds(in.WaitSeconds, MaxAcquireWaitSeconds)
	if err != nil {
		return LeaseAnswer{}, err
	}
	slots, bad := slotCount(in.Slots)
	if bad != nil {
		return LeaseAnswer{}, bad
	}
	owner, bad := requestSecret(in.RequestID, "an owner token",
		func(rid string) string { return secret.OwnerTokenOfRequest(lease, rid) }, secret.NewOwnerToken)
	if bad != nil {
		return LeaseAnswer{}, bad
	}
	cmd := &fsm.LeaseAcquire{Lease: lease, Fingerprint: fp, Owner: secret.OwnerTokenHash(owner), Slots: slots}
	if bad := s.levelAllows(cmd); bad != nil {
		return LeaseAnswer{}, bad
	}
	r, bad := s.leadLease(ctx, &leaderOp{cmd: cmd, ttl: in.TTLSeconds, wait: wait})
	if bad != nil {
		return LeaseAnswer{}, bad
	}
	if r.Outcome == fsm.LeaseGranted {
		return LeaseAnswer{Result: r, OwnerToken: owner}, nil
	}
	return leaseAnswer(r)
}

// levelAllows refuses a command whose entry needs a cluster level above
// the active one. The leader checks it too; checking on the node the client
// called means no leader of an older build is sent a format it cannot read.
func (s *Service) levelAllows(cmd fsm.Command) *Error {
	if need, active := fsm.RequiredLevel(cmd), s.node.FSM().Level(); need > active {
		return ClusterError(&cluster.LevelError{Need: need, Active: active})
	}
	return nil
}

// slotCount validates an acquire's slots (absent: one).
func slotCount(p *int64) (uint32, *Error) {
	if p == nil {
		return 1, nil
	}
	if *p < 1 || *p > fsm.MaxSlots {
		return 0, Invalid("slots", fmt.Sprintf("must be an integer from 1 to %d", fsm.MaxSlots))
	}
	return uint32(*p), nil
}

// leaseOp is renew, release, complete or checkpoint.
type leaseOp int

const (
	opRenew leaseOp = iota
	opRelease
	opComplete
	opCheckpoint
)

// RenewLease extends a lease its owner holds.
func (s *Service) RenewLease(ctx context.Context, in LeaseOwnerRequest) (LeaseAnswer, error) {
	return s.ownerLease(ctx, opRenew, in)
}

// ReleaseLease gives up a lease its owner holds.
func (s *Service) ReleaseLease(ctx context.Context, in LeaseOwnerRequest) (LeaseAnswer, error) {
	return s.ownerLease(ctx, opRelease, in)
}

// CompleteLease stores the result of the work a lease's owner did.
func (s *Service) CompleteLease(ctx context.Context, in LeaseOwnerRequest) (LeaseAnswer, error) {
	return s.ownerLease(ctx, opComplete, in)
}

// CheckpointLease stores the progress of a lease's owner.
func (s *Service) CheckpointLease(ctx context.Context, in LeaseOwnerRequest) (LeaseAnswer, error) {
	return s.ownerLease(ctx, opCheckpoint, in)
}

func (s *Service) ownerLease(ctx context.Context, op0 leaseOp, in LeaseOwnerRequest) (LeaseAnswer, error) {
	lease, _, bad := leaseIdentity(in.Namespace, in.Key, nil)
	if bad != nil {
		return LeaseAnswer{}, bad
	}
	if in.OwnerToken == nil {
		return LeaseAnswer{}, Invalid("owner_token", "is required")
	}
	if !secret.ValidOwnerToken(*in.OwnerToken) {
		// An invalid owner is answered like any other owner that does not
		// hold the lease, as the specification says.
		return leaseAnswer(&fsm.LeaseResult{Outcome: fsm.LeaseLost})
	}
	owner := secret.OwnerTokenHash(*in.OwnerToken)
	if in.Checkpoint != nil && op0 != opCheckpoint {
		return LeaseAnswer{}, Invalid("checkpoint", "is accepted only by checkpoint")
	}
	op := &leaderOp{}
	switch op0 {
	case opRenew:
		if in.Result != nil {
			return LeaseAnswer{}, Invalid("result", "is accepted only by complete")
		}
		op.cmd, op.ttl = &fsm.LeaseRenew{Lease: lease, Owner: owner}, in.TTLSeconds
	case opRelease:
		if in.Result != nil || in.TTLSeconds != nil {
			return LeaseAnswer{}, Invalid("body", "of release takes only namespace, key and owner_token")
		}
		op.cmd = &fsm.LeaseRelease{Lease: lease, Owner: owner}
	case opComplete:
		if in.TTLSeconds != nil {
			return LeaseAnswer{}, Invalid("ttl_seconds", "is accepted only by acquire and renew")
		}
		result, bad := canonicalJSON("result", in.Result)
		if bad != nil {
			return LeaseAnswer{}, bad
		}
		op.cmd = &fsm.LeaseComplete{Lease: lease, Owner: owner, Result: result}
	case opCheckpoint:
		if in.TTLSeconds != nil || in.Result != nil {
			return LeaseAnswer{}, Invalid("body", "of checkpoint takes only namespace, key, owner_token and checkpoint")
		}
		checkpoint, bad := canonicalJSON("checkpoint", in.Checkpoint)
		if bad != nil {
			return LeaseAnswer{}, bad
		}
		op.cmd = &fsm.LeaseCheckpoint{Lease: lease, Owner: owner, Checkpoint: checkpoint}
		if bad := s.levelAllows(op.cmd); bad != nil {
			return LeaseAnswer{}, bad
		}
	}
	r, bad := s.leadLease(ctx, op)
	if bad != nil {
		return LeaseAnswer{}, bad
	}
	return leaseAnswer(r)
}

// canonicalJSON redacts and canonicalises a completion result or a
// checkpoint (field names which); its size is judged by the leader against
// the replicated limit.
func canonicalJSON(field string, raw json.RawMessage) ([]byte, *Error) {
	if raw == nil {
		return nil, Invalid(field, "is required: any JSON value, at most 32 KB after redaction")
	}
	out, err := jsoncanon.CanonicalizeRedacted(raw)
	if err != nil {
		return nil, Invalid(field, "must be valid JSON: "+err.Error())
	}
	return out, nil
}

// leadLease runs a lease operation on the leader.
func (s *Service) leadLease(ctx context.Context, op *leaderOp) (*fsm.LeaseResult, *Error) {
	return leadFor(s, ctx, op, "lease", func(r opResult) *fsm.LeaseResult { return r.lease })
}

// WithSlots adds a multi-slot key's slots and held count to an answer's
// body; a single-slot key's answer keeps its fields as before slots.
func WithSlots(r *fsm.LeaseResult, body jsonenc.H) jsonenc.H {
	if r.Slots > 1 {
		body["slots"] = r.Slots
		body["held"] = r.Held
	}
	return body
}

// leaseAnswer is the answer of a lease outcome other than a grant: a
// success, or the error that states why not.
func leaseAnswer(r *fsm.LeaseResult) (LeaseAnswer, error) {
	switch r.Outcome {
	case fsm.LeaseCompleted, fsm.LeaseRenewed, fsm.LeaseReleased, fsm.LeaseCheckpointed:
		return LeaseAnswer{Result: r}, nil
	case fsm.LeaseHeld:
		msg := "Lease is held"
		if r.Slots > 1 {
			msg = fmt.Sprintf("Every one of the key's %d slots is held", r.Slots)
		}
		e := Fail(KindConflict, msg, WithSlots(r, jsonenc.H{
			"status":                        "held",
			"retry_after_seconds":           r.RetryAfterSeconds,
			"fencing_token":                 r.FencingToken,
			"lease_expires_at_timestamp":    UnixSeconds(r.LeaseExpiresAt),
			"lease_expires_at":              RFC3339(r.LeaseExpiresAt),
			"absolute_expires_at_timestamp": UnixSeconds(r.AbsoluteExpiresAt),
			"absolute_expires_at":           RFC3339(r.AbsoluteExpiresAt),
		}))
		e.RetryAfter = int(r.RetryAfterSeconds)
		return LeaseAnswer{}, e
	case fsm.LeaseSlotsConflict:
		ends := RFC3339(r.AbsoluteExpiresAt)
		e := Fail(KindConflict, fmt.Sprintf("Key has %d slot(s) until its lifecycle ends at %s, as its first acquire fixed; an acquire must name slots %d (absent slots means 1)", r.Slots, ends, r.Slots), jsonenc.H{
			"status":                        "conflict",
			"slots":                         r.Slots,
			"absolute_expires_at_timestamp": UnixSeconds(r.AbsoluteExpiresAt),
			"absolute_expires_at":           ends,
		})
		e.Field = "slots"
		return LeaseAnswer{}, e
	case fsm.LeaseSlotsRefused:
		e := Fail(KindConflict, fmt.Sprintf("Results and checkpoints belong to single-slot leases and this key has %d slots: nothing was changed", r.Slots), jsonenc.H{
			"status": "conflict",
			"slots":  r.Slots,
		})
		e.Field = "slots"
		return LeaseAnswer{}, e
	case fsm.LeaseConflict:
		ends := RFC3339(r.AbsoluteExpiresAt)
		return LeaseAnswer{}, Fail(KindConflict, "Key is bound to another fingerprint until its lifecycle ends at "+ends, jsonenc.H{
			"status":                        "conflict",
			"absolute_expires_at_timestamp": UnixSeconds(r.AbsoluteExpiresAt),
			"absolute_expires_at":           ends,
		})
	case fsm.LeaseLost:
		return LeaseAnswer{}, Fail(KindLost, "Lease is not held by this owner token: it expired, was released or completed, or belongs to a newer owner", jsonenc.H{"status": "lost"})
	case fsm.LeaseLimitReached:
		return LeaseAnswer{}, Fail(KindStorageFull, fmt.Sprintf("the cluster holds its maximum of %d lease records (the replicated setting max_leases, see GET /cluster/settings): keys that have a record work as before, a new key is refused until records end their 24-hour lifecycle or an operator raises max_leases", r.Limit),
			jsonenc.H{"status": "limit_reached", "setting": "max_leases", "limit": r.Limit})
	case fsm.LeaseInvalid:
		return LeaseAnswer{}, Fail(KindInvalid, "the request broke a limit that changed while it was processed; check /cluster/settings and retry", nil)
	}
	return LeaseAnswer{}, Fail(KindInternal, "unexpected lease outcome "+r.Outcome.String(), nil)
}
