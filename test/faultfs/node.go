package faultfs

import (
	"context"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is the go-fuse node of one inode in one mount. The loopback node it
// embeds answers the calls that change nothing (getattr by path, readlink,
// xattrs, statfs). Every call that makes a node, changes the namespace or
// opens a file is its own, because the identity it gives a node is the
// model's inode, not the backing file's st_ino, which the backing file
// system reuses.
type node struct {
	fs.LoopbackNode
	mnt *mount
	ino *inode
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// fdatasyncFlag is FUSE_FSYNC_FDATASYNC: the fsync is an fdatasync.
const fdatasyncFlag = 1

func (mnt *mount) newNode(lr *fs.LoopbackRoot, ino *inode) *node {
	return &node{LoopbackNode: fs.LoopbackNode{RootData: lr}, mnt: mnt, ino: ino}
}

func (n *node) model() *model { return n.mnt.fs.model }

// begin admits a call of op on the mount: it refuses calls of a retired
// mount and lets the rules act on the call (paths gives the paths they
// match). On success the caller must call done when the call no longer
// touches the model. An op of 0 is seen by no rule.
func (n *node) begin(ctx context.Context, op Op, paths func() []string) (done func(), errno syscall.Errno) {
	f := n.mnt.fs
	f.gate.RLock()
	if n.mnt.dead {
		f.gate.RUnlock()
		return nil, syscall.EIO
	}
	if errno := f.rules.apply(ctx, op, paths); errno != 0 {
		f.gate.RUnlock()
		return nil, errno
	}
	return f.gate.RUnlock, 0
}

// paths are the node's paths relative to the mount point.
func (n *node) paths() []string {
	m := n.model()
	m.tree.RLock()
	defer m.tree.RUnlock()
	return m.paths(n.ino)
}

// entry is the path of the entry name of this directory relative to the
// mount point.
func (n *node) entry(name string) []string {
	m := n.model()
	m.tree.RLock()
	defer m.tree.RUnlock()
	dir, ok := m.relPath(n.ino)
	if !ok {
		return nil
	}
	return []string{joinRel(dir, name)}
}

// backingEntry is where the entry name of this directory is in the
// backing directory; the model's tree lock must be held.
func (n *node) backingEntry(name string) (string, syscall.Errno) {
	dir, ok := n.model().backingPath(n.ino)
	if !ok {
		return "", syscall.ENOENT
	}
	return filepath.Join(dir, name), 0
}

// child returns the go-fuse inode of ino, an entry of this directory whose
// backing file has the attributes st, and fills out from st.
func (n *node) child(ctx context.Context, ino *inode, st *syscall.Stat_t, out *fuse.EntryOut) *fs.Inode {
	out.Attr.FromStat(st)
	out.Attr.Ino = ino.id
	return n.NewInode(ctx, n.mnt.newNode(n.RootData, ino), fs.StableAttr{Mode: ino.kind, Ino: ino.id})
}

// Lookup finds the entry name. An entry made in the backing directory
// behind the mount's back becomes a new inode, durable nowhere.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	done, errno := n.begin(ctx, 0, nil)
	if errno != 0 {
		return nil, errno
	}
	defer done()
	m := n.model()
	m.tree.RLock()
	p, errno := n.backingEntry(name)
	child := n.ino.children[name]
	m.tree.RUnlock()
	if errno != 0 {
		return nil, errno
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	if child == nil {
		m.tree.Lock()
		child = n.ino.children[name]
		if child == nil {
			var err error
			if child, err = m.newInodeAt(p, &st); err != nil {
				m.tree.Unlock()
				return nil, fs.ToErrno(err)
			}
			m.attach(n.ino, name, child)
		}
		m.tree.Unlock()
	}
	return n.child(ctx, child, &st, out), 0
}

// backingFlags are the flags to open a backing file with for a call's
// flags. The kernel passes the offset of every write, appends included,
// and pwrite on a descriptor opened with O_APPEND would append anyway, so
// O_APPEND goes; O_DIRECT goes because the kernel's buffers are not
// aligned as it needs. A write-only file is opened for reading too, so a
// sync can copy from it.
func backingFlags(flags uint32) int {
	f := int(flags) &^ (syscall.O_APPEND | syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOCTTY | syscall.O_DIRECT | fuse.FMODE_EXEC)
	if f&syscall.O_ACCMODE == syscall.O_WRONLY {
		f = f&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return f | syscall.O_CLOEXEC
}

// chownToCaller gives a new entry the caller's owner and group, as a file
// system does for the process that makes it.
func chownToCaller(ctx context.Context, p string) error {
	caller, ok := fuse.FromContext(ctx)
	if !ok || os.Geteuid() != 0 {
		return nil
	}
	return os.Lchown(p, int(caller.Uid), int(caller.Gid))
}

// Create opens the entry name, creating it unless it exists. A new file
// is durable nowhere: its name needs a sync of this directory, its data a
// sync of the file.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	done, errno := n.begin(ctx, OpCreate, func() []string { return n.entry(name) })
	if errno != 0 {
		return nil, nil, 0, errno
	}
	defer done()
	m := n.model()
	m.tree.Lock()
	defer m.tree.Unlock()
	p, errno := n.backingEntry(name)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	// Only an exclusive create tells whether the file is new.
	fd, err := syscall.Open(p, backingFlags(flags)|syscall.O_CREAT|syscall.O_EXCL, mode)
	created := err == nil
	if err == syscall.EEXIST && flags&syscall.O_EXCL == 0 {
		fd, err = syscall.Open(p, backingFlags(flags), 0)
	}
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	file := os.NewFile(uintptr(fd), p)
	if created {
		if err := chownToCaller(ctx, p); err != nil {
			file.Close()
			syscall.Unlink(p)
			return nil, nil, 0, fs.ToErrno(err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		file.Close()
		return nil, nil, 0, fs.ToErrno(err)
	}
	ino := n.ino.children[name]
	if created || ino == nil {
		m.detach(n.ino, name)
		if ino, err = m.newInodeAt(p, &st); err != nil {
			file.Close()
			return nil, nil, 0, fs.ToErrno(err)
		}
		m.attach(n.ino, name, ino)
	} else if flags&syscall.O_TRUNC != 0 {
		ino.mu.Lock()
		ino.resized(0)
		ino.mu.Unlock()
	}
	ch := n.child(ctx, ino, &st, out)
	return ch, newFileHandle(ch.Operations().(*node), file), 0, 0
}

// makeEntry makes the entry name with mk. The entry names existing if it
// is not nil (a hard link), else a new inode, which gets the caller as its
// owner. Like a file's, the new name is durable only once this directory
// is synced.
func (n *node) makeEntry(ctx context.Context, name string, existing *inode, out *fuse.EntryOut, mk func(p string) error) (*fs.Inode, syscall.Errno) {
	done, errno := n.begin(ctx, OpCreate, func() []string { return n.entry(name) })
	if errno != 0 {
		return nil, errno
	}
	defer done()
	m := n.model()
	m.tree.Lock()
	defer m.tree.Unlock()
	p, errno := n.backingEntry(name)
	if errno != 0 {
		return nil, errno
	}
	if err := mk(p); err != nil {
		return nil, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	err := syscall.Lstat(p, &st)
	if err == nil && existing == nil {
		err = chownToCaller(ctx, p)
		if err == nil {
			err = syscall.Lstat(p, &st)
		}
	}
	if err != nil {
		removeEntry(p, st.Mode)
		return nil, fs.ToErrno(err)
	}
	ino := existing
	if ino == nil {
		if ino, err = m.newInodeAt(p, &st); err != nil {
			removeEntry(p, st.Mode)
			return nil, fs.ToErrno(err)
		}
	}
	m.attach(n.ino, name, ino)
	return n.child(ctx, ino, &st, out), 0
}

// removeEntry undoes a half-made entry.
func removeEntry(p string, mode uint32) {
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		syscall.Rmdir(p)
		return
	}
	syscall.Unlink(p)
}

// Mkdir makes a directory; its name is durable once this directory is
// synced, its entries once it is.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.makeEntry(ctx, name, nil, out, func(p string) error { return syscall.Mkdir(p, mode) })
}

// Mknod makes a special file.
func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.makeEntry(ctx, name, nil, out, func(p string) error { return syscall.Mknod(p, mode, int(rdev)) })
}

// Symlink makes a symbolic link.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.makeEntry(ctx, name, nil, out, func(p string) error { return syscall.Symlink(target, p) })
}

// Link gives target a further name.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok || t.mnt != n.mnt {
		return nil, syscall.EXDEV
	}
	return n.makeEntry(ctx, name, t.ino, out, func(p string) error {
		src, ok := n.model().backingPath(t.ino)
		if !ok {
			return syscall.ENOENT
		}
		return syscall.Link(src, p)
	})
}

