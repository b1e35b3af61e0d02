package raftlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/atomicfile"
)

const (
	// headerSize is a record's header: payload length and CRC-32C of the payload.
	headerSize = 8
	// maxRecord bounds a record's payload; a longer length is a torn or corrupt header.
	maxRecord = 1 << 30
	// DefaultSegmentSize is the size of a segment file: each is written
	// full of zeros before use, so an append overwrites allocated blocks and
	// its fdatasync flushes data, not file metadata.
	DefaultSegmentSize = 16 << 20
	segmentSuffix      = ".seg"
	// spareName is the zero-filled file the next segment is made from.
	spareName = "next-segment.tmp"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrNotContiguous is returned when entries would leave a gap in the log or
// are not in index order.
var ErrNotContiguous = errors.New("raftlog: entries are not contiguous with the log")

// Options configure a Store.
type Options struct {
	// SegmentSize is the size past which the next append starts a new
	// segment file (DefaultSegmentSize when zero).
	SegmentSize int64
	// Warn, when set, is told about a torn record cut off at open.
	Warn func(msg string, args ...any)
	// Manifest, when set, keeps the list of segments outside the log
	// directory, so that a lost or truncated segment is noticed at open.
	Manifest Manifest
	// Health, when set, is told each time the store's ability to write
	// changes: an error when an append, a deletion or the preparation of
	// the next segment failed (wrapping ErrNoSpace, ErrStorage or
	// ErrPoisoned), nil once it writes again, and an error wrapping
	// ErrStalled while a write has been in progress for longer than
	// StallAfter. It is called without the store's locks held and must not
	// call the store.
	Health func(err error)
	// StallAfter, when positive, is how long an append or a deletion
	// (with its fdatasync) may run before the store reports it stalled
	// through Health; the report ends when the write returns.
	StallAfter time.Duration

	fs        fileSystem    // the file system; tests substitute one that fails
	fillPause time.Duration // the rest between two chunks of a spare (fillPause when zero); tests lengthen it
}

// segment is one file of consecutive entries starting at base.
type segment struct {
	base     uint64
	path     string
	f        segFile
	offs     []int64 // offs[i] is where the record of entry base+i starts
	size     int64   // where the next record goes
	fileSize int64   // the file's size when it was opened or made
	recorded bool    // listed in the manifest
}

// count is the number of entries the segment holds.
func (g *segment) count() uint64 { return uint64(len(g.offs)) }

// end is the offset just past entry i's record.
func (g *segment) end(i int) int64 {
	if i+1 < len(g.offs) {
		return g.offs[i+1]
	}
	return g.size
}

// Store is a Raft log store in a directory of segment files. It is safe for
// concurrent use; appends and deletions are serialized, reads run beside them.
type Store struct {
	dir      string
	segSize  int64
	warn     func(string, ...any)
	fs       fileSystem
	manifest Manifest

	spare  spare
	health health

	wmu sync.Mutex // serializes StoreLogs and DeleteRange; held across their I/O
	buf []byte     // encoding buffer, used under wmu

	mu    sync.RWMutex // guards segs, first and last; never held across I/O
	segs  []*segment
	first uint64
	last  uint64
}

var (
	_ raft.LogStore = (*Store)(nil)
)

// Open opens the store in dir, creating the directory if needed (with the
// directory above it synced, so a power loss cannot take it away with the
// segments in it), and recovers the log from its segment files. A torn
// final append is cut off; any other damage (see ErrCorrupt) makes Open
// fail without changing a byte.
func Open(dir string, opts Options) (*Store, error) {
	if err := atomicfile.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftlog: create %s: %w", dir, err)
	}
	s := &Store{dir: dir, segSize: opts.SegmentSize, warn: opts.Warn, fs: opts.fs, manifest: opts.Manifest}
	if s.segSize <= 0 {
		s.segSize = DefaultSegmentSize
	}
	if s.warn == nil {
		s.warn = func(string, ...any) {}
	}
	if s.fs == nil {
		s.fs = osFS{}
	}
	s.health.notify = opts.Health
	s.health.stallAfter, s.health.dir = opts.StallAfter, dir
	s.spare.init(s, opts.fillPause)
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, err
	}
	s.setBounds()
	s.spare.start()
	return s, nil
}

