// Package secret generates holdfast's random secrets and identifiers and
// derives the SHA-256 hashes under which the replicated state stores them.
//
// It owns three things: the wire formats of every random value the leader
// mints (namespaces, owner tokens, queue role tokens, claim receipts, queue
// and job ids) and their validators; the domain-separated, length-framed hash
// for each kind of secret; and the rule a lease key used without a namespace
// must meet (HighEntropyKey).
//
// Randomness comes only from crypto/rand. The package must never write,
// log or return a raw secret anywhere except to its direct caller, never
// put a raw secret or key into an error message, and never do I/O beyond
// reading crypto/rand. It must not be used inside the replicated state
// machine's Apply for generation: random values are minted by the leader
// and travel in the command; only the hash functions are deterministic and
// safe to call anywhere.
//
// The hash framing is a stored format: changing a tag or the framing makes
// every existing lease, queue and receipt unreachable, so it is frozen by
// tests.
package secret
