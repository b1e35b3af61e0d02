package service

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/jsonenc"
)

// Kind says what went wrong with an operation; the HTTP layer maps each
// kind to its status.
type Kind uint8

// The kinds of Error.
const (
	// KindInvalid: a field broke a rule.
	KindInvalid Kind = iota + 1
	// KindUnauthorized: no usable token was presented.
	KindUnauthorized
	// KindForbidden: the token does not allow the operation.
	KindForbidden
	// KindNotFound: the queue, job or member does not exist.
	KindNotFound
	// KindConflict: the state refuses the operation (a lease held or
	// bound to another fingerprint, a job key taken, a receipt rejected).
	KindConflict
	// KindLost: the owner token no longer holds the lease.
	KindLost
	// KindTooLarge: a field is over its size limit.
	KindTooLarge
	// KindTooMany: a per-client quota is used up for now.
	KindTooMany
	// KindInternal: holdfast failed; never a client's mistake.
	KindInternal
	// KindNotApplied: nothing was changed and the operation may be retried.
	KindNotApplied
	// KindOutcomeUnknown: the operation may or may not have taken effect.
	KindOutcomeUnknown
	// KindStorageFull: a node cannot write its files, or the cluster holds
	// its maximum of records; nothing was changed.
	KindStorageFull
)

// Error is an operation's failure: its kind, the message for the client,
// the field at fault, any further fields of the answer's body, and how
// many seconds to wait before retrying.
type Error struct {
	Kind    Kind
	Message string
	// Field names the request field at fault ("" for none).
	Field string
	// Extra holds the answer's body fields beyond ok, error and field.
	Extra jsonenc.H
	// RetryAfter is the seconds to wait before retrying (0: no advice).
	RetryAfter int
	// Challenge asks the caller to authenticate with a bearer token.
	Challenge bool
	// body is the answer's body as the leader encoded it, for an Error
	// that came over the peer link.
	body []byte
}

// Error returns the message.
func (e *Error) Error() string {
	if e.Message == "" && e.body != nil {
		return "the leader refused the operation: " + string(e.body)
	}
	return e.Message
}

// Body returns the answer's JSON body: ok false, the message as error, the
// field and the extra fields.
func (e *Error) Body() ([]byte, error) {
	if e.body != nil {
		return e.body, nil
	}
	fixed := jsonenc.H{"ok": false, "error": e.Message}
	if e.Field != "" {
		fixed["field"] = e.Field
	}
	return jsonenc.EncodeUnion(e.Extra, fixed)
}

// Fail is an Error of kind k with a message and optional extra body fields.
func Fail(k Kind, msg string, extra jsonenc.H) *Error {
	return &Error{Kind: k, Message: msg, Extra: extra}
}

// Invalid names the field and the rule it broke.
func Invalid(field, rule string) *Error {
	return &Error{Kind: KindInvalid, Message: field + " " + rule, Field: field}
}

// TooLarge names a field over its size limit.
func TooLarge(field, rule string) *Error {
	return &Error{Kind: KindTooLarge, Message: field + " " + rule, Field: field}
}

// NotApplied says nothing was changed and the operation may be retried
// after a second.
func NotApplied(msg string) *Error { return retryLater(KindNotApplied, msg, "not_applied") }

// OutcomeUnknown says the operation may or may not have taken effect.
func OutcomeUnknown(msg string) *Error { return retryLater(KindOutcomeUnknown, msg, "unknown") }

func retryLater(k Kind, msg, outcome string) *Error {
	return &Error{Kind: k, Message: msg, Extra: jsonenc.H{"outcome": outcome, "retry_after_seconds": 1}, RetryAfter: 1}
}

// InvalidError is an Error of kind KindInvalid for err, naming the field
// when err knows it (a FieldName method).
func InvalidError(err error) *Error {
	e := &Error{Kind: KindInvalid, Message: err.Error()}
	var fe interface{ FieldName() string }
	if errors.As(err, &fe) {
		e.Field = fe.FieldName()
		if e.Field == "" {
			// The body carries the field even when it is empty.
			e.Extra = jsonenc.H{"field": ""}
		}
	}
	return e
}

