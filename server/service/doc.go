// Package service is holdfast's API below its transports: the rules of
// every lease and queue operation, and the leader's engine that runs them.
// REST, MCP and the peer link are adapters over it.
//
// It owns: validating each operation's typed request (every rule that does
// not depend on the replicated settings, on the node the client called);
// generating owner tokens, receipts and ids and hashing every secret before
// an operation leaves that node; running the operation on the leader, here
// or through the peer link (the link's both ends: the follower's calls and
// the leader's answers); on the leader, judging what the applied settings
// decide, stamping the leader's clock and proposing one Raft entry per
// write, or reading linearizably; waiting requests (wait_seconds) and the
// hand-overs that carry a waiter's command in the entry that frees what it
// waits for; and mapping every outcome to a typed result or an *Error with
// a Kind, a message, the field at fault, the answer's extra fields and
// Retry-After.
//
// It must never import an HTTP, gin or MCP package (a test checks); never
// report failure for a write whose outcome is unknown (that is
// KindOutcomeUnknown), nor report as not applied one that may have taken
// effect; never send an operation more than one hop (a forwarded one runs
// on the leader that received it or nowhere); never repeat an operation the
// leader may have received; never put a secret into a command, a log line
// or an error; and never change the peer link's wire format, whose refusal
// codes are the HTTP statuses of the link format's code table, without a
// cluster-level gate.
package service
