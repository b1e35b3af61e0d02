package fsm

import (
	"encoding/binary"
	"strconv"
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
