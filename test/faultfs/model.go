package faultfs

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// link is one name of an inode: an entry name in directory dir.
type link struct {
	dir  *inode
	name string
}

// inode is the model of one file system object. Its id is the inode number
// the mount reports; ids are never reused, unlike the backing file system's.
type inode struct {
	id   uint64
	kind uint32 // the S_IFMT bits of its mode

	// Set when it is made; never changed.
	target string // a symlink's target
	rdev   uint64 // a device node's device

	// Guarded by model.tree.
	links    []link            // its names now: one for a directory, any number for others
	children map[string]*inode // a directory's entries now
	durable  map[string]*inode // a directory's entries as of its last fsync

	mu sync.Mutex
	// Guarded by mu: attributes a rebuilt tree gives it.
	perm, uid, gid uint32
	// Guarded by mu: what of a regular file's contents is durable.
	dirty       spans // ranges written since the last sync
	durableSize int64 // size of the durable contents (the shadow file)
	lowSize     int64 // smallest size the file had since the last sync; at most durableSize
	stored      bool  // whether the shadow file exists
}

func (n *inode) isDir() bool { return n.kind == syscall.S_IFDIR }

// wrote records that [off, off+n) was written; n.mu must be held.
func (n *inode) wrote(off, size int64) {
	n.dirty = n.dirty.add(off, off+size)
}

// resized records that the file's size is now size; n.mu must be held.
func (n *inode) resized(size int64) {
	n.lowSize = min(n.lowSize, size)
}

func (n *inode) setAttrs(st *syscall.Stat_t) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.perm = st.Mode &^ syscall.S_IFMT
	n.uid = st.Uid
	n.gid = st.Gid
}

// model holds the inodes of a mounted tree, what of it is durable, and the
// shadow directory that keeps the durable contents of regular files, one
// file per inode named by its id.
type model struct {
	backing string
	shadow  string

	tree   sync.RWMutex // guards every inode's links, children and durable, and nextID
	root   *inode
	nextID uint64
}

// newInode makes an inode; m.tree must be held for writing.
func (m *model) newInode(st *syscall.Stat_t) *inode {
	m.nextID++
	n := &inode{id: m.nextID, kind: st.Mode & syscall.S_IFMT, rdev: st.Rdev}
	n.setAttrs(st)
	if n.isDir() {
		n.children = map[string]*inode{}
		n.durable = map[string]*inode{}
	}
	return n
}

// newInodeAt makes an inode for the backing file at p, whose attributes
// are st; m.tree must be held for writing.
func (m *model) newInodeAt(p string, st *syscall.Stat_t) (*inode, error) {
	n := m.newInode(st)
	if n.kind == syscall.S_IFLNK {
		target, err := os.Readlink(p)
		if err != nil {
			return nil, fmt.Errorf("faultfs: read link %s: %w", p, err)
		}
		n.target = target
	}
	return n, nil
}

// attach gives child the name in dir; m.tree must be held for writing.
func (m *model) attach(dir *inode, name string, child *inode) {
	dir.children[name] = child
	child.links = append(child.links, link{dir, name})
}

// detach removes the name from dir and returns the inode it named, if
// any; m.tree must be held for writing.
func (m *model) detach(dir *inode, name string) *inode {
	child := dir.children[name]
	if child == nil {
		return nil
	}
	delete(dir.children, name)
	child.links = slices.DeleteFunc(child.links, func(l link) bool { return l.dir == dir && l.name == name })
	return child
}

// rename moves the entry name of dir to newName of newDir, replacing what
// newName named, or swaps the two entries when exchange is set; m.tree must
// be held for writing.
func (m *model) rename(dir *inode, name string, newDir *inode, newName string, exchange bool) {
	if dir == newDir && name == newName {
		return
	}
	moved := m.detach(dir, name)
	replaced := m.detach(newDir, newName)
	if moved != nil {
		m.attach(newDir, newName, moved)
	}
	if exchange && replaced != nil {
		m.attach(dir, name, replaced)
	}
}

// relPath is the path of a directory relative to the mount point, "." for
// the root; ok is false for a directory that was removed. m.tree must be
// held.
func (m *model) relPath(dir *inode) (p string, ok bool) {
	if dir == m.root {
		return ".", true
	}
	if len(dir.links) == 0 {
		return "", false
	}
	l := dir.links[0]
	parent, ok := m.relPath(l.dir)
	if !ok {
		return "", false
	}
	return joinRel(parent, l.name), true
}

