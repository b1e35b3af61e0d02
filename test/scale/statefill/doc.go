// Command statefill measures holdfast's state machine on its disk store
// (internal/statestore) at the size of a day of heavy traffic: it applies
// completed leases with their results and jobs with their payloads
// through the state machine, in apply batches as Raft hands them over,
// with the key filter built beside the applies as a node builds it. It
// prints the apply rate and resident memory during the fill, the bytes on
// disk against the records' raw bytes, the time to open the state again
// (store and state machine, and the key filter behind it), resident
// memory after that, and the rate of acquires of keys already done.
//
//	go run ./test/scale/statefill -leases 10000000 -jobs 2000000
//
// It measures the state machine alone, without Raft, its log or HTTP. It
// is a measurement, never a test: it asserts nothing about speed, and it
// never writes outside the directory it is given or makes.
package main
