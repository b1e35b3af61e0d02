// Package faultfs is a FUSE file system for the fault suite's storage
// faults: it serves a backing directory at a mount point (a node's data
// directory), passes every call through to it, models which changes a
// power loss would keep, and can cut the power, hold chosen calls, or fail
// them.
//
// It owns the mount (go-fuse's server, run in the calling test process and
// mounted with mount(2), so it needs root and /dev/fuse), the model of the
// durable state, the shadow directory that keeps the durable contents of
// files, and the rules that hold or fail calls. It is test code: it must
// never be imported by the service, never write outside its backing,
// mount and shadow directories, and never count as durable a change that
// was not synced. A failure of the model itself (the shadow directory
// unwritable, say) is never passed off as an injected fault: the call
// fails with EIO, and Unmount and PowerLoss return the failure.
//
//	f, err := faultfs.Mount(backing, dataDir, shadow, faultfs.Options{})
//	id, err := f.Add(faultfs.Rule{Op: faultfs.OpFsync, Path: "raft-log/*", Err: syscall.EIO, Times: 1})
//	... kill the node ...
//	err = f.PowerLoss()
//	... restart the node on dataDir ...
//
// The process that serves the mount must never read the mount's files
// through a mapping (bbolt maps its database file): a page fault on the
// mount stops a thread without the Go runtime knowing, and a garbage
// collection that then stops the world waits for that thread while the
// fault waits for the stopped server, for good. Its own system calls on
// the mount are safe, but one that a rule holds must be released (Clear,
// ClearAll or Unmount) before the process exits, or the kernel keeps the
// exiting process waiting for an answer until the connection is aborted
// (echo 1 > /sys/fs/fuse/connections/N/abort, with fusectl mounted there).
// Other processes, such as the nodes, are not at risk: the call a rule
// holds for a process that is killed ends with EINTR, and the process
// exits.
//
// # What is durable
//
// The model follows POSIX's rule for a crash, as LazyFS and Jepsen apply
// it:
//
//   - Every object is an inode of the model. Its number, never reused (the
//     backing file system reuses st_ino), is what stat reports.
//   - A regular file's durable contents, size included, are its contents
//     as of its last fsync or fdatasync, through any descriptor: syncs are
//     per inode, and the two do the same. Writes (write, pwrite, O_APPEND,
//     written-back pages of a shared mapping), truncation and fallocate
//     change only the live file. At each sync the ranges written since the
//     last one are copied from the backing file into the file's shadow
//     copy, and its size is set.
//   - A directory's durable entries (name to inode) are its entries as of
//     its last fsync. create, mkdir, mknod, symlink, link, unlink, rmdir
//     and rename change only the live entries; a rename's two halves are
//     durable each with its own directory's sync.
//   - Everything in the backing directory when Mount is called is durable.
//   - Modes and owners are durable at once; times are not kept.
//
// PowerLoss unmounts, so that the kernel keeps nothing cached, replaces
// the backing directory's contents by the durable tree, and mounts again.
// The durable tree is what is reachable from the root through durable
// entries: each regular file with its durable contents (empty if it was
// never synced), hard links kept, symbolic links and special files as
// made. It is then the live and the durable state both.
//
// So, after a power loss:
//
//   - a file created, written and synced in a directory that was not
//     synced afterwards is gone, and so is everything in a new directory
//     until it and each new directory above it are synced;
//   - a name made durable before its file's data was synced is an empty
//     file: a temporary file renamed over another and its directory synced,
//     but the file itself never synced, leaves an empty file;
//   - an unsynced rename or unlink is undone; a file moved between two
//     directories of which only the new one was synced has both names (as
//     hard links), with only the old one synced neither;
//   - a directory renamed into place (ID.tmp to ID, then the parent synced)
//     holds only the entries it had when it was last synced itself, none
//     if it never was;
//   - a directory reachable through two durable entries (moved, with its
//     old parent synced before the move and its new one after) keeps the
//     first of them in a breadth-first walk in name order.
//
// # Differences from a real disk
//
// The model keeps the least POSIX allows, which is not what a real disk
// does:
//
//   - ext4 with data=ordered, the usual default, persists more: fsync of a
//     new file commits its name with it, data reaches the disk before the
//     metadata that exposes it (no empty file under a durable name), and a
//     rename is committed whole, never leaving both names or neither as
//     the model can for a move between directories.
//   - A disk may keep any part of what was not synced (written back
//     early) and tear a write in flight; the model keeps none of it and
//     tears nothing, so a power loss never leaves a torn record at a log's
//     end. Damage of that kind needs a test that writes it.
//   - A sync covers the file as it is when the sync runs: a write that
//     reaches the file system before, from any descriptor, is covered.
//
// # Rules
//
// A Rule holds and fails calls by operation and by a glob on the path
// relative to the mount point; see Rule for how calls are matched. Reads
// served from the kernel's page cache never reach the file system, and
// written data goes through the cache, so read rules see only the reads
// that miss it: adding a rule that covers OpRead drops the cached pages of
// the files it matches, so that their next reads, mapped pages included,
// reach it.
//
// # What else differs from the backing file system
//
// The kernel's own locking serves flock and fcntl locks (they are not
// passed to the backing files). O_TMPFILE is refused, and so is
// copy_file_range, which the kernel then does with reads and writes.
// Passthrough, where the kernel reads and writes the backing file itself,
// is off, or the model would not see the calls. Files are opened on the
// backing directory without O_APPEND (the kernel passes the offset of
// every write) and without O_DIRECT.
package faultfs
