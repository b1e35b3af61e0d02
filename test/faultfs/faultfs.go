package faultfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Options tune a mount.
type Options struct {
	// Debug logs every FUSE request and reply to the standard logger.
	Debug bool
}

// ErrNotMounted is returned by PowerLoss after Unmount.
var ErrNotMounted = errors.New("faultfs: not mounted")

// unmountWait bounds how long Unmount and PowerLoss retry while the kernel
// still counts the mount busy (a killed process's files are closed shortly
// after it exits).
const unmountWait = 5 * time.Second

// cacheDropWait bounds how long Add waits for the kernel to drop cached
// pages: dropping a page waits for its lock, which a held read or write of
// that page keeps.
const cacheDropWait = time.Second

// FS is a mounted fault file system: a view of a backing directory whose
// durable state it models, with rules that hold or fail chosen calls. Its
// methods are safe for concurrent use.
type FS struct {
	backing, mountpoint, shadow string
	opts                        Options
	model                       *model
	rules                       ruleSet

	// life serialises Unmount and PowerLoss, and guards mnt.
	life sync.Mutex
	mnt  *mount

	// gate is held for reading by every call the model sees, for its
	// whole length, and for writing while a mount is retired, so no call
	// of an old mount touches the model after that.
	gate sync.RWMutex

	errMu sync.Mutex
	err   error // the first failure of the model while serving a call
}

// mount is one mount of an FS: PowerLoss replaces it.
type mount struct {
	fs     *FS
	server *fuse.Server
	root   *node
	dead   bool // guarded by fs.gate
}

// Usable reports why this process cannot mount a faultfs (nil if it can):
// mount(2) needs root and /dev/fuse.
func Usable() error {
	if os.Geteuid() != 0 {
		return errors.New("mounting a FUSE file system with mount(2) needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse: %w", err)
	}
	return nil
}

// Mount serves the backing directory at mountpoint, keeping the durable
// contents of files in shadow, which must be empty or missing. The three
// must be distinct directories, none inside another. Everything in backing
// when Mount is called counts as durable. Mounting needs root and
// /dev/fuse; the FUSE server runs in the calling process until Unmount.
func Mount(backing, mountpoint, shadow string, opts Options) (*FS, error) {
	dirs, err := checkDirs(backing, mountpoint, shadow)
	if err != nil {
		return nil, err
	}
	f := &FS{backing: dirs[0], mountpoint: dirs[1], shadow: dirs[2], opts: opts}
	f.model = &model{backing: f.backing, shadow: f.shadow}
	if err := f.model.scan(); err != nil {
		return nil, err
	}
	if err := f.mount(); err != nil {
		return nil, err
	}
	return f, nil
}

// checkDirs returns the three directories as clean absolute paths, making
// shadow if it is missing.
func checkDirs(backing, mountpoint, shadow string) ([]string, error) {
	var dirs []string
	for _, d := range []string{backing, mountpoint, shadow} {
		abs, err := filepath.Abs(d)
		if err != nil {
			return nil, fmt.Errorf("faultfs: %w", err)
		}
		for _, other := range dirs {
			if within(abs, other) || within(other, abs) {
				return nil, fmt.Errorf("faultfs: %s and %s overlap", other, abs)
			}
		}
		dirs = append(dirs, abs)
	}
	if err := os.MkdirAll(dirs[2], 0o700); err != nil {
		return nil, fmt.Errorf("faultfs: make shadow directory: %w", err)
	}
	for _, d := range dirs {
		if st, err := os.Stat(d); err != nil {
			return nil, fmt.Errorf("faultfs: %w", err)
		} else if !st.IsDir() {
			return nil, fmt.Errorf("faultfs: %s is not a directory", d)
		}
	}
	if entries, err := os.ReadDir(dirs[2]); err != nil {
		return nil, fmt.Errorf("faultfs: read shadow directory: %w", err)
	} else if len(entries) > 0 {
		return nil, fmt.Errorf("faultfs: shadow directory %s is not empty", dirs[2])
	}
	return dirs, nil
}

func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func (f *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(f.backing, &st); err != nil {
		return fmt.Errorf("faultfs: stat %s: %w", f.backing, err)
	}
	mnt := &mount{fs: f}
	lr := &fs.LoopbackRoot{Path: f.backing, Dev: st.Dev}
	root := mnt.newNode(lr, f.model.root)
	lr.RootNode = root
	mnt.root = root
	timeout := time.Second
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			// As root, go-fuse mounts with mount(2), needing no fusermount.
			DirectMountStrict: true,
			FsName:            f.backing,
			Name:              "faultfs",
			Debug:             f.opts.Debug,
			// With passthrough the kernel reads and writes the backing
			// files itself, and the model would never see the calls.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		},
		EntryTimeout:   &timeout,
		AttrTimeout:    &timeout,
		RootStableAttr: &fs.StableAttr{Ino: f.model.root.id, Mode: syscall.S_IFDIR},
	}
	server, err := fs.Mount(f.mountpoint, root, opts)
	if err != nil {
		return fmt.Errorf("faultfs: mount %s on %s: %w", f.backing, f.mountpoint, err)
	}
	mnt.server = server
	f.mnt = mnt
	return nil
}

