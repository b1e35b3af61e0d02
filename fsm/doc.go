// Package fsm is holdfast's replicated state machine: the typed commands that
// travel through the Raft log, their binary encoding, the lease and queue
// rules applied to them, snapshots, and the read queries the server answers
// from the applied state.
//
// Everything Apply decides is a function of the command and the current
// state alone. The package must never read the wall clock, draw random
// numbers, iterate a map where the order could reach the state or a result,
// consult local flags, or perform I/O beyond writing a snapshot to the sink
// Raft hands it. Time comes from the leader in every command and the state's
// clock only moves forward; every secret arrives already hashed.
package fsm