// Tmpfile refuses O_TMPFILE: a file without a name cannot be linked into
// place through FUSE, which passes no descriptor with a link.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EOPNOTSUPP
}

// removeName removes the entry name with rm. The name stays durable until
// this directory is synced.
func (n *node) removeName(ctx context.Context, name string, rm func(string) error) syscall.Errno {
	done, errno := n.begin(ctx, OpRemove, func() []string { return n.entry(name) })
	if errno != 0 {
		return errno
	}
	defer done()
	m := n.model()
	m.tree.Lock()
	defer m.tree.Unlock()
	p, errno := n.backingEntry(name)
	if errno != 0 {
		return errno
	}
	if err := rm(p); err != nil {
		return fs.ToErrno(err)
	}
	m.detach(n.ino, name)
	return 0
}

// Unlink removes a name that is not a directory's.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.removeName(ctx, name, syscall.Unlink)
}

// Rmdir removes an empty directory.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.removeName(ctx, name, syscall.Rmdir)
}

// Rename moves the entry name to newName of newParent, replacing what it
// named (RENAME_NOREPLACE refuses to, RENAME_EXCHANGE swaps the two). Each
// directory's part of it is durable once that directory is synced.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok || np.mnt != n.mnt {
		return syscall.EXDEV
	}
	if flags&unix.RENAME_WHITEOUT != 0 {
		return syscall.EINVAL
	}
	done, errno := n.begin(ctx, OpRename, func() []string { return append(n.entry(name), np.entry(newName)...) })
	if errno != 0 {
		return errno
	}
	defer done()
	m := n.model()
	m.tree.Lock()
	defer m.tree.Unlock()
	from, errno := n.backingEntry(name)
	if errno != 0 {
		return errno
	}
	to, errno := np.backingEntry(newName)
	if errno != 0 {
		return errno
	}
	if err := unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, uint(flags)); err != nil {
		return fs.ToErrno(err)
	}
	m.rename(n.ino, name, np.ino, newName, flags&unix.RENAME_EXCHANGE != 0)
	return 0
}

