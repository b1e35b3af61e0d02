package secret

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
)

const (
	// randomBytes is the size of every bearer secret: 256 bits.
	randomBytes = 32
	// encodedLen is the length of 32 bytes in unpadded base64url.
	encodedLen = 43
	// idBytes is the size of queue and job ids: 128 bits.
	idBytes = 16

	namespacePrefix  = "ns_"
	ownerTokenPrefix = "own_"
)

// ID is a 128-bit random identifier of a queue or a job. Its text form is 32
// lowercase hex characters. An ID is not a credential: knowing it grants no
// access.
type ID [idBytes]byte

// String returns the 32 lowercase hex characters of id.
func (id ID) String() string {
	return hex.EncodeToString(id[:])
}

// ParseID parses the text form of an ID. It accepts exactly 32 lowercase hex
// characters and reports false for anything else, including uppercase hex,
// so that every ID has exactly one spelling.
func ParseID(s string) (ID, bool) {
	var id ID
	if len(s) != 2*idBytes || !isLowerHex(s) {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return ID{}, false
	}
	return id, true
}

// NewID returns a fresh random ID.
func NewID() (ID, error) {
	var id ID
	if _, err := rand.Read(id[:]); err != nil {
		return ID{}, fmt.Errorf("secret: generate id: %w", err)
	}
	return id, nil
}

// NewNamespace returns a fresh lease namespace: "ns_" followed by 32 random
// bytes (256 bits) in unpadded base64url, 46 characters in all.
func NewNamespace() (string, error) {
	s, err := newBase64(namespacePrefix)
	if err != nil {
		return "", fmt.Errorf("secret: generate namespace: %w", err)
	}
	return s, nil
}

// NewOwnerToken returns a fresh lease owner token: "own_" followed by 32
// random bytes (256 bits) in unpadded base64url, 47 characters in all.
func NewOwnerToken() (string, error) {
	s, err := newBase64(ownerTokenPrefix)
	if err != nil {
		return "", fmt.Errorf("secret: generate owner token: %w", err)
	}
	return s, nil
}

// Request ids: a caller's own secret naming one acquire or one claim, so
// that repeating the request after a lost answer gets the same answer.
const (
	// RequestIDMinLen and RequestIDMaxLen bound a request id's length.
	RequestIDMinLen = 32
	RequestIDMaxLen = 128
	// RequestIDRule is the rule a request id must follow, as error messages state it.
	RequestIDRule = "must be 32 to 128 characters of ASCII letters, digits, '-' and '_' (a random value of at least 128 bits, e.g. a UUID or 32 random hex characters), new for every acquire or claim meant as new"
)

// ValidRequestID reports whether s follows RequestIDRule.
func ValidRequestID(s string) bool {
	if len(s) < RequestIDMinLen || len(s) > RequestIDMaxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// NewRequestID returns a fresh request id: 16 random bytes (128 bits) as
// 32 lowercase hex characters.
func NewRequestID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("secret: generate request id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// OwnerTokenOfRequest derives the owner token of an acquire from the
// lease's identity and the caller's request id: "own_" and 43 base64url
// characters like a random one, and one-way, so neither the token nor its
// stored hash reveals the request id.
func OwnerTokenOfRequest(lease Hash, requestID string) string {
	h := sum(tagOwnerOfRequest, string(lease[:]), requestID)
	return ownerTokenPrefix + base64.RawURLEncoding.EncodeToString(h[:])
}

// ReceiptOfRequest derives the receipt of a claim from the queue and the
// caller's request id: 64 lowercase hex characters like a random one.
func ReceiptOfRequest(queue ID, requestID string) string {
	h := sum(tagReceiptOfRequest, string(queue[:]), requestID)
	return hex.EncodeToString(h[:])
}

// NewToken returns 32 random bytes (256 bits) as 64 lowercase hex
// characters: the format of queue role tokens and claim receipts.
func NewToken() (string, error) {
	var b [randomBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("secret: generate token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// ValidNamespace reports whether s has the form NewNamespace produces: "ns_"
// followed by exactly 43 characters of the base64url alphabet that decode,
// with zero trailing bits, to 32 bytes.
func ValidNamespace(s string) bool {
	return validBase64(s, namespacePrefix)
}

// ValidOwnerToken reports whether s has the form NewOwnerToken produces:
// "own_" followed by exactly 43 characters of the base64url alphabet that
// decode, with zero trailing bits, to 32 bytes.
func ValidOwnerToken(s string) bool {
	return validBase64(s, ownerTokenPrefix)
}

// ValidToken reports whether s is exactly 64 lowercase hex characters, the
// form NewToken produces.
func ValidToken(s string) bool {
	return len(s) == 2*randomBytes && isLowerHex(s)
}

func newBase64(prefix string) (string, error) {
	var b [randomBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("read crypto/rand: %w", err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

func validBase64(s, prefix string) bool {
	if len(s) != len(prefix)+encodedLen || s[:len(prefix)] != prefix {
		return false
	}
	body := s[len(prefix):]
	// The decoder silently skips '\r' and '\n', so the alphabet is checked
	// by hand before decoding.
	for i := 0; i < len(body); i++ {
		if !isBase64URL(body[i]) {
			return false
		}
	}
	// Strict rejects non-zero trailing bits, so each 32-byte value has one
	// spelling and a near miss in the last character is not accepted.
	b, err := base64.RawURLEncoding.Strict().DecodeString(body)
	return err == nil && len(b) == randomBytes
}

func isBase64URL(c byte) bool {
	return 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