// ClusterError maps an error from the cluster package. Only errors known
// to mean "nothing was written" are reported as safe to retry; anything
// else may have taken effect and is reported as outcome unknown.
func ClusterError(err error) *Error {
	var se *cluster.StorageError
	switch {
	case errors.As(err, &se) && errors.Is(err, cluster.ErrOutcomeUnknown):
		return OutcomeUnknown(fmt.Sprintf("outcome unknown: node %s could not write its %s (%s); the request may or may not have taken effect; retry it if it is safe to repeat, or read the state to find out",
			se.NodeID, se.Kind, se.Reason()))
	case errors.As(err, &se):
		return StorageError(se)
	case errors.Is(err, cluster.ErrInvalidMember):
		return InvalidError(err)
	case errors.Is(err, cluster.ErrUnknownMember):
		return Fail(KindNotFound, err.Error(), nil)
	case errors.Is(err, cluster.ErrOutcomeUnknown):
		return OutcomeUnknown("outcome unknown: the request may or may not have taken effect; retry it if it is safe to repeat, or read the state to find out")
	case errors.Is(err, cluster.ErrNotLeader), errors.Is(err, cluster.ErrNotReady), errors.Is(err, cluster.ErrNoLeader):
		return NotApplied("no leader is available to serve this request (election in progress or no quorum); nothing was changed, retry shortly")
	case errors.Is(err, cluster.ErrClockSkew):
		return NotApplied("this node's clock is too far from the cluster's to lead; nothing was changed, retry shortly")
	case errors.Is(err, cluster.ErrBusy):
		return NotApplied("the leader is overloaded; nothing was changed, retry shortly")
	case errors.Is(err, cluster.ErrLevel):
		return NotApplied(err.Error())
	}
	return OutcomeUnknown("outcome unknown: the cluster could not confirm the request; it may or may not have taken effect")
}

// StorageError is the failure of a request nothing was written for because
// a node cannot write its files: the leader's append failed for want of
// space, its log is stalled, or this node, with no leader known, cannot
// write its own log. It names the node and the kind of file; the cluster
// may serve the request again once another node leads or space is freed.
func StorageError(se *cluster.StorageError) *Error {
	remedy := "the operator must free space on that node"
	if se.Stalled() {
		remedy = "another node takes the lead within seconds; the operator must check that node's disk"
	}
	return &Error{Kind: KindStorageFull,
		Message: fmt.Sprintf("node %s cannot write its %s (%s): nothing was changed; retry later (%s)", se.NodeID, se.Kind, se.Reason(), remedy),
		Extra:   jsonenc.H{"outcome": "not_applied", "node_id": se.NodeID, "storage": se.Kind, "retry_after_seconds": 1}, RetryAfter: 1}
}

// linkCode is the number a refusal carries on the peer link for its kind:
// the link format's code table, which is the HTTP status the REST API
// answers with, so that nodes of every version read it alike.
func linkCode(k Kind) int {
	switch k {
	case KindInvalid:
		return 400
	case KindUnauthorized:
		return 401
	case KindForbidden:
		return 403
	case KindNotFound:
		return 404
	case KindConflict, KindLost:
		return 409
	case KindTooLarge:
		return 413
	case KindTooMany:
		return 429
	case KindNotApplied, KindOutcomeUnknown:
		return 503
	case KindStorageFull:
		return 507
	}
	return 500
}

// kindOfLinkCode reads a refusal's code back; 0 for a code no version
// sends. The two kinds sharing 503 are told apart by the outcome the body
// states, and a 409 refusal is a conflict (a lost lease comes as a lease
// result, never as a refusal).
func kindOfLinkCode(code int, body []byte) Kind {
	switch code {
	case 400:
		return KindInvalid
	case 401:
		return KindUnauthorized
	case 403:
		return KindForbidden
	case 404:
		return KindNotFound
	case 409:
		return KindConflict
	case 413:
		return KindTooLarge
	case 429:
		return KindTooMany
	case 500:
		return KindInternal
	case 503:
		if bytes.Contains(body, []byte(`"outcome":"unknown"`)) {
			return KindOutcomeUnknown
		}
		return KindNotApplied
	case 507:
		return KindStorageFull
	}
	return 0
}

// UnixSeconds converts state milliseconds to whole Unix seconds, rounded
// down.
func UnixSeconds(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return ms / 1000
}

// RFC3339 formats state milliseconds as an RFC 3339 UTC time with second
// precision, rounded down like UnixSeconds.
func RFC3339(ms int64) string {
	return time.Unix(UnixSeconds(ms), 0).UTC().Format(time.RFC3339)
}