// recover reads the segment files, checks them against the manifest and
// cuts off a torn final append.
func (s *Store) recover() error {
	bases, err := listSegments(s.dir)
	if err != nil {
		return err
	}
	type tornTail struct {
		g    *segment
		data []byte
		off  int64
	}
	var torn *tornTail
	for i, base := range bases {
		path := segmentPath(s.dir, base)
		data, err := readSegment(path)
		if err != nil {
			return err
		}
		offs, end, isTorn, err := scanSegment(path, base, data, i == len(bases)-1)
		if err != nil {
			return err
		}
		g := &segment{base: base, path: path, offs: offs, size: end, fileSize: int64(len(data))}
		if n := len(s.segs); n > 0 {
			prev := s.segs[n-1]
			if prev.base+prev.count() != base {
				return fmt.Errorf("%w: segment %s starts at %d, the one before it ends at %d", ErrCorrupt, path, base, prev.base+prev.count()-1)
			}
		}
		if g.f, err = s.fs.OpenFile(path, os.O_RDWR); err != nil {
			return fmt.Errorf("raftlog: open segment: %w", err)
		}
		s.segs = append(s.segs, g)
		if isTorn {
			torn = &tornTail{g: g, data: data, off: end}
		}
	}
	if err := s.checkRecorded(); err != nil {
		return err
	}
	if torn != nil {
		s.warn("raftlog: cutting off a torn final append (an append whose fdatasync never returned, so nothing in it was acknowledged)",
			"segment", torn.g.path, "offset", torn.off, "bytes", zeroTail(torn.data)-torn.off)
		if err := zeroTorn(torn.g.f, torn.data, torn.off); err != nil {
			return err
		}
	}
	return nil
}

// checkRecorded checks the segments against the manifest, or records them
// there when it holds no list yet (a log made before the manifest).
func (s *Store) checkRecorded() error {
	if s.manifest == nil {
		return nil
	}
	b, err := s.manifest.Load()
	if err != nil {
		return fmt.Errorf("raftlog: load the segment list: %w", err)
	}
	if b == nil {
		for _, g := range s.segs {
			g.recorded = g.count() > 0
		}
		return s.saveManifest(s.segs)
	}
	recs, err := decodeManifest(b)
	if err != nil {
		return err
	}
	gone, err := checkManifest(s.dir, recs, s.segs)
	if err != nil {
		return err
	}
	for _, g := range s.segs {
		g.recorded = slices.ContainsFunc(recs, func(r segRecord) bool { return r.base == g.base })
	}
	if len(gone) == 0 {
		return nil
	}
	first := uint64(0)
	if len(s.segs) > 0 {
		first = s.segs[0].base
	}
	s.warn("raftlog: segments at the front of the log are gone (compacted by a build that keeps no segment list, or removed); the log now starts later and a snapshot must cover what is gone",
		"recorded_from", gone[0], "starts_at", first)
	return s.saveManifest(s.segs)
}

// saveManifest records the recorded segments among segs.
func (s *Store) saveManifest(segs []*segment) error {
	if s.manifest == nil {
		return nil
	}
	var recs []segRecord
	for _, g := range segs {
		if g.recorded {
			recs = append(recs, segRecord{base: g.base, size: g.fileSize})
		}
	}
	if err := s.manifest.Save(encodeManifest(recs)); err != nil {
		return fmt.Errorf("raftlog: record the segment list: %w", err)
	}
	return nil
}

