// Package raftlog is a Raft log store (raft.LogStore) that makes an append
// durable with one fdatasync: entries are appended to segment files as
// checksummed records, and a batch of entries is one write and one sync.
//
// Entries are stored in index order without gaps. Raft appends past a gap
// only after installing a snapshot that covers the entry before the gap, so
// the entries before it are dropped then. The store does not declare itself
// monotonic (raft.MonotonicLogStore): Raft v1.7.3 then deletes every entry
// after installing a snapshot but keeps its cached last index, which lets a
// follower holding entries past the snapshot accept appends past a hole.
// Deleting a prefix removes whole segment files; deleting a suffix
// truncates one.
//
// Storage is treated as hostile. After a crash, an append that never
// completed (its unwritten sectors still zero, at the very end of the
// newest segment) is cut off when the store is opened; any other bad record,
// a missing or truncated segment (checked against the segment list kept in
// the Manifest) is corruption and the store refuses to open, leaving every
// byte as it is. A failed write is undone before its error returns; a
// failed fdatasync or deletion of a suffix poisons the store (ErrPoisoned).
// A write that has not returned within Options.StallAfter (a disk that
// hangs) is reported as stalled (ErrStalled) until it returns.
//
// It must never repair the log by discarding a record that may have been
// acknowledged, and never report an append durable before its fdatasync
// returned. internal/raftlog/README.md describes the format and the
// checks.
package raftlog
