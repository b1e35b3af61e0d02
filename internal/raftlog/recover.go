package raftlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/bits"
	"os"

	"github.com/hashicorp/raft"
)

// sectorSize is the unit a disk writes whole or not at all. A crash in the
// middle of an append leaves each sector of it either written or as it was
// before: zero, since segments are zero-filled before use.
const sectorSize = 512

// scanSegment indexes the records of a segment file's bytes. A bad record
// ends the scan: in the newest segment (tail) it may be a torn final append,
// which is reported with torn set; anywhere else, or when its damage is not
// what an unfinished write leaves, it is corruption.
func scanSegment(path string, base uint64, data []byte, tail bool) (offs []int64, end int64, torn bool, err error) {
	off := int64(0)
	for off < int64(len(data)) {
		var l raft.Log
		n, ok := readRecord(data[off:], &l)
		want := base + uint64(len(offs))
		if ok && l.Index == want {
			offs = append(offs, off)
			off += int64(n)
			continue
		}
		if allZero(data[off:]) {
			break // the unused, zero-filled rest of the segment
		}
		var why string
		switch {
		case ok:
			why = fmt.Sprintf("it is a valid record of entry %d", l.Index)
		case !tail:
			why = "its length or checksum is bad, and only the newest segment can end in an unfinished write"
		default:
			why = tornVerdict(data, off)
		}
		if why == "" {
			return offs, off, true, nil
		}
		return nil, 0, false, corruptRecord(path, base, want, off, why)
	}
	return offs, off, false, nil
}

// corruptRecord describes a bad record that no crash explains.
func corruptRecord(path string, base, want uint64, off int64, why string) error {
	held := "no entry before it"
	if want > base {
		held = fmt.Sprintf("entries %d-%d before it", base, want-1)
	}
	return fmt.Errorf("%w: segment %s: bad record at offset %d, where entry %d belongs (the segment holds %s): %s; this is not a torn final append, the file is left as it is",
		ErrCorrupt, path, off, want, held, why)
}

// tornVerdict decides whether the bad record at off, in the newest
// segment, is an append that never completed: a prefix of it written up to
// a sector boundary and zeros from there to the end of the file (bytes past
// the file's end count as zeros: an append that grew the file may not have
// reached its new size). It returns "" for a torn append, otherwise why the
// damage is something else. An append the store acknowledged was synced, so
// its records are whole; a record whose checksum fails for another reason
// was damaged after it was written, and may have been acknowledged.
func tornVerdict(data []byte, off int64) string {
	size := int64(len(data))
	at := func(i int64) byte {
		if i < size {
			return data[i]
		}
		return 0
	}
	var hdr [headerSize]byte
	for i := range hdr {
		hdr[i] = at(off + int64(i))
	}
	n := int64(binary.LittleEndian.Uint32(hdr[:]))
	sum := binary.LittleEndian.Uint32(hdr[4:])
	switch {
	case n == 0:
		return "its length is zero but bytes follow it"
	case n > maxRecord:
		return fmt.Sprintf("its length %d is beyond any record", n)
	}
	end := off + headerSize + n
	if end > size+maxPastEnd {
		return fmt.Sprintf("its length %d runs more than %d bytes past the end of the file", n, maxPastEnd)
	}
	zeros := zeroTail(data)
	from := (zeros + sectorSize - 1) / sectorSize * sectorSize
	if from >= end {
		return fmt.Sprintf("it is written to its end (offset %d) and does not end in zeros from a sector boundary", end)
	}
	payload := make([]byte, 0, min(n, max(size-off-headerSize, 0)))
	if off+headerSize < size {
		payload = append(payload, data[off+headerSize:min(end, size)]...)
	}
	// checksum is the CRC-32C of the payload's first k bytes, zeros past the file.
	checksum := func(k int64) uint32 {
		c := crc32.Checksum(payload[:min(k, int64(len(payload)))], castagnoli)
		if pad := k - int64(len(payload)); pad > 0 {
			c = crcZeros(c, pad)
		}
		return c
	}
	m, extLen, parsed := naturalLength(payload, n)
	if parsed && m < n && checksum(m) == sum {
		return fmt.Sprintf("it is a whole record of %d bytes with a good checksum whose length field says %d", m, n)
	}
	if parsed && m == n && extLen == 0 && end-from == 1 {
		return "only its last byte is zero, which a record without extensions always has"
	}
	syndrome := checksum(n) ^ sum
	if bits.OnesCount32(syndrome) == 1 {
		return "one bit of its checksum differs"
	}
	if singleBitError(n, syndrome) {
		return "one flipped bit explains its checksum"
	}
	return ""
}

