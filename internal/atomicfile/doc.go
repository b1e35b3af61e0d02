// Package atomicfile writes files and makes directories so that a crash or
// a power loss leaves each either whole or absent.
//
// It owns the write-to-temporary, fsync, rename and directory-sync
// sequence every replaced file of holdfast uses (node ids, ports, level
// marks, backups), the directory sync that makes a created, renamed or
// removed file durable, and the creation of directories together with the
// syncs of the directories above them. It must never leave a half-written
// file under the final name, nor report success before the syncs that
// make the change durable have returned.
package atomicfile