// listSegments returns the base indexes of the segment files in dir, in order.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("raftlog: list %s: %w", dir, err)
	}
	var bases []uint64
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), segmentSuffix)
		if _, mark := parseLevelMark(e.Name()); !ok || mark || e.IsDir() {
			continue
		}
		base, err := strconv.ParseUint(name, 10, 64)
		if err != nil || base == 0 {
			return nil, fmt.Errorf("raftlog: unexpected file %s in %s", e.Name(), dir)
		}
		bases = append(bases, base)
	}
	slices.Sort(bases)
	return bases, nil
}

func segmentPath(dir string, base uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%020d%s", base, segmentSuffix))
}

// readRecord checks the record at the start of b (its length and checksum)
// and decodes its payload into l. It returns the record's size.
func readRecord(b []byte, l *raft.Log) (size int, ok bool) {
	if len(b) < headerSize {
		return 0, false
	}
	n := binary.LittleEndian.Uint32(b)
	if n == 0 || n > maxRecord || int64(n) > int64(len(b)-headerSize) {
		return 0, false
	}
	payload := b[headerSize : headerSize+int(n)]
	if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(b[4:]) {
		return 0, false
	}
	if decodePayload(payload, l) != nil {
		return 0, false
	}
	return headerSize + int(n), true
}

// setBounds computes first and last from the segments, before the store
// is shared.
func (s *Store) setBounds() {
	s.first, s.last = 0, 0
	for _, g := range s.segs {
		if g.count() == 0 {
			continue
		}
		if s.first == 0 {
			s.first = g.base
		}
		s.last = g.base + g.count() - 1
	}
}

// FirstIndex returns the first index written, 0 for an empty log.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.first, nil
}

// LastIndex returns the last index written, 0 for an empty log.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.last, nil
}

// GetLog reads the entry at index into log.
func (s *Store) GetLog(index uint64, log *raft.Log) error {
	s.mu.RLock()
	if s.first == 0 || index < s.first || index > s.last {
		s.mu.RUnlock()
		return raft.ErrLogNotFound
	}
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > index }) - 1
	g := s.segs[i]
	k := int(index - g.base)
	f, off, end := g.f, g.offs[k], g.end(k)
	s.mu.RUnlock()

	b := make([]byte, end-off)
	if _, err := f.ReadAt(b, off); err != nil {
		if s.deleted(index) {
			return raft.ErrLogNotFound
		}
		return fmt.Errorf("raftlog: read entry %d: %w", index, err)
	}
	if n, ok := readRecord(b, log); !ok || n != len(b) || log.Index != index {
		if s.deleted(index) {
			return raft.ErrLogNotFound
		}
		return fmt.Errorf("raftlog: entry %d: bad record in %s at offset %d", index, g.path, off)
	}
	return nil
}

// deleted reports whether index left the log while it was being read.
func (s *Store) deleted(index uint64) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.first == 0 || index < s.first || index > s.last
}

// StoreLog appends one entry.
func (s *Store) StoreLog(log *raft.Log) error {
	return s.StoreLogs([]*raft.Log{log})
}