// maxPastEnd bounds how far past the end of a segment file a torn record
// may reach: only an append that grew the file (a segment made when no
// zero-filled one was ready) can reach past it, by at most one record.
const maxPastEnd = 1 << 20

// zeroTail is where the zeros at the end of data begin.
func zeroTail(data []byte) int64 {
	i := len(data)
	for i > 0 && data[i-1] == 0 {
		i--
	}
	return int64(i)
}

// crcZeros extends a CRC-32C by n zero bytes.
func crcZeros(sum uint32, n int64) uint32 {
	var zeros [4096]byte
	for n > 0 {
		k := min(n, int64(len(zeros)))
		sum = crc32.Update(sum, castagnoli, zeros[:k])
		n -= k
	}
	return sum
}

// singleBitError reports whether flipping one bit of an n-byte payload
// changes its CRC-32C by syndrome. CRCs of equal-length messages differ by
// the CRC, without its initial and final inversion, of their difference;
// for a single bit that is the bit's table entry carried through the zero
// bytes after it.
func singleBitError(n int64, syndrome uint32) bool {
	if syndrome == 0 {
		return false
	}
	var regs [8]uint32
	for b := range regs {
		regs[b] = castagnoli[1<<b]
	}
	for k := int64(0); k < n; k++ {
		for b, r := range regs {
			if r == syndrome {
				return true
			}
			regs[b] = castagnoli[byte(r)] ^ r>>8
		}
	}
	return false
}

// naturalLength is the length a record payload's own fields give it (its
// varints and the lengths of data and extensions), reading zeros past the
// end of p, up to limit bytes; parsed is false when the fields do not fit.
func naturalLength(p []byte, limit int64) (m, extLen int64, parsed bool) {
	pos := int64(0)
	at := func(i int64) byte {
		if i < int64(len(p)) {
			return p[i]
		}
		return 0
	}
	uvarint := func() (uint64, bool) {
		var v uint64
		for shift := uint(0); shift < 64; shift += 7 {
			if pos >= limit {
				return 0, false
			}
			c := at(pos)
			pos++
			v |= uint64(c&0x7f) << shift
			if c < 0x80 {
				return v, true
			}
		}
		return 0, false
	}
	for range 2 { // index, term
		if _, ok := uvarint(); !ok {
			return 0, 0, false
		}
	}
	pos++ // the type byte; the append time, a zigzag varint, follows
	if _, ok := uvarint(); !ok {
		return 0, 0, false
	}
	d, ok := uvarint()
	if !ok || d > uint64(limit-pos) {
		return 0, 0, false
	}
	pos += int64(d)
	e, ok := uvarint()
	if !ok || e > uint64(limit-pos) {
		return 0, 0, false
	}
	return pos + int64(e), int64(e), true
}

// zeroTorn overwrites a torn append, from off to the last non-zero byte of
// the file, with zeros and makes that durable.
func zeroTorn(f segFile, data []byte, off int64) error {
	end := zeroTail(data)
	if end <= off {
		return nil
	}
	return zeroSync(f, off, end)
}

// readSegment reads a whole segment file.
func readSegment(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("raftlog: read segment: %w", err)
	}
	return data, nil
}
