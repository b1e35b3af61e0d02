package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("wire: corrupt input")

// Encoder appends values to a byte slice.
type Encoder struct {
	buf []byte
}

// NewEncoder returns an Encoder that appends to buf (which may be nil).
func NewEncoder(buf []byte) *Encoder { return &Encoder{buf: buf} }

// Bytes returns the encoded bytes.
func (e *Encoder) Bytes() []byte { return e.buf }

// Reset empties the encoder, keeping its buffer.
func (e *Encoder) Reset() { e.buf = e.buf[:0] }

// Len reports how many bytes have been encoded.
func (e *Encoder) Len() int { return len(e.buf) }

// Byte appends one byte.
func (e *Encoder) Byte(b byte) { e.buf = append(e.buf, b) }

// Bool appends a boolean as one byte.
func (e *Encoder) Bool(b bool) {
	if b {
		e.buf = append(e.buf, 1)
		return
	}
	e.buf = append(e.buf, 0)
}

// Uvarint appends an unsigned varint.
func (e *Encoder) Uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }

// Varint appends a signed (zig-zag) varint.
func (e *Encoder) Varint(v int64) { e.buf = binary.AppendVarint(e.buf, v) }

// Fixed appends raw bytes without a length prefix; the reader must know the size.
func (e *Encoder) Fixed(b []byte) { e.buf = append(e.buf, b...) }

// Blob appends a length-prefixed byte string.
func (e *Encoder) Blob(b []byte) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(b)))
	e.buf = append(e.buf, b...)
}

// BeginBlob starts a length-prefixed byte string whose bytes the caller
// appends next; EndBlob, given the mark BeginBlob returned, writes its
// length. It saves encoding a nested value into a buffer of its own: the
// bytes are those Blob writes.
func (e *Encoder) BeginBlob() int {
	mark := len(e.buf)
	e.buf = append(e.buf, make([]byte, binary.MaxVarintLen64)...)
	return mark
}

// EndBlob ends the byte string begun at mark: it writes the length in the
// room BeginBlob left and moves the bytes down to follow it.
func (e *Encoder) EndBlob(mark int) {
	start := mark + binary.MaxVarintLen64
	n := len(e.buf) - start
	k := binary.PutUvarint(e.buf[mark:start], uint64(n))
	copy(e.buf[mark+k:], e.buf[start:])
	e.buf = e.buf[:mark+k+n]
}

// String appends a length-prefixed string.
func (e *Encoder) String(s string) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

// Decoder reads values written by an Encoder. After the first error every
// read returns a zero value and Err reports that first error.
//
// A decoder reads a byte slice (NewDecoder) or a stream (NewStreamDecoder),
// which it reads as it goes, holding only what the value at hand needs.
type Decoder struct {
	buf []byte
	off int
	err error

	// The stream, when there is one: buf holds the bytes from stream
	// offset base on; consumed (if set) is handed every byte read before
	// it is dropped.
	src      io.Reader
	srcErr   error
	base     int64
	consumed func([]byte)
}

// NewDecoder returns a Decoder over buf. The decoder never modifies buf;
// Blob results are copies, so buf may be reused afterwards.
func NewDecoder(buf []byte) *Decoder { return &Decoder{buf: buf} }

// MaxStreamLen bounds a length prefix read from a stream, whose end is
// not known: a damaged prefix must not make the decoder hold more.
const MaxStreamLen = 1 << 30

// streamChunk is how much a stream decoder reads at a time.
const streamChunk = 64 << 10

// NewStreamDecoder returns a Decoder that reads r as it goes. consumed,
// if not nil, is handed every byte the decoder has read, in order, before
// it drops them (Tail hands over the rest), so a caller can hash what it
// decoded. BlobView results alias a buffer the next read may reuse.
func NewStreamDecoder(r io.Reader, consumed func([]byte)) *Decoder {
	return &Decoder{src: r, consumed: consumed}
}

// more reads from the stream until n bytes are unread or the stream ends,
// and reports whether it added any. A decoder over a slice has no more.
func (d *Decoder) more(n int) bool {
	if d.src == nil || d.srcErr != nil {
		return false
	}
	have := len(d.buf) - d.off
	if d.off > 0 {
		if d.consumed != nil {
			d.consumed(d.buf[:d.off])
		}
		d.base += int64(d.off)
		d.buf = d.buf[:copy(d.buf, d.buf[d.off:])]
		d.off = 0
	}
	for len(d.buf) < n && d.srcErr == nil {
		if cap(d.buf)-len(d.buf) < streamChunk/2 {
			// Doubling as the bytes arrive, not to n at once: a damaged
			// length must not cost more memory than the stream holds.
			grown := make([]byte, len(d.buf), max(2*cap(d.buf), streamChunk))
			copy(grown, d.buf)
			d.buf = grown
		}
		m, err := d.src.Read(d.buf[len(d.buf):cap(d.buf)])
		d.buf = d.buf[:len(d.buf)+m]
		if err != nil {
			d.srcErr = err
		}
	}
	return len(d.buf) > have
}

// available makes n bytes unread if it can, and reports whether they are.
func (d *Decoder) available(n int) bool {
	if len(d.buf)-d.off >= n {
		return true
	}
	d.more(n)
	return len(d.buf)-d.off >= n
}

