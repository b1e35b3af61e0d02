// Package ratelimit is a per-address token bucket: a burst of requests at
// once, then a steady rate. It is local to one process and must never
// block: a request over the limit is refused at once, with the wait.
package ratelimit