// StoreLogs appends entries in index order, contiguous with the log or
// past a gap (which drops every entry held), with one write and one
// fdatasync. A failed write is undone before the error returns, so the
// entries are definitely not in the log; a failed fdatasync poisons the
// store (see ErrPoisoned).
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.health.begin()
	defer s.health.end()
	if err := s.health.isPoisoned(); err != nil {
		return err
	}
	s.mu.RLock()
	last := s.last
	s.mu.RUnlock()
	next := logs[0].Index
	if next == 0 || (last != 0 && next <= last) {
		return fmt.Errorf("%w: appending %d after %d", ErrNotContiguous, next, last)
	}
	if last != 0 && next > last+1 {
		// Past a gap: Raft installed a snapshot covering entry next-1, and
		// with it every entry held here.
		s.setRange(0, 0)
		if err := s.removeSegments(0, len(s.segs)); err != nil {
			return s.health.poison(err)
		}
	}
	buf := s.buf[:0]
	offs := make([]int64, 0, len(logs))
	for i, l := range logs {
		if l.Index != next+uint64(i) {
			return fmt.Errorf("%w: entry %d follows %d in one append", ErrNotContiguous, l.Index, next+uint64(i)-1)
		}
		offs = append(offs, int64(len(buf)))
		buf = appendRecord(buf, l)
	}
	s.buf = buf
	g, err := s.activeSegment(next, len(buf))
	if err != nil {
		s.health.setWrite(err)
		if errors.Is(err, ErrNoSpace) {
			s.watchSpace()
		}
		return err
	}
	for i := range offs {
		offs[i] += g.size
	}
	if _, err := g.f.WriteAt(buf, g.size); err != nil {
		return s.undoWrite(g, len(buf), err)
	}
	if plantedAckBeforeSync {
		syncLater(g.f)
	} else if err := g.f.Datasync(); err != nil {
		return s.health.poison(fmt.Errorf("raftlog: sync %s: %w", g.path, classify(err)))
	}
	s.mu.Lock()
	g.offs = append(g.offs, offs...)
	g.size += int64(len(buf))
	if s.first == 0 {
		s.first = next
	}
	s.last = next + uint64(len(logs)) - 1
	s.mu.Unlock()
	s.health.setWrite(nil)
	return nil
}

// undoWrite clears what a failed append of n bytes to g may have left, so
// the entries are definitely not in the log, and returns the write's error.
// If that fails too, the store is poisoned.
func (s *Store) undoWrite(g *segment, n int, werr error) error {
	werr = fmt.Errorf("raftlog: append to %s: %w", g.path, classify(werr))
	var err error
	if g.size+int64(n) > g.fileSize {
		// The write may have grown the file: shrink it back.
		err = g.f.Truncate(max(g.size, g.fileSize))
		if err == nil && g.size < g.fileSize {
			err = zeroSync(g.f, g.size, g.fileSize)
		} else if err == nil {
			err = g.f.Datasync()
		}
	} else {
		err = zeroSync(g.f, g.size, g.size+int64(n))
	}
	if err != nil {
		return s.health.poison(fmt.Errorf("%w; undoing it failed: %w", werr, err))
	}
	s.health.setWrite(werr)
	if errors.Is(werr, ErrNoSpace) {
		s.watchSpace()
	}
	return werr
}

// activeSegment returns the segment an append of size bytes starting at
// entry next goes to, starting a new segment when there is none or the
// newest one is full, and records it in the manifest before anything is
// written to it. Called under wmu.
func (s *Store) activeSegment(next uint64, size int) (*segment, error) {
	var g *segment
	if n := len(s.segs); n > 0 {
		g = s.segs[n-1]
	}
	if g == nil || !((g.count() > 0 || g.base == next) && (g.count() == 0 || g.size+int64(size) <= s.segSize)) {
		if g != nil && g.count() == 0 {
			// An empty newest segment whose base does not fit: replace it.
			if err := s.removeSegments(len(s.segs)-1, len(s.segs)); err != nil {
				return nil, err
			}
		}
		// The next spare is prepared once this roll's own syncs (of the
		// directory, in newSegment, and of the manifest, below) are done,
		// so that its writing never holds them up.
		defer s.spare.start()
		var err error
		if g, err = s.newSegment(next); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.segs = append(s.segs, g)
		s.mu.Unlock()
	}
	if !g.recorded && s.manifest != nil {
		g.recorded = true
		if err := s.saveManifest(s.segs); err != nil {
			g.recorded = false
			return nil, fmt.Errorf("%w: %w", ErrStorage, err)
		}
	}
	return g, nil
}

