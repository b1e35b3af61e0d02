// Package raftlog is a Raft log store (raft.LogStore) that makes an append
// durable with one fdatasync: entries are appended to segment files as
// checksummed records, and a batch of entries is one write and one sync.
//
// Entries are stored in index order without gaps. Raft appends past a gap
// only after installing a snapshot that covers the entry before the gap, so
// the entries before it are dropped then. The store does not declare itself
// monotonic (raft.MonotonicLogStore): Raft v1.7.3 then deletes every entry
// after installing a snapshot but keeps its cached last index, which lets a
// follower holding entries past the snapshot accept appends past a hole.
// Deleting a prefix removes whole segment files; deleting a suffix
// truncates one. After a crash, a torn record at the end of the newest
// segment is cut off when the store is opened; a bad record anywhere else
// is corruption and the store refuses to open.
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
}

// segment is one file of consecutive entries starting at base.
type segment struct {
	base uint64
	path string
	f    *os.File
	offs []int64 // offs[i] is where the record of entry base+i starts
	size int64   // where the next record goes
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
	dir     string
	segSize int64
	warn    func(string, ...any)

	// spare receives the outcome of preparing the next segment file, which
	// runs in the background while the current one fills.
	spare    chan error
	stopPrep chan struct{}
	prepWG   sync.WaitGroup

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

// Open opens the store in dir, creating the directory if needed, and
// recovers the log from its segment files.
func Open(dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("raftlog: create %s: %w", dir, err)
	}
	s := &Store{dir: dir, segSize: opts.SegmentSize, warn: opts.Warn, spare: make(chan error, 1), stopPrep: make(chan struct{})}
	if s.segSize <= 0 {
		s.segSize = DefaultSegmentSize
	}
	if s.warn == nil {
		s.warn = func(string, ...any) {}
	}
	bases, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	for i, base := range bases {
		g, err := openSegment(dir, base, i == len(bases)-1, s.warn)
		if err != nil {
			s.closeFiles()
			return nil, err
		}
		if n := len(s.segs); n > 0 {
			prev := s.segs[n-1]
			if prev.base+prev.count() != base {
				_ = g.f.Close()
				s.closeFiles()
				return nil, fmt.Errorf("raftlog: segment %s starts at %d, the one before it ends at %d", g.path, base, prev.base+prev.count()-1)
			}
		}
		s.segs = append(s.segs, g)
	}
	s.setBounds()
	s.prepareSpare()
	return s, nil
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
		if !ok || e.IsDir() {
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

// openSegment opens a segment file and indexes its records. In the newest
// segment (tail) a bad record and everything after it is cut off.
func openSegment(dir string, base uint64, tail bool, warn func(string, ...any)) (*segment, error) {
	// Zeros after the last record are the unused rest of the file; anything
	// else there is a torn append, which is zeroed again.
	path := segmentPath(dir, base)
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open segment: %w", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("raftlog: read segment: %w", err)
	}
	g := &segment{base: base, path: path, f: f}
	off := int64(0)
	for off < int64(len(data)) {
		var l raft.Log
		n, ok := readRecord(data[off:], &l)
		if !ok || l.Index != base+g.count() {
			if allZero(data[off:]) {
				break // the unused, zero-filled rest of the segment
			}
			if !tail {
				_ = f.Close()
				return nil, fmt.Errorf("raftlog: segment %s: bad record at offset %d (entry %d)", path, off, base+g.count())
			}
			warn("raftlog: cutting off a torn record at the end of the log", "segment", path, "offset", off, "bytes", int64(len(data))-off)
			if err := zeroSync(f, off, int64(len(data))); err != nil {
				_ = f.Close()
				return nil, err
			}
			break
		}
		g.offs = append(g.offs, off)
		off += int64(n)
	}
	g.size = off
	return g, nil
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
// fdatasync.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
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
			return err
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
		return err
	}
	for i := range offs {
		offs[i] += g.size
	}
	if _, err := g.f.WriteAt(buf, g.size); err != nil {
		return fmt.Errorf("raftlog: append to %s: %w", g.path, err)
	}
	if err := fdatasync(g.f); err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", g.path, err)
	}
	s.mu.Lock()
	g.offs = append(g.offs, offs...)
	g.size += int64(len(buf))
	if s.first == 0 {
		s.first = next
	}
	s.last = next + uint64(len(logs)) - 1
	s.mu.Unlock()
	return nil
}