func joinRel(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// paths are every path of n relative to the mount point; m.tree must be
// held.
func (m *model) paths(n *inode) []string {
	if n == m.root {
		return []string{"."}
	}
	var out []string
	for _, l := range n.links {
		if dir, ok := m.relPath(l.dir); ok {
			out = append(out, joinRel(dir, l.name))
		}
	}
	return out
}

// backingPath is where n is in the backing directory; m.tree must be held.
func (m *model) backingPath(n *inode) (string, bool) {
	if n == m.root {
		return m.backing, true
	}
	if len(n.links) == 0 {
		return "", false
	}
	l := n.links[0]
	dir, ok := m.relPath(l.dir)
	if !ok {
		return "", false
	}
	return filepath.Join(m.backing, dir, l.name), true
}

func (m *model) shadowPath(n *inode) string {
	return filepath.Join(m.shadow, strconv.FormatUint(n.id, 10))
}

// scan models the tree already in the backing directory, all of it
// durable, and copies every regular file's contents into the shadow
// directory.
func (m *model) scan() error {
	m.tree.Lock()
	defer m.tree.Unlock()
	var st syscall.Stat_t
	if err := syscall.Lstat(m.backing, &st); err != nil {
		return fmt.Errorf("faultfs: stat %s: %w", m.backing, err)
	}
	m.root = m.newInode(&st)
	return m.scanDir(m.root, m.backing, map[uint64]*inode{})
}

// scanDir models the entries of the backing directory p as dir's; files
// maps the backing inode number of every regular file with several links
// seen so far to its inode.
func (m *model) scanDir(dir *inode, p string, files map[uint64]*inode) error {
	entries, err := os.ReadDir(p)
	if err != nil {
		return fmt.Errorf("faultfs: read directory %s: %w", p, err)
	}
	for _, e := range entries {
		cp := filepath.Join(p, e.Name())
		var st syscall.Stat_t
		if err := syscall.Lstat(cp, &st); err != nil {
			return fmt.Errorf("faultfs: stat %s: %w", cp, err)
		}
		child := files[st.Ino]
		if child == nil {
			if child, err = m.newInodeAt(cp, &st); err != nil {
				return err
			}
			if err := m.scanInode(child, cp, &st, files); err != nil {
				return err
			}
		}
		m.attach(dir, e.Name(), child)
		dir.durable[e.Name()] = child
	}
	return nil
}

func (m *model) scanInode(n *inode, p string, st *syscall.Stat_t, files map[uint64]*inode) error {
	switch n.kind {
	case syscall.S_IFDIR:
		return m.scanDir(n, p, files)
	case syscall.S_IFREG:
		if st.Nlink > 1 {
			files[st.Ino] = n
		}
		if err := copyFile(m.shadowPath(n), p, 0o600); err != nil {
			return err
		}
		n.stored = true
		n.durableSize = st.Size
		n.lowSize = st.Size
	}
	return nil
}

// syncFile makes n's contents durable as f reads them now: the ranges
// written since the last sync are copied into the shadow file and its size
// set to the file's. f is an open descriptor of n's backing file that can
// read.
func (m *model) syncFile(n *inode, f *os.File) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("faultfs: stat inode %d: %w", n.id, err)
	}
	size := st.Size()
	shadow, err := os.OpenFile(m.shadowPath(n), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("faultfs: open shadow of inode %d: %w", n.id, err)
	}
	defer shadow.Close()
	// Bytes cut off since the last sync read as zeros if the file grew
	// back over them, so they go before the file's size is set.
	if n.lowSize < n.durableSize {
		if err := shadow.Truncate(n.lowSize); err != nil {
			return fmt.Errorf("faultfs: truncate shadow of inode %d: %w", n.id, err)
		}
	}
	if err := shadow.Truncate(size); err != nil {
		return fmt.Errorf("faultfs: size shadow of inode %d: %w", n.id, err)
	}
	buf := make([]byte, 64<<10)
	for _, r := range n.dirty.clip(size) {
		src := io.NewSectionReader(f, r.start, r.end-r.start)
		if _, err := io.CopyBuffer(io.NewOffsetWriter(shadow, r.start), src, buf); err != nil {
			return fmt.Errorf("faultfs: copy [%d, %d) of inode %d to its shadow: %w", r.start, r.end, n.id, err)
		}
	}
	if err := shadow.Close(); err != nil {
		return fmt.Errorf("faultfs: close shadow of inode %d: %w", n.id, err)
	}
	n.dirty = nil
	n.durableSize = size
	n.lowSize = size
	n.stored = true
	return nil
}

// syncDir makes dir's entries as they are now durable.
func (m *model) syncDir(dir *inode) {
	m.tree.Lock()
	defer m.tree.Unlock()
	dir.durable = maps.Clone(dir.children)
}