// newSegment makes the segment file for entries from base: the prepared
// zero-filled spare when it is ready, an empty file that grows with each
// append otherwise.
func (s *Store) newSegment(base uint64) (*segment, error) {
	path := segmentPath(s.dir, base)
	took, err := s.spare.take(path)
	if err != nil {
		return nil, err
	}
	if !took {
		s.warn("raftlog: no zero-filled segment file is ready; appending to an empty one", "segment", path)
		f, err := s.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			return nil, fmt.Errorf("raftlog: create segment: %w", classify(err))
		}
		_ = f.Close()
	}
	if !plantedUnsyncedRename {
		if err := s.fs.SyncDir(s.dir); err != nil {
			return nil, s.health.poison(fmt.Errorf("raftlog: sync dir %s: %w", s.dir, classify(err)))
		}
	}
	f, err := s.fs.OpenFile(path, os.O_RDWR)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open segment: %w", classify(err))
	}
	size, err := f.Size()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("raftlog: open segment: %w", classify(err))
	}
	return &segment{base: base, path: path, f: f, fileSize: size}, nil
}

// DeleteRange deletes entries min through max, inclusive. Raft deletes only
// a prefix (after a snapshot), a suffix (a follower's conflicting entries)
// or everything; a range in the middle is refused. The bounds move before
// any file goes, so a concurrent read never picks a file being removed.
// A failure while deleting a suffix poisons the store: the entries it
// keeps on disk would come back at the next start.
func (s *Store) DeleteRange(min, max uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.health.begin()
	defer s.health.end()
	if err := s.health.isPoisoned(); err != nil {
		return err
	}
	s.mu.RLock()
	first, last := s.first, s.last
	s.mu.RUnlock()
	if first == 0 || max < first || min > last || min > max {
		return nil
	}
	var err error
	switch {
	case min <= first && max >= last:
		s.setRange(0, 0)
		err = s.removeSegments(0, len(s.segs))
	case min <= first:
		return s.deletePrefix(max)
	case max >= last:
		err = s.deleteSuffix(min)
	default:
		return fmt.Errorf("raftlog: deleting entries %d-%d from the middle of the log %d-%d is not supported", min, max, first, last)
	}
	if err != nil && !errors.Is(err, ErrPoisoned) {
		err = s.health.poison(err)
	}
	return err
}

// setRange sets the first and last index.
func (s *Store) setRange(first, last uint64) {
	s.mu.Lock()
	s.first, s.last = first, last
	s.mu.Unlock()
}

// deletePrefix deletes entries up to max, which is below the last index:
// the first index moves past max, and the segments holding only deleted
// entries are removed. Entries of a partly deleted segment stay on disk,
// unreadable, until the whole segment goes.
func (s *Store) deletePrefix(max uint64) error {
	s.mu.Lock()
	s.first = max + 1
	s.mu.Unlock()
	n := 0
	for n < len(s.segs)-1 && s.segs[n+1].base <= max+1 {
		n++
	}
	return s.removeSegments(0, n)
}

// deleteSuffix deletes entries from min on, min above the first index:
// later segments are removed (the newest first, so a crash leaves a
// contiguous log), then the records from min on in the segment holding it
// are overwritten with zeros, which keeps the file's blocks allocated.
func (s *Store) deleteSuffix(min uint64) error {
	s.mu.Lock()
	s.last = min - 1
	s.mu.Unlock()
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].base > min }) - 1
	if err := s.removeSegments(i+1, len(s.segs)); err != nil {
		return err
	}
	g := s.segs[i]
	k := int(min - g.base)
	off := g.offs[k]
	if err := zeroSync(g.f, off, g.size); err != nil {
		return err
	}
	s.mu.Lock()
	g.offs = g.offs[:k]
	g.size = off
	s.mu.Unlock()
	return nil
}

