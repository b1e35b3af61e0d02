// Package statestore keeps the state machine's records on disk, in pebble,
// with the Raft log as their write-ahead log.
//
// A Store is one pebble database without a write-ahead log of its own.
// Each batch of applied log entries is committed as one pebble batch that
// also records the index of the last entry in it, and nothing is synced on
// a commit: what a crash or a power loss takes away is a suffix of the
// batches, and the applied index taken away with it tells the node where
// to replay the Raft log from. Flush makes every committed batch durable;
// the node flushes before the Raft log is compacted past the store's
// applied index, and when it stops.
//
// On disk, the store's root directory holds the file CURRENT, which names
// the live database directory (store-NNNNNN) beside it. Install swaps in
// a whole new database (a snapshot received from the leader) by writing
// CURRENT anew through a synced rename, so a crash at any moment of it
// leaves either the old database or the new one; Open removes whichever
// directory CURRENT does not name.
//
// It never syncs a commit (the log does that), never opens a database
// that CURRENT does not name, and never removes one that CURRENT might
// still need: a store without CURRENT but with a database it can open is
// an error, not a new store. (A first database it cannot open, without
// CURRENT, is one whose creation a crash interrupted: it is made again.)
package statestore
