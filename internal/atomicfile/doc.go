// Package atomicfile writes a file so that it holds either its old content
// or all of the new, whatever happens during the write.
//
// It owns the write-to-temporary, fsync, rename and directory-sync sequence
// every replaced file of holdfast uses (node ids, ports, level marks,
// backups). It must never leave a half-written file under the final name.
package atomicfile
