// Package client is holdfast's one HTTP client of its own API: JSON over
// HTTP or HTTPS (a CA bundle, an optional client certificate), an address
// list with failover, and the README's rules for what may be sent again.
//
// A call moves to the next address when the request was never sent
// (connection refused, no route, a failed TLS handshake, a TLS alert from
// the node), when a node answers 503 with outcome "not_applied" (or 507
// "storage", also "not_applied": that node cannot write its files), or when a
// read loses its answer: nothing happened there. After every
// address has been tried once it waits for the longest Retry-After it was
// given (at least a short pause) before the next round, all bounded by the
// call's timeout; a round in which every address failed for a TLS set-up
// mistake ends the call at once. A request whose outcome is unknown (the connection broke
// after the request was written, or 503 with outcome "unknown") is sent again
// only when the caller marks it Repeatable, which the README's error table
// allows for acquires with a fingerprint, enqueues and acks.
//
// It must never repeat a request whose outcome is unknown unless the caller
// marked it Repeatable, and never put a secret in an error message.
package client