// Open opens the file.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	done, errno := n.begin(ctx, OpOpen, n.paths)
	if errno != 0 {
		return nil, 0, errno
	}
	defer done()
	m := n.model()
	// Held across the open, so a rename cannot give the path to another
	// file in between.
	m.tree.RLock()
	p, ok := m.backingPath(n.ino)
	var file *os.File
	var err error
	if ok {
		file, err = os.OpenFile(p, backingFlags(flags), 0)
	}
	m.tree.RUnlock()
	if !ok {
		return nil, 0, syscall.ENOENT
	}
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	if flags&syscall.O_TRUNC != 0 {
		n.ino.mu.Lock()
		n.ino.resized(0)
		n.ino.mu.Unlock()
	}
	return newFileHandle(n, file), 0, 0
}

// OpendirHandle opens the directory, for reading or for fsync.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	done, errno := n.begin(ctx, OpOpen, n.paths)
	if errno != 0 {
		return nil, 0, errno
	}
	defer done()
	m := n.model()
	m.tree.RLock()
	p, ok := m.backingPath(n.ino)
	var ds fs.DirStream
	if ok {
		ds, errno = fs.NewLoopbackDirStream(p)
	}
	m.tree.RUnlock()
	if !ok {
		return nil, 0, syscall.ENOENT
	}
	if errno != 0 {
		return nil, 0, errno
	}
	stream, ok := ds.(dirStream)
	if !ok {
		ds.Close()
		return nil, 0, syscall.ENOTSUP
	}
	return &dirHandle{n: n, ds: stream}, 0, 0
}

// Setattr changes attributes; a new size is durable once the file is
// synced, the other attributes at once.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	_, sized := in.GetSize()
	var op Op
	if sized {
		op = OpTruncate
	}
	done, errno := n.begin(ctx, op, n.paths)
	if errno != 0 {
		return errno
	}
	defer done()
	n.ino.mu.Lock()
	defer n.ino.mu.Unlock()
	if h, ok := f.(*fileHandle); ok {
		errno = h.lf.Setattr(ctx, in, out)
	} else {
		errno = n.LoopbackNode.Setattr(ctx, nil, in, out)
	}
	if errno != 0 {
		return errno
	}
	if sized {
		n.ino.resized(int64(out.Size))
	}
	n.ino.perm = out.Mode &^ syscall.S_IFMT
	n.ino.uid = out.Uid
	n.ino.gid = out.Gid
	out.Ino = n.ino.id
	return 0
}

// Getattr reports the backing file's attributes under the model's inode
// number.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if errno := n.LoopbackNode.Getattr(ctx, f, out); errno != 0 {
		return errno
	}
	out.Ino = n.ino.id
	return 0
}

// Statx is Getattr's extended form.
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	if errno := n.LoopbackNode.Statx(ctx, f, flags, mask, out); errno != 0 {
		return errno
	}
	out.Ino = n.ino.id
	return 0
}

// CopyFileRange is refused, so the kernel copies through reads and writes
// the model sees.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}
