package fsm

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/holdfast/holdfast/internal/secret"
)

// countingStore counts the writes of its Replace as they happen.
type countingStore struct {
	*MemStore
	sets int
}

func (c *countingStore) Replace(index uint64, fill func(w Writer) error) error {
	return c.MemStore.Replace(index, func(w Writer) error { return fill(countingWriter{w, c}) })
}

type countingWriter struct {
	Writer
	c *countingStore
}

func (w countingWriter) Set(k, v []byte) error { w.c.sets++; return w.Writer.Set(k, v) }

// halfWatcher reads a snapshot and, at its second half, notes whether
// the store had taken records of the first already.
type halfWatcher struct {
	b        []byte
	off      int
	store    *countingStore
	atHalf   int
	sawHalf  bool
	chunkLen int
}

func (r *halfWatcher) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	if !r.sawHalf && r.off >= len(r.b)/2 {
		r.sawHalf, r.atHalf = true, r.store.sets
	}
	n := copy(p[:min(len(p), r.chunkLen)], r.b[r.off:])
	r.off += n
	return n, nil
}

// TestRestoreReadsAsItWrites: a restore writes records into its new store
// while the snapshot is still arriving, rather than reading it whole
// first, and a snapshot damaged at its very end is still refused whole.
func TestRestoreReadsAsItWrites(t *testing.T) {
	h := newHarness(t)
	for i := range 3000 {
		k := secret.OwnerTokenHash(fmt.Sprint("key-", i))
		h.lease(&LeaseAcquire{Now: h.now, Lease: k, Owner: secret.Hash{1}, TTLSeconds: 60})
	}
	snap := h.f.SnapshotBytes()
	store := &countingStore{MemStore: NewMemStore()}
	g, err := Open(store)
	if err != nil {
		t.Fatal(err)
	}
	r := &halfWatcher{b: snap, store: store, chunkLen: 4096}
	if err := g.Restore(io.NopCloser(r)); err != nil {
		t.Fatal(err)
	}
	if r.atHalf < 1000 {
		t.Fatalf("the store had taken %d records when half the snapshot was read", r.atHalf)
	}
	if g.StateHash() != h.f.StateHash() {
		t.Fatal("the restored state differs")
	}
	bad := bytes.Clone(snap)
	bad[len(bad)-1] ^= 1
	if err := g.Restore(io.NopCloser(bytes.NewReader(bad))); err == nil {
		t.Fatal("a snapshot with a damaged checksum was restored")
	}
	if g.StateHash() != h.f.StateHash() {
		t.Fatal("a refused restore changed the state")
	}
}
