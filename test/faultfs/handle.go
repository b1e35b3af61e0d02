package faultfs

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// fileHandle is an open file. It wraps the loopback file rather than
// embedding it: embedding would offer the kernel the backing descriptor
// for passthrough and the ioctls, and the calls would bypass the model.
type fileHandle struct {
	n  *node
	f  *os.File // the backing file, owned by lf
	lf *fs.LoopbackFile
}

var (
	_ fs.FileReader    = (*fileHandle)(nil)
	_ fs.FileWriter    = (*fileHandle)(nil)
	_ fs.FileFsyncer   = (*fileHandle)(nil)
	_ fs.FileFlusher   = (*fileHandle)(nil)
	_ fs.FileReleaser  = (*fileHandle)(nil)
	_ fs.FileGetattrer = (*fileHandle)(nil)
	_ fs.FileStatxer   = (*fileHandle)(nil)
	_ fs.FileLseeker   = (*fileHandle)(nil)
	_ fs.FileAllocater = (*fileHandle)(nil)
)

func newFileHandle(n *node, f *os.File) *fileHandle {
	return &fileHandle{n: n, f: f, lf: fs.NewLoopbackFileFromOS(f)}
}

// Read reads the backing file.
func (h *fileHandle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	done, errno := h.n.begin(ctx, OpRead, h.n.paths)
	if errno != 0 {
		return nil, errno
	}
	defer done()
	return h.lf.Read(ctx, buf, off)
}

// Write writes the backing file; the range written is durable once the
// file is synced.
func (h *fileHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	done, errno := h.n.begin(ctx, OpWrite, h.n.paths)
	if errno != 0 {
		return 0, errno
	}
	defer done()
	ino := h.n.ino
	ino.mu.Lock()
	defer ino.mu.Unlock()
	written, errno := h.lf.Write(ctx, data, off)
	if errno != 0 {
		return 0, errno
	}
	ino.wrote(off, int64(written))
	return written, 0
}

// Fsync syncs the backing file and makes the file's contents and size
// durable. fsync and fdatasync do the same: the model keeps no
// attributes that only fsync would make durable.
func (h *fileHandle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	done, errno := h.n.begin(ctx, OpFsync, h.n.paths)
	if errno != 0 {
		return errno
	}
	defer done()
	sync := unix.Fsync
	if flags&fdatasyncFlag != 0 {
		sync = unix.Fdatasync
	}
	if errno := fs.ToErrno(sync(int(h.f.Fd()))); errno != 0 {
		return errno
	}
	if err := h.n.model().syncFile(h.n.ino, h.f); err != nil {
		return h.n.mnt.fs.fail(err)
	}
	return 0
}

// Allocate calls fallocate on the backing file; the size and the zeroed
// or shifted ranges it changes are durable once the file is synced.
func (h *fileHandle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	done, errno := h.n.begin(ctx, OpAllocate, h.n.paths)
	if errno != 0 {
		return errno
	}
	defer done()
	ino := h.n.ino
	ino.mu.Lock()
	defer ino.mu.Unlock()
	before, err := h.f.Stat()
	if err != nil {
		return fs.ToErrno(err)
	}
	if errno := h.lf.Allocate(ctx, off, size, mode); errno != 0 {
		return errno
	}
	after, err := h.f.Stat()
	if err != nil {
		return h.n.mnt.fs.fail(fmt.Errorf("stat inode %d after fallocate: %w", ino.id, err))
	}
	end := int64(off + size)
	if mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0 {
		// Everything after off moved.
		end = max(before.Size(), after.Size())
	}
	ino.wrote(int64(off), end-int64(off))
	ino.resized(after.Size())
	return 0
}

// Flush passes a close of one descriptor on.
func (h *fileHandle) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }

// Release closes the backing file.
func (h *fileHandle) Release(ctx context.Context) syscall.Errno { return h.lf.Release(ctx) }

// Lseek finds data and holes in the backing file.
func (h *fileHandle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}

// Getattr reports the backing file's attributes under the model's inode
// number.
func (h *fileHandle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	if errno := h.lf.Getattr(ctx, out); errno != 0 {
		return errno
	}
	out.Ino = h.n.ino.id
	return 0
}

// Statx is Getattr's extended form.
func (h *fileHandle) Statx(ctx context.Context, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := h.lf.Statx(ctx, flags, mask, out); errno != 0 {
		return errno
	}
	out.Ino = h.n.ino.id
	return 0
}

// dirStream is what a loopback directory stream offers.
type dirStream interface {
	fs.DirStream
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
	fs.FileFsyncdirer
}

// dirHandle is an open directory.
type dirHandle struct {
	n  *node
	ds dirStream
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
	_ fs.FileFsyncdirer   = (*dirHandle)(nil)
)

// Readdirent reads one entry of the backing directory, numbered as the
// model numbers its inode.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	de, errno := d.ds.Readdirent(ctx)
	if de == nil || errno != 0 {
		return de, errno
	}
	m := d.n.model()
	m.tree.RLock()
	defer m.tree.RUnlock()
	switch de.Name {
	case ".":
		de.Ino = d.n.ino.id
	case "..":
		if links := d.n.ino.links; len(links) > 0 {
			de.Ino = links[0].dir.id
		} else {
			de.Ino = d.n.ino.id
		}
	default:
		if child := d.n.ino.children[de.Name]; child != nil {
			de.Ino = child.id
		}
	}
	return de, 0
}

// Seekdir seeks in the backing directory.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.Seekdir(ctx, off)
}

// Releasedir closes the backing directory.
func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) { d.ds.Releasedir(ctx, flags) }

// Fsyncdir syncs the backing directory and makes the directory's entries
// as they are now durable.
func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	done, errno := d.n.begin(ctx, OpFsyncDir, d.n.paths)
	if errno != 0 {
		return errno
	}
	defer done()
	if errno := d.ds.Fsyncdir(ctx, flags); errno != 0 {
		return errno
	}
	d.n.model().syncDir(d.n.ino)
	return 0
}
