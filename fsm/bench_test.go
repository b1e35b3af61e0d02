package fsm

import (
	"encoding/binary"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/secret"
)

// BenchmarkLeaseCycle measures Apply for an acquire and a release on a
// state holding b.N leases, through the log encoding as Raft delivers it.
func BenchmarkLeaseCycle(b *testing.B) {
	f := New()
	var idx uint64
	apply := func(c Command) interface{} {
		idx++
		return f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: Encode(c)})
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		var k secret.Hash
		binary.BigEndian.PutUint64(k[:], uint64(i))
		owner := secret.Hash{1}
		now := t0 + int64(i)
		if r := apply(&LeaseAcquire{Now: now, Lease: k, Owner: owner, TTLSeconds: 60}).(*LeaseResult); r.Outcome != LeaseGranted {
			b.Fatalf("acquire: %v", r.Outcome)
		}
		if r := apply(&LeaseRelease{Now: now, Lease: k, Owner: owner}).(*LeaseResult); r.Outcome != LeaseReleased {
			b.Fatalf("release: %v", r.Outcome)
		}
	}
}

// BenchmarkQueueCycle measures Apply for enqueue, claim and ack, with a new
// queue every 100 jobs.
func BenchmarkQueueCycle(b *testing.B) {
	f := New()
	var idx uint64
	apply := func(c Command) *QueueResult {
		idx++
		return f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: Encode(c)}).(*QueueResult)
	}
	tok := secret.Hash{7}
	var q secret.ID
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now := t0 + int64(i)
		if i%100 == 0 {
			binary.BigEndian.PutUint64(q[:], uint64(i))
			var client secret.Hash
			binary.BigEndian.PutUint64(client[:], uint64(i))
			if r := apply(&QueueCreate{Now: now, Queue: q, WriteToken: tok, WorkerToken: tok, ReadToken: tok, Client: client}); r.Outcome != QueueCreated {
				b.Fatalf("create: %v", r.Outcome)
			}
		}
		var job secret.ID
		binary.BigEndian.PutUint64(job[:], uint64(i))
		rcpt := secret.Hash{byte(i), byte(i >> 8), byte(i >> 16), 9}
		if r := apply(&JobEnqueue{Now: now, Queue: q, Token: tok, Job: job, Key: "job-" + strconv.Itoa(i), Payload: []byte(`{"n":1}`)}); r.Outcome != JobCreated {
			b.Fatalf("enqueue: %v", r.Outcome)
		}
		if r := apply(&JobClaim{Now: now, Queue: q, Token: tok, Receipt: rcpt, VisibilitySeconds: 60}); r.Outcome != JobClaimed {
			b.Fatalf("claim: %v", r.Outcome)
		}
		if r := apply(&JobAck{Now: now, Queue: q, Token: tok, Job: job, Receipt: rcpt}); r.Outcome != JobAcked {
			b.Fatalf("ack: %v", r.Outcome)
		}
	}
}

// BenchmarkSnapshot measures Snapshot (the part that stops Apply) and
// Persist on a state of 100,000 leases.
func BenchmarkSnapshot(b *testing.B) {
	f := New()
	for i := 0; i < 100_000; i++ {
		var k secret.Hash
		binary.BigEndian.PutUint64(k[:], uint64(i))
		f.ApplyCommand(&LeaseAcquire{Now: t0, Lease: k, Owner: secret.Hash{1}, TTLSeconds: 60})
	}
	b.Run("capture", func(b *testing.B) {
		for b.Loop() {
			if _, err := f.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("persist", func(b *testing.B) {
		for b.Loop() {
			snap, _ := f.Snapshot()
			if err := snap.Persist(&memSink{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// discardSink is a snapshot sink that keeps nothing, so a benchmark of
// Persist measures the encoding, not a buffer's growth.
type discardSink struct{ n int64 }

func (d *discardSink) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }
func (d *discardSink) ID() string                  { return "discard" }
func (d *discardSink) Cancel() error               { return nil }
func (d *discardSink) Close() error                { return nil }

// BenchmarkSnapshotQueues measures Persist on the state the queue
// benchmarks leave: 300,000 pending jobs of 256-byte payloads, 100 to a
// queue.
func BenchmarkSnapshotQueues(b *testing.B) {
	f := New()
	tok := secret.Hash{7}
	payload := []byte(`{"p":"` + strings.Repeat("x", 248) + `"}`)
	var q secret.ID
	for i := 0; i < 300_000; i++ {
		if i%100 == 0 {
			binary.BigEndian.PutUint64(q[:], uint64(i))
			var client secret.Hash
			binary.BigEndian.PutUint64(client[:], uint64(i))
			f.ApplyCommand(&QueueCreate{Now: t0, Queue: q, WriteToken: tok, WorkerToken: tok, ReadToken: tok, Client: client})
		}
		var job secret.ID
		binary.BigEndian.PutUint64(job[:], uint64(i))
		if r := f.ApplyCommand(&JobEnqueue{Now: t0, Queue: q, Token: tok, Job: job, Key: "job-" + strconv.Itoa(i), Payload: payload}).(*QueueResult); r.Outcome != JobCreated {
			b.Fatalf("enqueue: %v", r.Outcome)
		}
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			snap, _ := f.Snapshot()
			sink := &discardSink{}
			if err := snap.Persist(sink); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(sink.n), "bytes")
		}
	})
	// file is what a node does: Raft's file snapshot store, which also
	// checksums the bytes and syncs the file.
	b.Run("file", func(b *testing.B) {
		store, err := raft.NewFileSnapshotStore(b.TempDir(), 1, io.Discard)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for i := uint64(1); b.Loop(); i++ {
			sink, err := store.Create(raft.SnapshotVersionMax, i, 1, raft.Configuration{}, 1, nil)
			if err != nil {
				b.Fatal(err)
			}
			snap, _ := f.Snapshot()
			if err := snap.Persist(sink); err != nil {
				b.Fatal(err)
			}
		}
	})
}