// activeSegment returns the segment an append of size bytes starting at
// entry next goes to, starting a new segment when there is none or the
// newest one is full. Called under wmu.
func (s *Store) activeSegment(next uint64, size int) (*segment, error) {
	var g *segment
	if n := len(s.segs); n > 0 {
		g = s.segs[n-1]
	}
	if g != nil && (g.count() > 0 || g.base == next) && (g.count() == 0 || g.size+int64(size) <= s.segSize) {
		return g, nil
	}
	if g != nil && g.count() == 0 {
		// An empty newest segment whose base does not fit: replace it.
		if err := s.removeSegments(len(s.segs)-1, len(s.segs)); err != nil {
			return nil, err
		}
	}
	g, err := s.newSegment(next)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.segs = append(s.segs, g)
	s.mu.Unlock()
	return g, nil
}

// newSegment makes the segment file for entries from base: the prepared
// zero-filled spare when it is ready, an empty file if preparing it failed.
func (s *Store) newSegment(base uint64) (*segment, error) {
	path := segmentPath(s.dir, base)
	if err := <-s.spare; err != nil {
		s.warn("raftlog: no zero-filled segment file; appending to an empty one", "error", err)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, fmt.Errorf("raftlog: create segment: %w", err)
		}
		_ = f.Close()
	} else if err := os.Rename(filepath.Join(s.dir, spareName), path); err != nil {
		return nil, fmt.Errorf("raftlog: create segment: %w", err)
	}
	s.prepareSpare()
	if err := syncDir(s.dir); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("raftlog: open segment: %w", err)
	}
	return &segment{base: base, path: path, f: f}, nil
}

// prepareSpare writes the next segment file, full of zeros, in the
// background; its outcome arrives on s.spare.
func (s *Store) prepareSpare() {
	s.prepWG.Add(1)
	go func() {
		defer s.prepWG.Done()
		s.spare <- s.writeSpare()
	}()
}

func (s *Store) writeSpare() error {
	path := filepath.Join(s.dir, spareName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer f.Close()
	zeros := make([]byte, min(s.segSize, 1<<20))
	for off := int64(0); off < s.segSize; off += int64(len(zeros)) {
		select {
		case <-s.stopPrep:
			return errors.New("store closed")
		default:
		}
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), s.segSize-off)], off); err != nil {
			return fmt.Errorf("fill %s: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}

// DeleteRange deletes entries min through max, inclusive. Raft deletes only
// a prefix (after a snapshot), a suffix (a follower's conflicting entries)
// or everything; a range in the middle is refused. The bounds move before
// any file goes, so a concurrent read never picks a file being removed.
func (s *Store) DeleteRange(min, max uint64) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.RLock()
	first, last := s.first, s.last
	s.mu.RUnlock()
	if first == 0 || max < first || min > last || min > max {
		return nil
	}
	switch {
	case min <= first && max >= last:
		s.setRange(0, 0)
		return s.removeSegments(0, len(s.segs))
	case min <= first:
		return s.deletePrefix(max)
	case max >= last:
		return s.deleteSuffix(min)
	default:
		return fmt.Errorf("raftlog: deleting entries %d-%d from the middle of the log %d-%d is not supported", min, max, first, last)
	}
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
	for j := len(s.segs) - 1; j > i; j-- {
		if err := s.removeSegments(j, j+1); err != nil {
			return err
		}
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
// none of their entries is within the bounds any more. The oldest file goes
// first when a prefix is deleted, the newest first otherwise, so a crash
// part way leaves contiguous entries that are either kept or covered by a
// snapshot. Called under wmu.
func (s *Store) removeSegments(from, to int) error {
	if from >= to {
		return nil
	}
	gone := slices.Clone(s.segs[from:to])
	order := slices.Clone(gone)
	if from > 0 || to == len(s.segs) {
		slices.Reverse(order)
	}
	for _, g := range order {
		if err := os.Remove(g.path); err != nil {
			return fmt.Errorf("raftlog: remove segment: %w", err)
		}
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	s.mu.Lock()
	s.segs = slices.Delete(s.segs, from, to)
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
	select {
	case <-s.stopPrep:
	default:
		close(s.stopPrep)
	}
	s.prepWG.Wait()
	return s.closeFiles()
}

func (s *Store) closeFiles() error {
	var errs []error
	for _, g := range s.segs {
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
func zeroSync(f *os.File, from, to int64) error {
	zeros := make([]byte, min(to-from, 1<<20))
	for off := from; off < to; off += int64(len(zeros)) {
		if _, err := f.WriteAt(zeros[:min(int64(len(zeros)), to-off)], off); err != nil {
			return fmt.Errorf("raftlog: zero %s: %w", f.Name(), err)
		}
	}
	if err := fdatasync(f); err != nil {
		return fmt.Errorf("raftlog: sync %s: %w", f.Name(), err)
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

// syncDir makes the creation or removal of files in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("raftlog: open dir %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("raftlog: sync dir %s: %w", dir, err)
	}
	return nil
}
