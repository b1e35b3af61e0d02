package cluster

import (
	"fmt"
	"math"
	"time"

	"golang.org/x/sys/unix"
)

// diskCheck is how often a node reads its data directory's free space.
const diskCheck = 2 * time.Second

// statfsFree is the free bytes of the file system holding path that an
// unprivileged writer may use; plenty where it tells no sizes.
func statfsFree(path string) (uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Blocks == 0 {
		return math.MaxUint64, nil // a file system that tells no sizes (some FUSE ones)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// readDiskFree records the data directory's free space; one it cannot
// read counts as plenty (the floor is a guard, and a failing disk shows
// in the storage faults), and is logged once until it reads again.
func (n *Node) readDiskFree() {
	free, err := n.cfg.DiskFree(n.cfg.DataDir)
	if err != nil {
		if !n.diskUnread.Swap(true) {
			n.log.Warn("cannot read the data directory's free space; the free-space floor is not applied", "error", err)
		}
		n.diskFree.Store(math.MaxUint64)
		return
	}
	n.diskUnread.Store(false)
	n.diskFree.Store(free)
}

// diskLoop reads the data directory's free space every diskCheck.
func (n *Node) diskLoop() { n.every(diskCheck, n.readDiskFree) }

// DiskLow reports the data directory's free space as last read, the
// floor (MinFreeDiskBytes), and whether the space is below it.
func (n *Node) DiskLow() (free, floor uint64, low bool) {
	if n.cfg.MinFreeDiskBytes < 0 {
		return n.diskFree.Load(), 0, false
	}
	free, floor = n.diskFree.Load(), uint64(n.cfg.MinFreeDiskBytes)
	return free, floor, free < floor
}