// restore replaces the tree by its durable state, in the model and in the
// backing directory, and drops the shadow files of inodes no longer in it.
func (m *model) restore() error {
	m.tree.Lock()
	defer m.tree.Unlock()
	kept := m.durableTree()
	entries, err := os.ReadDir(m.backing)
	if err != nil {
		return fmt.Errorf("faultfs: read directory %s: %w", m.backing, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(m.backing, e.Name())); err != nil {
			return fmt.Errorf("faultfs: clear backing directory: %w", err)
		}
	}
	if err := m.build(m.root, m.backing, map[*inode]string{}); err != nil {
		return err
	}
	shadows, err := os.ReadDir(m.shadow)
	if err != nil {
		return fmt.Errorf("faultfs: read shadow directory %s: %w", m.shadow, err)
	}
	for _, e := range shadows {
		id, err := strconv.ParseUint(e.Name(), 10, 64)
		if err == nil && kept[id] {
			continue
		}
		if err := os.Remove(filepath.Join(m.shadow, e.Name())); err != nil {
			return fmt.Errorf("faultfs: drop shadow file: %w", err)
		}
	}
	return nil
}

// durableTree makes the durable entries of every directory reachable from
// the root through durable entries its entries now, and forgets what was
// not durable about the regular files among them. A directory reachable
// through more than one durable entry (moved, with both its old and its new
// parent synced only before and after the move respectively) keeps the
// first of them in a breadth-first walk in name order. It returns the ids
// of the inodes in the tree. m.tree must be held for writing.
func (m *model) durableTree() map[uint64]bool {
	kept := map[uint64]bool{m.root.id: true}
	dirs := []*inode{m.root}
	var all []*inode
	for len(dirs) > 0 {
		dir := dirs[0]
		dirs = dirs[1:]
		entries := map[string]*inode{}
		for _, name := range slices.Sorted(maps.Keys(dir.durable)) {
			child := dir.durable[name]
			if child.isDir() && kept[child.id] {
				continue
			}
			if !kept[child.id] {
				kept[child.id] = true
				all = append(all, child)
				if child.isDir() {
					dirs = append(dirs, child)
				}
			}
			entries[name] = child
		}
		dir.children = entries
		dir.durable = maps.Clone(entries)
	}
	for _, n := range all {
		n.links = nil
		n.mu.Lock()
		n.dirty = nil
		n.lowSize = n.durableSize
		n.mu.Unlock()
	}
	for _, dir := range append(all, m.root) {
		if !dir.isDir() {
			continue
		}
		for name, child := range dir.children {
			child.links = append(child.links, link{dir, name})
		}
	}
	return kept
}

// build makes dir's entries in the backing directory p, and everything
// below them; made maps the regular files made so far to their path, so a
// further name of one becomes a hard link. m.tree must be held.
func (m *model) build(dir *inode, p string, made map[*inode]string) error {
	for _, name := range slices.Sorted(maps.Keys(dir.children)) {
		child := dir.children[name]
		cp := filepath.Join(p, name)
		if first, ok := made[child]; ok {
			if err := os.Link(first, cp); err != nil {
				return fmt.Errorf("faultfs: rebuild %s: %w", cp, err)
			}
			continue
		}
		if err := m.make(child, cp); err != nil {
			return fmt.Errorf("faultfs: rebuild %s: %w", cp, err)
		}
		if child.kind == syscall.S_IFREG {
			made[child] = cp
		}
		if child.isDir() {
			if err := m.build(child, cp, made); err != nil {
				return err
			}
		}
	}
	return nil
}

// make creates n at p with its durable contents and its attributes.
func (m *model) make(n *inode, p string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var err error
	switch n.kind {
	case syscall.S_IFDIR:
		err = os.Mkdir(p, 0o700)
	case syscall.S_IFLNK:
		err = os.Symlink(n.target, p)
	case syscall.S_IFREG:
		if n.stored {
			err = copyFile(p, m.shadowPath(n), 0o600)
		} else {
			err = writeEmpty(p)
		}
	default:
		err = unix.Mknod(p, n.kind|n.perm, int(n.rdev))
	}
	if err != nil {
		return err
	}
	if err := os.Lchown(p, int(n.uid), int(n.gid)); err != nil {
		return err
	}
	if n.kind == syscall.S_IFLNK {
		return nil
	}
	return syscall.Chmod(p, n.perm)
}

func writeEmpty(p string) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// copyFile makes dst, which must not exist, a copy of src.
func copyFile(dst, src string, perm os.FileMode) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("faultfs: copy %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("faultfs: copy to %s: %w", dst, err)
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("faultfs: copy to %s: %w", dst, cerr)
		}
	}()
	if _, err := io.Copy(out, in); err != nil {
		return fmt.Errorf("faultfs: copy %s to %s: %w", src, dst, err)
	}
	return nil
}
