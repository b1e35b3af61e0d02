package secret

import (
	"errors"
	"fmt"
	"math"
)

// Limits of the key-without-namespace rule; see HighEntropyKey.
const (
	// MinKeyLen is the shortest key accepted without a namespace.
	MinKeyLen = 32
	// MaxKeyLen is the longest key accepted without a namespace.
	MaxKeyLen = 200
	// MinKeyDistinct is the fewest distinct characters such a key may have.
	// It is 10, not 16: a random 64-character hex string has at most 16
	// distinct characters and lacks at least one of them about a quarter of
	// the time, so 16 would reject many SHA-256 hex digests.
	MinKeyDistinct = 10
	// MinKeyEntropyBits is the estimated entropy such a key must exceed.
	MinKeyEntropyBits = 128
	// KeyRepeatLen is the length of the shortest substring that may not
	// occur twice in such a key. It rejects repeated readable keys
	// ("invoice:2026-09-05-invoice:2026-09-05") whose character frequencies
	// alone would pass.
	KeyRepeatLen = 12
)

// ErrWeakKey is wrapped by every error HighEntropyKey returns.
var ErrWeakKey = errors.New("key without namespace is not high-entropy")

// weakKeyError carries a message naming the rule that failed; it never
// contains the key, which is a secret.
type weakKeyError struct{ msg string }

func (e *weakKeyError) Error() string { return e.msg }
func (e *weakKeyError) Unwrap() error { return ErrWeakKey }

// HighEntropyKey checks the rule for a lease key used without a namespace,
// where the key alone must be unguessable. The key passes only if all of
// these hold, checked in this order:
//
//  1. its length is 32 to 200 bytes;
//  2. every byte is printable ASCII from 0x21 '!' to 0x7E '~' (no space, no
//     control character, no non-ASCII byte);
//  3. it contains at least 10 distinct characters;
//  4. its estimated entropy is more than 128 bits, the estimate being
//     len(key) × the Shannon entropy in bits per character of the key's own
//     character frequencies, that is the sum over each distinct character c
//     of count(c) × log2(len(key) / count(c));
//  5. no substring of 12 characters occurs twice in it (occurrences may
//     overlap).
//
// What passes, measured over a million random keys of each kind: random
// base64url of 34 or more characters (a namespace body is 43) and random
// lowercase hex of 48 or more characters (a SHA-256 hex digest is 64)
// always passed. Random base64url of exactly 32 characters fails rule 4
// about once in 7,000 keys and of 33 characters about once in 300,000.
// Random hex of 32 characters always fails (rule 4: at most exactly 128 bits,
// reached only when each of the 16 digits appears exactly twice). A random
// UUID (36 characters, 122 random bits) fails rule 4 about one time in ten,
// so UUIDs should be used with a namespace. The estimate sees character
// frequencies and exact repeats but not other structure: a run of 32
// distinct characters such as "abcdefghijklmnopqrstuvwxyz012345" passes.
//
// The returned error wraps ErrWeakKey and its message names the failed rule;
// it never contains the key.
func HighEntropyKey(key string) error {
	n := len(key)
	if n < MinKeyLen || n > MaxKeyLen {
		return &weakKeyError{fmt.Sprintf("key without namespace must be %d to %d characters, got %d", MinKeyLen, MaxKeyLen, n)}
	}
	var counts [128]int
	distinct := 0
	for i := 0; i < n; i++ {
		c := key[i]
		if c < 0x21 || c > 0x7e {
			return &weakKeyError{fmt.Sprintf("key without namespace must be printable ASCII without spaces (byte %d is not)", i)}
		}
		if counts[c] == 0 {
			distinct++
		}
		counts[c]++
	}
	if distinct < MinKeyDistinct {
		return &weakKeyError{fmt.Sprintf("key without namespace must have at least %d distinct characters, got %d", MinKeyDistinct, distinct)}
	}
	if bits := entropyBits(counts[:], n); bits <= MinKeyEntropyBits {
		return &weakKeyError{fmt.Sprintf("key without namespace must have more than %d bits of estimated entropy, got %.0f", MinKeyEntropyBits, math.Floor(bits))}
	}
	if repeats(key, KeyRepeatLen) {
		return &weakKeyError{fmt.Sprintf("key without namespace must not repeat any %d-character sequence", KeyRepeatLen)}
	}
	return nil
}

// entropyBits returns n × H, H being the Shannon entropy of the frequency
// distribution counts over n characters, computed as n·log2(n) − Σ c·log2(c)
// so that exact cases (such as 16 characters twice each) come out exact.
func entropyBits(counts []int, n int) float64 {
	bits := float64(n) * math.Log2(float64(n))
	for _, c := range counts {
		if c > 1 {
			bits -= float64(c) * math.Log2(float64(c))
		}
	}
	return bits
}

// repeats reports whether some substring of length l occurs at two
// positions of s. Keys are at most MaxKeyLen bytes, so the quadratic scan
// costs a few microseconds and allocates nothing.
func repeats(s string, l int) bool {
	for i := 0; i+l <= len(s); i++ {
		w := s[i : i+l]
		for j := i + 1; j+l <= len(s); j++ {
			if s[j] == w[0] && s[j:j+l] == w {
				return true
			}
		}
	}
	return false
}
