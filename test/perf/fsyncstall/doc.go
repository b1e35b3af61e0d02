//go:build linux

// Command fsyncstall measures how long a Raft-log-like append waits for its
// fdatasync while a snapshot-sized file is written and synced on the same
// file system: what a node's log sees when it (or a neighbour on the same
// disk) writes a snapshot.
//
// It appends 16 KiB and calls fdatasync every 2 ms to a pre-zeroed 64 MiB
// file (as the log's segments are), for a second alone, then while it
// writes a file of -size MiB in 64 KiB writes and syncs it, then for a
// second after; it prints the appends' fdatasync latency before and from
// the start of the big write on. -mode chooses how the big file is
// written: plain (write everything, then fsync), sync (also fdatasync it
// every -every MiB) or range (also start its writeback every -every MiB
// with sync_file_range).
//
//	go run ./test/perf/fsyncstall -dir /path/on/the/disk -mode plain
//
// It owns only its two scratch files, both removed when it ends; it must
// never write anywhere but -dir, and never touch a node's data.
package main
