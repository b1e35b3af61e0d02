// Package measure reads what the scale tools report of a process and a
// directory: resident memory and the bytes files take on disk.
//
// It never writes: it reads /proc and walks directories.
package measure