// retire unmounts the current mount and waits for the calls it still
// serves; f.life must be held.
func (f *FS) retire() error {
	deadline := time.Now().Add(unmountWait)
	for {
		err := f.mnt.server.Unmount()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faultfs: unmount %s: %w", f.mountpoint, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.gate.Lock()
	f.mnt.dead = true
	f.gate.Unlock()
	f.mnt = nil
	return nil
}

// Unmount releases every held call, clears every rule and unmounts. The
// backing directory keeps the tree as it is, durable or not. It fails if a
// process still uses the mount, or if the model failed while serving a
// call (the error says how). Unmount after Unmount does nothing.
func (f *FS) Unmount() error {
	f.life.Lock()
	defer f.life.Unlock()
	if f.mnt == nil {
		return nil
	}
	f.rules.clearAll()
	if err := f.retire(); err != nil {
		return err
	}
	return f.failure()
}

// PowerLoss forgets every change that was not durable, as a machine that
// loses power does, and serves the durable tree again at the same mount
// point: it unmounts (so the kernel keeps nothing cached), rebuilds the
// backing directory from the durable state, and mounts again. Afterwards
// the rebuilt tree is all durable. No process may use the mount when it
// is called; rules stay as they are.
func (f *FS) PowerLoss() error {
	f.life.Lock()
	defer f.life.Unlock()
	if f.mnt == nil {
		return ErrNotMounted
	}
	if err := f.failure(); err != nil {
		return err
	}
	if err := f.retire(); err != nil {
		return err
	}
	if err := f.model.restore(); err != nil {
		return err
	}
	return f.mount()
}

// Add starts applying r and returns its id. A rule that covers OpRead first
// makes the kernel drop the cached pages of the files it matches, so their
// next reads reach the file system (Add waits at most a second for that:
// a page being read or written by a held call stays cached until the call
// ends).
func (f *FS) Add(r Rule) (RuleID, error) {
	id, err := f.rules.add(r)
	if err != nil {
		return 0, err
	}
	if r.Op&OpRead != 0 {
		f.dropCaches(r.Path)
	}
	return id, nil
}

// Clear stops applying the rule and releases the calls it holds. Its Stats
// stay readable.
func (f *FS) Clear(id RuleID) { f.rules.clear(id) }

// ClearAll clears every rule.
func (f *FS) ClearAll() { f.rules.clearAll() }

// Stats tells what the rule did so far; ok is false for an id Add did not
// return.
func (f *FS) Stats(id RuleID) (s Stats, ok bool) { return f.rules.stats(id) }

// dropCaches asks the kernel to drop the cached pages of the regular files
// it knows by a name the pattern matches.
func (f *FS) dropCaches(pattern string) {
	f.life.Lock()
	var known []*fs.Inode
	if f.mnt != nil {
		known = knownFiles(f.mnt.root.EmbeddedInode(), map[*fs.Inode]bool{})
	}
	f.life.Unlock()
	var matched []*fs.Inode
	m := f.model
	m.tree.RLock()
	for _, n := range known {
		if matches(pattern, m.paths(n.Operations().(*node).ino)) {
			matched = append(matched, n)
		}
	}
	m.tree.RUnlock()
	if len(matched) == 0 {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, n := range matched {
			// An error means the kernel forgot the inode, and its pages.
			n.NotifyContent(0, 0)
		}
	}()
	t := time.NewTimer(cacheDropWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// knownFiles lists the regular files below dir in go-fuse's tree: the
// inodes the kernel knows by a name, so the ones it may cache pages of.
func knownFiles(dir *fs.Inode, seen map[*fs.Inode]bool) []*fs.Inode {
	var out []*fs.Inode
	for _, child := range dir.Children() {
		if seen[child] {
			continue
		}
		seen[child] = true
		switch child.StableAttr().Mode {
		case syscall.S_IFDIR:
			out = append(out, knownFiles(child, seen)...)
		case syscall.S_IFREG:
			out = append(out, child)
		}
	}
	return out
}

// fail records the first failure of the model while serving a call: the
// call itself can only answer EIO, which the caller cannot tell from an
// injected one, so Unmount and PowerLoss report it.
func (f *FS) fail(err error) syscall.Errno {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	if f.err == nil {
		f.err = err
	}
	return syscall.EIO
}

func (f *FS) failure() error {
	f.errMu.Lock()
	defer f.errMu.Unlock()
	if f.err != nil {
		return fmt.Errorf("faultfs: the model failed while serving a call: %w", f.err)
	}
	return nil
}
