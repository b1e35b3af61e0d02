package wire

import (
	"bytes"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	e := NewEncoder(nil)
	e.Byte(7)
	e.Bool(true)
	e.Bool(false)
	e.Uvarint(math.MaxUint64)
	e.Varint(math.MinInt64)
	e.Varint(-1)
	e.Fixed([]byte{1, 2, 3})
	e.Blob([]byte("hello"))
	e.Blob(nil)
	e.String("wörld")

	d := NewDecoder(e.Bytes())
	if got := d.Byte(); got != 7 {
		t.Fatalf("Byte = %d", got)
	}
	if !d.Bool() || d.Bool() {
		t.Fatal("Bool mismatch")
	}
	if got := d.Uvarint(); got != math.MaxUint64 {
		t.Fatalf("Uvarint = %d", got)
	}
	if got := d.Varint(); got != math.MinInt64 {
		t.Fatalf("Varint = %d", got)
	}
	if got := d.Varint(); got != -1 {
		t.Fatalf("Varint = %d", got)
	}
	var fixed [3]byte
	d.Fixed(fixed[:])
	if fixed != [3]byte{1, 2, 3} {
		t.Fatalf("Fixed = %v", fixed)
	}
	if got := d.Blob(); !bytes.Equal(got, []byte("hello")) {
		t.Fatalf("Blob = %q", got)
	}
	if got := d.Blob(); got != nil {
		t.Fatalf("empty Blob = %q", got)
	}
	if got := d.String(); got != "wörld" {
		t.Fatalf("String = %q", got)
	}
	if err := d.Finish(); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

func TestCorruptInputs(t *testing.T) {
	huge := NewEncoder(nil)
	huge.Uvarint(1 << 40) // a length far beyond the input
	cases := []struct {
		name string
		in   []byte
		read func(d *Decoder)
	}{
		{"empty byte", nil, func(d *Decoder) { d.Byte() }},
		{"bad bool", []byte{2}, func(d *Decoder) { d.Bool() }},
		{"truncated uvarint", []byte{0x80}, func(d *Decoder) { d.Uvarint() }},
		{"truncated varint", []byte{0xff}, func(d *Decoder) { d.Varint() }},
		{"short fixed", []byte{1}, func(d *Decoder) { var b [4]byte; d.Fixed(b[:]) }},
		{"blob longer than input", append(huge.Bytes(), 1, 2), func(d *Decoder) { d.Blob() }},
		{"string longer than input", []byte{5, 'a'}, func(d *Decoder) { _ = d.String() }},
		{"trailing bytes", []byte{1, 2}, func(d *Decoder) { d.Byte() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(tc.in)
			tc.read(d)
			err := d.Finish()
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Finish() = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestErrorIsSticky(t *testing.T) {
	d := NewDecoder([]byte{0x80})
	d.Uvarint()
	first := d.Err()
	if first == nil {
		t.Fatal("expected an error")
	}
	if v := d.Uvarint(); v != 0 {
		t.Fatalf("read after error = %d, want 0", v)
	}
	if d.Err() != first {
		t.Fatal("error changed after the first failure")
	}
}

func FuzzDecoder(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4})
	f.Add([]byte{0, 3, 'a', 'b', 'c', 3, 0x80, 0x80, 1, 2, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		// The same input through a slice and through a stream that
		// gives a few bytes at a time reads the same values, fails
		// alike, and hands every byte it read to consumed.
		var seen []byte
		d := NewDecoder(in)
		sd := NewStreamDecoder(&chunkReader{b: in}, func(p []byte) { seen = append(seen, p...) })
		for step := 0; d.Err() == nil && d.Remaining() > 0; step++ {
			op, sop := d.Byte(), sd.Byte()
			if op != sop {
				t.Fatalf("step %d: op %d from the slice, %d from the stream", step, op, sop)
			}
			var a, b any
			switch op % 4 {
			case 0:
				a, b = d.Blob(), sd.Blob()
			case 1:
				a, b = d.Uvarint(), sd.Uvarint()
			case 2:
				a, b = d.Varint(), sd.Varint()
			default:
				a, b = d.String(), sd.String()
			}
			if !reflect.DeepEqual(a, b) || (d.Err() == nil) != (sd.Err() == nil) {
				t.Fatalf("step %d op %d: slice %v (%v), stream %v (%v)", step, op%4, a, d.Err(), b, sd.Err())
			}
		}
		if d.Err() != nil {
			return
		}
		rest, err := sd.Tail(len(in))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append(seen, rest...), in) {
			t.Fatalf("the stream decoder handed over %x and left %x of %x", seen, rest, in)
		}
	})
}

// chunkReader gives its bytes 1 to 3 at a time.
type chunkReader struct {
	b []byte
	n int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	r.n++
	k := min(len(p), len(r.b), 1+r.n%3)
	copy(p, r.b[:k])
	r.b = r.b[k:]
	return k, nil
}

// TestStreamDecoderTail: what follows the last value is left whole, and a
// stream with more than the caller allows after it is refused.
func TestStreamDecoderTail(t *testing.T) {
	e := NewEncoder(nil)
	e.Uvarint(300)
	e.Blob(bytes.Repeat([]byte("x"), 100_000))
	in := append(e.Bytes(), "trailer"...)
	var seen []byte
	d := NewStreamDecoder(&chunkReader{b: in}, func(p []byte) { seen = append(seen, p...) })
	if d.Uvarint() != 300 || len(d.Blob()) != 100_000 {
		t.Fatal(d.Err())
	}
	rest, err := d.Tail(7)
	if err != nil || string(rest) != "trailer" || !bytes.Equal(seen, e.Bytes()) {
		t.Fatalf("tail %q, %v; consumed %d bytes of %d", rest, err, len(seen), len(e.Bytes()))
	}
	d = NewStreamDecoder(bytes.NewReader(in), nil)
	d.Uvarint()
	if _, err := d.Tail(6); err == nil {
		t.Fatal("a tail longer than allowed was taken")
	}
	d = NewStreamDecoder(bytes.NewReader([]byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}), nil)
	if d.Len(); d.Err() == nil {
		t.Fatal("an overlong varint was taken")
	}
	e = NewEncoder(nil)
	e.Uvarint(MaxStreamLen + 1)
	if d = NewStreamDecoder(bytes.NewReader(e.Bytes()), nil); d.Len() != 0 || d.Err() == nil {
		t.Fatal("a stream length above MaxStreamLen was taken")
	}
}

// TestBeginEndBlobWritesWhatBlobWrites: a byte string appended in place
// has the bytes of Blob, whatever the length's varint size, after what the
// encoder already held.
func TestBeginEndBlobWritesWhatBlobWrites(t *testing.T) {
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 70000} {
		b := bytes.Repeat([]byte{'x'}, n)
		want := NewEncoder([]byte("head"))
		want.Blob(b)
		got := NewEncoder([]byte("head"))
		mark := got.BeginBlob()
		got.Fixed(b)
		got.EndBlob(mark)
		got.Byte(7)
		if !bytes.Equal(got.Bytes(), append(want.Bytes(), 7)) {
			t.Errorf("length %d: in place %x..., Blob %x...", n, got.Bytes()[:min(12, got.Len())], want.Bytes()[:min(12, want.Len())])
		}
	}
}
