// Command storefill measures a candidate state store on holdfast's fill: it
// writes lease records (a 32-byte hash key, the record's fields and a
// result) and jobs (a queue id and sequence number, the fields and a
// payload) with an index entry ordered by expiry time for each, in apply
// batches that also record the last applied index and are never synced on
// their own, as the state machine would with the Raft log as its write-ahead
// log. It prints the write rate, resident memory during the fill, the bytes
// on disk against the records' raw bytes, the time to reopen, the cost of a
// snapshot after a further 1% of writes, and the rate of point reads.
//
//	go run ./test/scale/storefill -engine pebble -leases 2000000 -jobs 400000
//	go run ./test/scale/storefill -engine bolt   -leases 2000000 -jobs 400000
//
// It is a measurement, never a test: it asserts nothing about speed, and
// it never writes outside the directory it is given or makes.
package main