// Err returns the first decoding error, if any.
func (d *Decoder) Err() error { return d.err }

// Remaining reports how many bytes are left unread (of a stream, how
// many it holds now).
func (d *Decoder) Remaining() int { return len(d.buf) - d.off }

// Finish returns the first decoding error, or an error if bytes remain unread.
func (d *Decoder) Finish() error {
	if d.err != nil {
		return d.err
	}
	if d.off != len(d.buf) || d.more(1) {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, len(d.buf)-d.off)
	}
	return nil
}

// Tail returns what is left of a stream, which must be at most max bytes,
// after handing every byte before it to consumed.
func (d *Decoder) Tail(max int) ([]byte, error) {
	if d.err != nil {
		return nil, d.err
	}
	d.more(max + 1)
	if d.srcErr != nil && d.srcErr != io.EOF {
		return nil, fmt.Errorf("%w: read: %w", ErrCorrupt, d.srcErr)
	}
	if len(d.buf)-d.off > max {
		return nil, fmt.Errorf("%w: more than %d bytes after the last value", ErrCorrupt, max)
	}
	if d.consumed != nil && d.off > 0 {
		d.consumed(d.buf[:d.off])
	}
	rest := d.buf[d.off:]
	d.base += int64(d.off)
	d.buf, d.off = rest, 0
	return rest, nil
}

// Fail records a decoding error found by the caller (a value out of its
// domain); like every error it is sticky.
func (d *Decoder) Fail(what string) { d.fail(what) }

func (d *Decoder) fail(what string) {
	if d.err != nil {
		return
	}
	if d.srcErr != nil && d.srcErr != io.EOF {
		d.err = fmt.Errorf("%w: %s at offset %d: read: %w", ErrCorrupt, what, d.base+int64(d.off), d.srcErr)
		return
	}
	d.err = fmt.Errorf("%w: %s at offset %d", ErrCorrupt, what, d.base+int64(d.off))
}

// Byte reads one byte.
func (d *Decoder) Byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.buf) && !d.available(1) {
		d.fail("truncated byte")
		return 0
	}
	b := d.buf[d.off]
	d.off++
	return b
}

// Bool reads a boolean written by Encoder.Bool; any byte other than 0 or 1 is an error.
func (d *Decoder) Bool() bool {
	b := d.Byte()
	if b > 1 {
		d.fail("invalid boolean")
		return false
	}
	return b == 1
}

// Uvarint reads an unsigned varint.
func (d *Decoder) Uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf[d.off:])
	if n <= 0 && d.more(binary.MaxVarintLen64) {
		v, n = binary.Uvarint(d.buf[d.off:])
	}
	if n <= 0 {
		d.fail("invalid uvarint")
		return 0
	}
	d.off += n
	return v
}

// Varint reads a signed varint.
func (d *Decoder) Varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf[d.off:])
	if n <= 0 && d.more(binary.MaxVarintLen64) {
		v, n = binary.Varint(d.buf[d.off:])
	}
	if n <= 0 {
		d.fail("invalid varint")
		return 0
	}
	d.off += n
	return v
}

// Fixed fills dst with exactly len(dst) raw bytes.
func (d *Decoder) Fixed(dst []byte) {
	if d.err != nil {
		return
	}
	if len(d.buf)-d.off < len(dst) && !d.available(len(dst)) {
		d.fail("truncated fixed field")
		return
	}
	copy(dst, d.buf[d.off:])
	d.off += len(dst)
}

// Len reads a length prefix and checks that at least that many bytes remain
// (of a stream, whose end is not known yet: that it is at most
// MaxStreamLen). It is used for byte strings and for counts of records of
// at least one byte.
func (d *Decoder) Len() int {
	n := d.Uvarint()
	if d.err != nil {
		return 0
	}
	if d.src != nil && n > MaxStreamLen || d.src == nil && n > uint64(len(d.buf)-d.off) {
		d.fail("length exceeds input")
		return 0
	}
	return int(n)
}

// bytesLen reads the length prefix of a byte string whose bytes are then
// all unread.
func (d *Decoder) bytesLen() int {
	n := d.Len()
	if n > 0 && !d.available(n) {
		d.fail("length exceeds input")
		return 0
	}
	return n
}

// Blob reads a length-prefixed byte string into a fresh slice. An empty
// string decodes as nil.
func (d *Decoder) Blob() []byte {
	n := d.bytesLen()
	if d.err != nil || n == 0 {
		return nil
	}
	out := make([]byte, n)
	copy(out, d.buf[d.off:d.off+n])
	d.off += n
	return out
}

// BlobView reads a length-prefixed byte string without copying it: the
// result aliases the decoder's input, so it must not outlive it or be kept
// in state. An empty string decodes as nil.
func (d *Decoder) BlobView() []byte {
	n := d.bytesLen()
	if d.err != nil || n == 0 {
		return nil
	}
	out := d.buf[d.off : d.off+n : d.off+n]
	d.off += n
	return out
}

// String reads a length-prefixed string.
func (d *Decoder) String() string {
	n := d.bytesLen()
	if d.err != nil || n == 0 {
		return ""
	}
	s := string(d.buf[d.off : d.off+n])
	d.off += n
	return s
}
