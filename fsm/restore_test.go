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

// sizingStore records the largest value each batch writes.
type sizingStore struct {
	*MemStore
	largest int
}

func (s *sizingStore) Begin() StoreBatch { return sizingBatch{s.MemStore.Begin(), s} }

type sizingBatch struct {
	StoreBatch
	s *sizingStore
}

func (b sizingBatch) Set(k, v []byte) error {
	if k[0] == tableClient || k[0] == tableCreate {
		b.s.largest = max(b.s.largest, len(v))
	}
	return b.StoreBatch.Set(k, v)
}

// TestAClientCreationWritesSmallKeys: a client's creations are records of
// their own, so the thousandth queue a client creates writes no more of
// it than the first.
func TestAClientCreationWritesSmallKeys(t *testing.T) {
	store := &sizingStore{MemStore: NewMemStore()}
	f, err := Open(store)
	if err != nil {
		t.Fatal(err)
	}
	many := int64(5000)
	now := t0
	f.ApplyCommand(&SetSettings{Now: now, Patch: SettingsPatch{QueuesPerClient: &many, MaxQueues: &many}})
	client := secret.Hash{9}
	for i := range 2000 {
		var q secret.ID
		copy(q[:], fmt.Sprint("queue-", i))
		r := f.ApplyCommand(&QueueCreate{Now: now, Queue: q, Client: client}).(*QueueResult)
		if r.Outcome != QueueCreated {
			t.Fatalf("creation %d: %v", i, r.Outcome)
		}
		now++
	}
	if store.largest > 64 {
		t.Fatalf("a creation wrote a client value of %d bytes", store.largest)
	}
	if got := f.Stats().Queues; got != 2000 {
		t.Fatalf("%d queues", got)
	}
	g := snapshotRestore(t, f)
	if g.StateHash() != f.StateHash() {
		t.Fatal("the client's creations do not survive a snapshot")
	}
}
