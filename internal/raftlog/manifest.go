package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Manifest keeps the list of the log's segment files outside the log
// directory, in a store whose writes are durable when they return (the
// node's raft.db). With it, a deleted, truncated or emptied segment is
// noticed at open instead of leaving the node with less log than it
// acknowledged.
type Manifest interface {
	// Load returns what Save stored last, or nil when nothing was.
	Load() ([]byte, error)
	// Save stores b durably.
	Save(b []byte) error
}

// manifestVersion is the first byte of an encoded segment list.
const manifestVersion = 1

// segRecord is a segment as the manifest lists it: its first index and the
// size its file had when it was recorded, which the file never goes below.
type segRecord struct {
	base uint64
	size int64
}

func encodeManifest(recs []segRecord) []byte {
	b := []byte{manifestVersion}
	b = binary.AppendUvarint(b, uint64(len(recs)))
	for _, r := range recs {
		b = binary.AppendUvarint(b, r.base)
		b = binary.AppendUvarint(b, uint64(r.size))
	}
	return b
}

var errManifest = errors.New("raftlog: unreadable segment list in the manifest")

func decodeManifest(b []byte) ([]segRecord, error) {
	if len(b) == 0 || b[0] != manifestVersion {
		return nil, errManifest
	}
	b = b[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	count, ok := next()
	if !ok || count > uint64(len(b)) {
		return nil, errManifest
	}
	recs := make([]segRecord, 0, count)
	for range count {
		base, ok1 := next()
		size, ok2 := next()
		if !ok1 || !ok2 {
			return nil, errManifest
		}
		recs = append(recs, segRecord{base: base, size: int64(size)})
	}
	if len(b) != 0 {
		return nil, errManifest
	}
	return recs, nil
}

// checkManifest compares the segments found on disk with the recorded
// ones: every recorded segment must be there, no smaller than it was, and
// hold at least one entry unless it is the newest (its first append may
// have been torn). Segments that are not recorded may only be older than
// every recorded one (a compaction that stopped part way) or newer (the
// newest, made just before a crash, what a truncation of the log's end
// had not yet removed, or what a build that keeps no list appended).
//
// The one loss it lets through is of the log's front: recorded segments
// missing before the oldest segment found, as long as a segment past them
// is there. A build that keeps no list (one an upgrade was rolled back to)
// compacts them away after its snapshots; whoever removed them, the log
// still ends where it did, and the node's start-up refuses unless a
// snapshot covers what is gone. It returns the bases of those segments.
func checkManifest(dir string, recs []segRecord, segs []*segment) ([]uint64, error) {
	byBase := make(map[uint64]*segment, len(segs))
	for _, g := range segs {
		byBase[g.base] = g
	}
	var gone []uint64
	for len(gone) < len(recs) && byBase[recs[len(gone)].base] == nil {
		gone = append(gone, recs[len(gone)].base)
	}
	if len(gone) > 0 && (len(segs) == 0 || segs[0].base < gone[len(gone)-1]) {
		gone = nil // nothing past them (the log's end is missing), or a gap in the middle
	}
	for i, r := range recs[len(gone):] {
		g, ok := byBase[r.base]
		if !ok {
			return nil, fmt.Errorf("%w: segment %s (entries from %d) is recorded in the manifest but missing; the log would end before what this node acknowledged",
				ErrCorrupt, segmentPath(dir, r.base), r.base)
		}
		if g.fileSize < r.size {
			return nil, fmt.Errorf("%w: segment %s is %d bytes, %d when it was recorded: it was truncated",
				ErrCorrupt, g.path, g.fileSize, r.size)
		}
		if g.count() == 0 && len(gone)+i < len(recs)-1 {
			return nil, fmt.Errorf("%w: segment %s (entries from %d) holds no entry, but later segments are recorded",
				ErrCorrupt, g.path, r.base)
		}
	}
	if len(recs) == len(gone) {
		return gone, nil
	}
	lo, hi := recs[len(gone)].base, recs[len(recs)-1].base
	for _, g := range segs {
		if g.base > lo && g.base < hi && !slices.ContainsFunc(recs, func(r segRecord) bool { return r.base == g.base }) {
			return nil, fmt.Errorf("%w: segment %s is not in the manifest", ErrCorrupt, g.path)
		}
	}
	return gone, nil
}
