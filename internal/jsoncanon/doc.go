// Package jsoncanon turns client JSON into holdfast's canonical form, so
// that the leader proposes one byte sequence per JSON value and payload
// comparison (enqueue deduplication, completed-result reuse) is byte
// comparison.
//
// It owns the canonical form (see Canonicalize) and the redaction of
// secret-like object members (see CanonicalizeRedacted and SecretLikeName).
// It is a pure function of its input: it must never do I/O, keep state
// between calls, depend on map iteration order or the locale, or accept
// input that encoding/json would reject. Its output is a stored format:
// changing the canonical form changes which payloads count as equal to
// already committed ones, so the form is frozen by tests.
package jsoncanon
