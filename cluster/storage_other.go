//go:build !unix

package cluster

// freeBytes cannot tell the free space here: -1.
func freeBytes(string) (int64, error) { return -1, nil }
