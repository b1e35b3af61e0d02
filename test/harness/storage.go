//go:build unix

package harness

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A node's storage, as the README's "The Raft log" describes it: segment
// files named by the index of their first entry under <data-dir>/raft-log/,
// each written full of zeros before use and then filled from offset 0 with
// records (a 4-byte little-endian payload length, a 4-byte CRC-32C of the
// payload, then the payload, which starts with the entry's index as an
// unsigned varint); Raft snapshots under <data-dir>/snapshots/<id>/, the
// state in state.bin. The helpers below find and damage these files from
// outside the process, for storage-fault tests.

const (
	// RaftLogDir is the directory of segment files inside a data directory.
	RaftLogDir = "raft-log"
	// SnapshotsDir is the directory of Raft snapshots inside a data directory.
	SnapshotsDir = "snapshots"
	// SectorSize is the unit a torn write is judged by: a record whose
	// unwritten part, from a sector boundary on, is still zero.
	SectorSize = 512

	// RecordHeaderSize is a record's header: payload length and CRC-32C.
	RecordHeaderSize = 8

	segmentSuffix = ".seg"
)

// Record is one record of a segment file.
type Record struct {
	// Offset is where the record's header starts; End is just past its payload.
	Offset, End int64
	// Index is the Raft index of the entry it holds.
	Index uint64
}

// Segment is one segment file and its records, read from outside the node.
type Segment struct {
	Path    string
	Size    int64
	Records []Record
}

// End is where the written records end: the rest of the file is zeros.
func (s Segment) End() int64 {
	if len(s.Records) == 0 {
		return 0
	}
	return s.Records[len(s.Records)-1].End
}

// RecordAt returns the record holding byte off.
func (s Segment) RecordAt(off int64) (Record, bool) {
	i, _ := slices.BinarySearchFunc(s.Records, off, func(r Record, off int64) int {
		switch {
		case r.End <= off:
			return -1
		case r.Offset > off:
			return 1
		}
		return 0
	})
	if i < len(s.Records) && s.Records[i].Offset <= off && off < s.Records[i].End {
		return s.Records[i], true
	}
	return Record{}, false
}

// Segments lists the segment files of dataDir, oldest first.
func Segments(dataDir string) ([]string, error) {
	dir := filepath.Join(dataDir, RaftLogDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var out []string
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), segmentSuffix)
		// Level marks (needs-cluster-level-N.seg) are not segments.
		if !e.IsDir() && ok && base != "" && strings.Trim(base, "0123456789") == "" {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	// Names are zero-padded indexes: lexical order is index order.
	slices.Sort(out)
	return out, nil
}

// ReadSegment reads a segment file's records from its start up to the
// first zero length (the unused rest of the file). A record that does not
// fit in the file ends the walk with an error.
func ReadSegment(path string) (Segment, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Segment{}, fmt.Errorf("read segment: %w", err)
	}
	s := Segment{Path: path, Size: int64(len(b))}
	for off := int64(0); off+RecordHeaderSize <= int64(len(b)); {
		n := int64(binary.LittleEndian.Uint32(b[off:]))
		if n == 0 {
			break
		}
		end := off + RecordHeaderSize + n
		if end > int64(len(b)) {
			return s, fmt.Errorf("segment %s: record at offset %d runs past the end of the file", path, off)
		}
		idx, k := binary.Uvarint(b[off+RecordHeaderSize : end])
		if k <= 0 {
			return s, fmt.Errorf("segment %s: record at offset %d has no index", path, off)
		}
		s.Records = append(s.Records, Record{Offset: off, End: end, Index: idx})
		off = end
	}
	return s, nil
}

// NewestSegment returns the newest segment file of dataDir that holds at
// least one record (the newest file may be empty just after a new one was
// started).
func NewestSegment(dataDir string) (Segment, error) {
	paths, err := Segments(dataDir)
	if err != nil {
		return Segment{}, err
	}
	for i := len(paths) - 1; i >= 0; i-- {
		s, err := ReadSegment(paths[i])
		if err != nil {
			return Segment{}, err
		}
		if len(s.Records) > 0 {
			return s, nil
		}
	}
	return Segment{}, fmt.Errorf("no segment with records in %s", filepath.Join(dataDir, RaftLogDir))
}

// snapshotName is a Raft snapshot directory: term-index-milliseconds.
var snapshotName = regexp.MustCompile(`^(\d+)-(\d+)-(\d+)$`)

// NewestSnapshot returns the directory of dataDir's newest Raft snapshot
// (highest term, then index, then time: the order Raft restores them in),
// or "" if there is none.
func NewestSnapshot(dataDir string) (string, error) {
	ents, err := os.ReadDir(filepath.Join(dataDir, SnapshotsDir))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("list snapshots: %w", err)
	}
	var best string
	var bestKey [3]uint64
	for _, e := range ents {
		m := snapshotName.FindStringSubmatch(e.Name())
		if !e.IsDir() || m == nil {
			continue
		}
		if _, err := os.Stat(filepath.Join(dataDir, SnapshotsDir, e.Name(), "meta.json")); err != nil {
			continue // being written, or not a snapshot
		}
		var key [3]uint64
		for i := range key {
			key[i], _ = strconv.ParseUint(m[i+1], 10, 64)
		}
		if best == "" || slices.Compare(key[:], bestKey[:]) > 0 {
			best, bestKey = e.Name(), key
		}
	}
	if best == "" {
		return "", nil
	}
	return filepath.Join(dataDir, SnapshotsDir, best), nil
}

// FlipByte inverts every bit of the byte at off in path and makes it durable.
func FlipByte(path string, off int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("flip byte: %w", err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return fmt.Errorf("flip byte at %d of %s: %w", off, path, err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		return fmt.Errorf("flip byte at %d of %s: %w", off, path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// WriteAt writes b at off in path (which must exist) and makes it durable.
func WriteAt(path string, off int64, b []byte) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("write into %s: %w", path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		return fmt.Errorf("write %d bytes at %d of %s: %w", len(b), off, path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// ZeroRange overwrites [from, to) of path with zeros and makes it durable.
func ZeroRange(path string, from, to int64) error {
	if to < from {
		return fmt.Errorf("zero %s: range [%d, %d) is reversed", path, from, to)
	}
	return WriteAt(path, from, make([]byte, to-from))
}

// FileSHA256 returns the hex SHA-256 of a file's bytes.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// TornAppendLog matches the warning a node logs when it cuts off a torn
// final append at start-up.
var TornAppendLog = regexp.MustCompile(`cutting off a torn (record|final append)`)

// ServeFailedLine is the line `holdfast serve` logs when it cannot start;
// its error names what failed.
var ServeFailedLine = regexp.MustCompile(`(?m)^.*holdfast serve failed.*$`)

// AwaitExit waits up to timeout for the process to exit on its own, for a
// node expected to refuse to start: its exit does not count as unexpected
// for the cluster's waits. It returns the exit code and the line in which
// the process said why it could not serve ("" if it logged none).
func (n *Node) AwaitExit(timeout time.Duration) (int, string, error) {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return -1, "", fmt.Errorf("%s was never started", n)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		return -1, "", fmt.Errorf("%s still running after %v", n, timeout)
	}
	n.mu.Lock()
	if n.done == done {
		n.expected = true
	}
	n.mu.Unlock()
	code, _ := n.Exit()
	return code, ServeFailedLine.FindString(n.LogSinceStart()), nil
}
