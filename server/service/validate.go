package service

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
)

// maxIdentityLength bounds namespaced keys and fingerprints.
const maxIdentityLength = 512

// checkText applies the rule for namespaced keys and fingerprints: 1 to 512
// bytes of valid UTF-8 without control characters, which are every
// character of Unicode's Cc category: C0 (U+0000–U+001F), DEL (U+007F) and
// C1 (U+0080–U+009F).
func checkText(field, v string) *Error {
	if len(v) < 1 || len(v) > maxIdentityLength {
		return Invalid(field, fmt.Sprintf("must be 1 to %d bytes", maxIdentityLength))
	}
	if !utf8.ValidString(v) {
		return Invalid(field, "must be valid UTF-8")
	}
	for _, c := range v {
		if unicode.IsControl(c) {
			return Invalid(field, "must not contain control characters")
		}
	}
	return nil
}

// intInRange returns v (or def when v is nil) if it lies in [lo, hi].
func intInRange(field string, v *int64, def, lo, hi int64) (int64, *Error) {
	if v == nil {
		return def, nil
	}
	if *v < lo || *v > hi {
		return 0, Invalid(field, fmt.Sprintf("must be an integer from %d to %d", lo, hi))
	}
	return *v, nil
}

func ttlSeconds(v *int64, st fsm.Settings) (int64, *Error) {
	return intInRange("ttl_seconds", v, st.LeaseTTLDefaultSeconds, st.LeaseTTLMinSeconds, st.LeaseTTLMaxSeconds)
}

func visibilitySeconds(v *int64, st fsm.Settings) (int64, *Error) {
	return intInRange("visibility_timeout", v, st.VisibilityDefaultSeconds, st.VisibilityMinSeconds, st.VisibilityMaxSeconds)
}

// requestSecret is the owner token or receipt (what) of an acquire or a
// claim: derived from its request_id when it has one, else fresh.
func requestSecret(requestID *string, what string, derive func(string) string, fresh func() (string, error)) (string, *Error) {
	if requestID != nil {
		if !secret.ValidRequestID(*requestID) {
			return "", Invalid("request_id", secret.RequestIDRule)
		}
		return derive(*requestID), nil
	}
	v, err := fresh()
	if err != nil {
		return "", Fail(KindInternal, "could not generate "+what, nil)
	}
	return v, nil
}
