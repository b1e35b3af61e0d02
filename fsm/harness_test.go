package fsm

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/secret"
)

// t0 is an arbitrary leader time: 2026-09-05T10:00:00Z.
const t0 = int64(1788602400000)

// harness drives one FSM through the log encoding, with a controllable clock.
type harness struct {
	t     *testing.T
	f     *FSM
	now   int64
	index uint64
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	return &harness{t: t, f: New(), now: t0}
}

func (h *harness) advance(d time.Duration) { h.now += d.Milliseconds() }

// apply encodes c, decodes it through Apply as Raft would, and returns the result.
func (h *harness) apply(c Command) interface{} {
	h.t.Helper()
	h.index++
	return h.f.Apply(&raft.Log{Index: h.index, Term: 1, Type: raft.LogCommand, Data: Encode(c)})
}

func (h *harness) lease(c Command) *LeaseResult {
	h.t.Helper()
	r, ok := h.apply(c).(*LeaseResult)
	if !ok {
		h.t.Fatalf("%T returned a non-lease result", c)
	}
	return r
}

func (h *harness) queue(c Command) *QueueResult {
	h.t.Helper()
	r, ok := h.apply(c).(*QueueResult)
	if !ok {
		h.t.Fatalf("%T returned a non-queue result", c)
	}
	return r
}

func (h *harness) acquire(key, fp, owner string, ttl int64) *LeaseResult {
	h.t.Helper()
	return h.lease(&LeaseAcquire{
		Now:         h.now,
		Lease:       secret.LeaseID("ns_test", key),
		Fingerprint: secret.FingerprintHash("ns_test", key, fp),
		Owner:       secret.OwnerTokenHash(owner),
		TTLSeconds:  ttl,
	})
}

func (h *harness) renew(key, owner string, ttl int64) *LeaseResult {
	h.t.Helper()
	return h.lease(&LeaseRenew{Now: h.now, Lease: secret.LeaseID("ns_test", key), Owner: secret.OwnerTokenHash(owner), TTLSeconds: ttl})
}

func (h *harness) release(key, owner string) *LeaseResult {
	h.t.Helper()
	return h.lease(&LeaseRelease{Now: h.now, Lease: secret.LeaseID("ns_test", key), Owner: secret.OwnerTokenHash(owner)})
}

func (h *harness) complete(key, owner, result string) *LeaseResult {
	h.t.Helper()
	return h.lease(&LeaseComplete{Now: h.now, Lease: secret.LeaseID("ns_test", key), Owner: secret.OwnerTokenHash(owner), Result: []byte(result)})
}

func (h *harness) sweep(limit int64) *SweepResult {
	h.t.Helper()
	r, ok := h.apply(&Sweep{Now: h.now, Limit: limit}).(*SweepResult)
	if !ok {
		h.t.Fatal("sweep returned a non-sweep result")
	}
	return r
}

// testQueue names a queue and its tokens by a short label.
type testQueue struct {
	id                   secret.ID
	write, worker, read  secret.Hash
	writeS, workerS, rdS string
}

func mkQueue(label string) testQueue {
	q := testQueue{writeS: label + "-write", workerS: label + "-worker", rdS: label + "-read"}
	copy(q.id[:], fmt.Sprintf("%-16s", label))
	q.write = secret.RoleTokenHash(q.writeS)
	q.worker = secret.RoleTokenHash(q.workerS)
	q.read = secret.RoleTokenHash(q.rdS)
	return q
}

func jobID(label string) (id secret.ID) {
	copy(id[:], fmt.Sprintf("%-16s", label))
	return id
}

func (h *harness) createQueue(q testQueue, client string) *QueueResult {
	h.t.Helper()
	return h.queue(&QueueCreate{Now: h.now, Queue: q.id, WriteToken: q.write, WorkerToken: q.worker, ReadToken: q.read, Client: secret.ClientHash(client)})
}

func (h *harness) enqueue(q testQueue, job, key, payload string) *QueueResult {
	h.t.Helper()
	return h.queue(&JobEnqueue{Now: h.now, Queue: q.id, Token: q.write, Job: jobID(job), Key: key, Payload: []byte(payload)})
}

func (h *harness) claim(q testQueue, receipt string, vis int64) *QueueResult {
	h.t.Helper()
	return h.queue(&JobClaim{Now: h.now, Queue: q.id, Token: q.worker, Receipt: secret.ReceiptHash(receipt), VisibilitySeconds: vis})
}

func (h *harness) ack(q testQueue, job, receipt string) *QueueResult {
	h.t.Helper()
	return h.queue(&JobAck{Now: h.now, Queue: q.id, Token: q.worker, Job: jobID(job), Receipt: secret.ReceiptHash(receipt)})
}

func (h *harness) releaseJob(q testQueue, job, receipt string) *QueueResult {
	h.t.Helper()
	return h.queue(&JobRelease{Now: h.now, Queue: q.id, Token: q.worker, Job: jobID(job), Receipt: secret.ReceiptHash(receipt)})
}

func (h *harness) renewJob(q testQueue, job, receipt string, vis int64) *QueueResult {
	h.t.Helper()
	return h.queue(&JobRenew{Now: h.now, Queue: q.id, Token: q.worker, Job: jobID(job), Receipt: secret.ReceiptHash(receipt), VisibilitySeconds: vis})
}

// snapshotRestore persists a snapshot of h's FSM and restores it into a fresh FSM.
func snapshotRestore(t *testing.T, f *FSM) *FSM {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	snap.Release()
	g := New()
	if err := g.Restore(sink.reader()); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if f.StateHash() != g.StateHash() {
		t.Fatal("restored state hash differs from the original")
	}
	return g
}

type memSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (m *memSink) ID() string    { return "mem" }
func (m *memSink) Cancel() error { m.cancelled = true; return nil }
func (m *memSink) Close() error  { m.closed = true; return nil }
func (m *memSink) reader() *nopCloser {
	return &nopCloser{Reader: bytes.NewReader(m.Bytes())}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

func wantLease(t *testing.T, got *LeaseResult, want LeaseResult) {
	t.Helper()
	if got.Outcome != want.Outcome || got.FencingToken != want.FencingToken || got.TTLSeconds != want.TTLSeconds ||
		got.LeaseExpiresAt != want.LeaseExpiresAt || got.AbsoluteExpiresAt != want.AbsoluteExpiresAt ||
		got.RetryAfterSeconds != want.RetryAfterSeconds || got.CompletedAt != want.CompletedAt ||
		!bytes.Equal(got.Result, want.Result) || (want.Now != 0 && got.Now != want.Now) {
		t.Fatalf("lease result:\n got %+v (result %q)\nwant %+v (result %q)", *got, got.Result, want, want.Result)
	}
}
