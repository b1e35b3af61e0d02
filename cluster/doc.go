// Package cluster is holdfast's Raft node: it wires hashicorp/raft to the
// state machine with a segment log store (internal/raftlog, one fdatasync per
// append), a bolt stable store, a file snapshot store and
// the TCP transport; forms, joins and reshapes the cluster; proposes commands
// with a real deadline and honest error mapping; gates linearizable reads;
// runs the leader-only sweeper; and keeps the node directory that maps Raft
// server ids to HTTP addresses.
//
// It must never report a proposal as failed when it may have been committed
// (such outcomes are ErrOutcomeUnknown), never answer a linearizable read
// except on a ready leader that confirms its leadership after reading, and
// never bootstrap over existing state.
package cluster
