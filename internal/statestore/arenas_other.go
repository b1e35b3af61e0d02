//go:build !linux || !cgo

package statestore

// limitMallocArenas does nothing: without cgo pebble allocates from the Go
// heap, and the arena limit is glibc's.
func limitMallocArenas() {}
