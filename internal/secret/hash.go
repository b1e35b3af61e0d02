package secret

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
)

// Domain-separation tags, one per purpose. They are part of the stored
// format: never change one, add a new tag instead.
const (
	tagLeaseID          = "holdfast/v1/lease-id"
	tagFingerprint      = "holdfast/v1/fingerprint"
	tagOwnerToken       = "holdfast/v1/owner-token"
	tagRoleToken        = "holdfast/v1/role-token"
	tagReceipt          = "holdfast/v1/receipt"
	tagClient           = "holdfast/v1/client"
	tagOwnerOfRequest   = "holdfast/v1/owner-token-of-request"
	tagReceiptOfRequest = "holdfast/v1/receipt-of-request"
)

// Hash is a SHA-256 digest under which a secret or secret-derived identity
// is stored in place of the raw value.
type Hash [sha256.Size]byte

// String returns the 64 lowercase hex characters of h.
func (h Hash) String() string {
	return hex.EncodeToString(h[:])
}

// IsZero reports whether h is the zero value, which no hash function in this
// package returns in practice; it marks "no hash stored".
func (h Hash) IsZero() bool {
	return h == Hash{}
}

// Equal reports whether h and other are the same digest, in time that does
// not depend on where they differ, so that comparing a presented credential's
// hash with a stored one leaks nothing through timing.
func (h Hash) Equal(other Hash) bool {
	return subtle.ConstantTimeCompare(h[:], other[:]) == 1
}

// LeaseID returns the identity under which a lease is stored: a hash of the
// namespace and the key. namespace is "" for a key used without a namespace
// (which must then pass HighEntropyKey).
func LeaseID(namespace, key string) Hash {
	return sum(tagLeaseID, namespace, key)
}

// FingerprintHash returns the stored form of a lease's fingerprint. It binds
// the fingerprint to the lease identity (namespace and key), so a
// low-entropy fingerprint such as "charge-order-501" cannot be guessed from
// its hash without also knowing the namespace and key.
func FingerprintHash(namespace, key, fingerprint string) Hash {
	return sum(tagFingerprint, namespace, key, fingerprint)
}

// OwnerTokenHash returns the stored form of a lease owner token.
func OwnerTokenHash(token string) Hash {
	return sum(tagOwnerToken, token)
}

// RoleTokenHash returns the stored form of a queue role token (write,
// worker or read). The role itself is not part of the hash: the state
// records which role a hash belongs to.
func RoleTokenHash(token string) Hash {
	return sum(tagRoleToken, token)
}

// ReceiptHash returns the stored form of a claim receipt.
func ReceiptHash(receipt string) Hash {
	return sum(tagReceipt, receipt)
}

// ClientHash returns the stored form of a client address, used to count
// queue creations per client IP. It does not normalise addr: the caller must
// present each client in one canonical spelling (for example
// netip.Addr.Unmap().String(), without a port). An IP address has little
// entropy, so this hash pseudonymises the address on disk but does not make
// it secret.
func ClientHash(addr string) Hash {
	return sum(tagClient, addr)
}

// sum hashes the tag and the fields, each written as an 8-byte big-endian
// length followed by its bytes. The tag is framed like a field, so the input
// is an injective encoding of the sequence (tag, fields...): fields cannot
// shift bytes into one another, and two purposes with distinct tags can
// never produce the same input.
func sum(tag string, fields ...string) Hash {
	n := 8 + len(tag)
	for _, f := range fields {
		n += 8 + len(f)
	}
	buf := make([]byte, 0, n)
	buf = appendField(buf, tag)
	for _, f := range fields {
		buf = appendField(buf, f)
	}
	return sha256.Sum256(buf)
}

func appendField(buf []byte, f string) []byte {
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(f)))
	return append(buf, f...)
}