// removeSegments deletes the files of segments [from, to) and drops them;
// none of their entries is within the bounds any more. The manifest stops
// listing them first. The oldest file goes first when a prefix is deleted,
// the newest first otherwise, so a crash part way leaves contiguous entries
// that are either kept or covered by a snapshot. Called under wmu.
func (s *Store) removeSegments(from, to int) error {
	if from >= to {
		return nil
	}
	gone := slices.Clone(s.segs[from:to])
	kept := slices.Concat(s.segs[:from], s.segs[to:])
	if slices.ContainsFunc(gone, func(g *segment) bool { return g.recorded }) {
		if err := s.saveManifest(kept); err != nil {
			return err
		}
	}
	order := slices.Clone(gone)
	if from > 0 || to == len(s.segs) {
		slices.Reverse(order)
	}
	for _, g := range order {
		if err := s.fs.Remove(g.path); err != nil {
			return fmt.Errorf("raftlog: remove segment: %w", classify(err))
		}
	}
	if err := s.fs.SyncDir(s.dir); err != nil {
		return fmt.Errorf("raftlog: sync dir %s: %w", s.dir, classify(err))
	}
	s.mu.Lock()
	s.segs = kept
	s.mu.Unlock()
	// A reader that picked one of these files before the bounds moved gets
	// an error from it and finds its entry gone.
	for _, g := range gone {
		_ = g.f.Close()
	}
	return nil
}

// Close closes the segment files.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.health.stopTimer()
	s.spare.close()
	return s.closeFiles()
}

func (s *Store) closeFiles() error {
	var errs []error
	for _, g := range s.segs {
		if g.f == nil {
			continue
		}
		if err := g.f.Close(); err != nil {
			errs = append(errs, fmt.Errorf("raftlog: close %s: %w", g.path, err))
		}
	}
	return errors.Join(errs...)
}

// appendRecord appends l's record: header, then the payload (index, term,
// type, append time, data, extensions).
func appendRecord(b []byte, l *raft.Log) []byte {
	start := len(b)
	b = append(b, make([]byte, headerSize)...)
	b = binary.AppendUvarint(b, l.Index)
	b = binary.AppendUvarint(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Extensions...)
	payload := b[start+headerSize:]
	binary.LittleEndian.PutUint32(b[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[start+4:], crc32.Checksum(payload, castagnoli))
	return b
}

var errPayload = errors.New("malformed entry")

// decodePayload decodes a record's payload into l; Data and Extensions are
// copies, never views of p.
func decodePayload(p []byte, l *raft.Log) error {
	var (
		v   uint64
		n   int
		ok  = true
		get = func() uint64 {
			v, n = binary.Uvarint(p)
			if n <= 0 {
				ok = false
				return 0
			}
			p = p[n:]
			return v
		}
	)
	l.Index = get()
	l.Term = get()
	if !ok || len(p) < 1 {
		return errPayload
	}
	l.Type = raft.LogType(p[0])
	p = p[1:]
	at, n := binary.Varint(p)
	if n <= 0 {
		return errPayload
	}
	p = p[n:]
	l.AppendedAt = time.Time{}
	if at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	bytesField := func() []byte {
		size := get()
		if !ok || size > uint64(len(p)) {
			ok = false
			return nil
		}
		var out []byte
		if size > 0 {
			out = slices.Clone(p[:size])
		}
		p = p[size:]
		return out
	}
	l.Data = bytesField()
	l.Extensions = bytesField()
	if !ok || len(p) != 0 || l.Index == 0 {
		return errPayload
	}
	return nil
}

// zeroSync overwrites f from from to to with zeros and makes it durable.
func zeroSync(f segFile, from, to int64) error {
	zeros := make([]byte, min(to-from, 1<<20))
	for off := from; off < to; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), to-off)], off); err != nil {
			return fmt.Errorf("raftlog: zero %s: %w", f.Name(), classify(err))
		}
	}
	if err := f.Datasync(); err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", f.Name(), classify(err))
	}
	return nil
}

// allZero reports whether b holds only zero bytes.
func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
