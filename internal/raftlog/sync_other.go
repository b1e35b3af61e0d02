//go:build !linux

package raftlog

import "os"

// fdatasync flushes f; off Linux it is a full fsync.
func fdatasync(f *os.File) error { return f.Sync() }

// WriteOut does nothing off Linux: the final sync writes everything.
func WriteOut(*os.File, int64, int64) error { return nil }

// freeSpace is unknown off Linux.
func freeSpace(string) (int64, error) { return -1, nil }
