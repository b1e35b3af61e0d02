package cluster

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/statestore"
)

// BenchmarkStateLeaseCycle measures the state machine on its disk store:
// an acquire and a release of a new key, in batches of `per` entries as
// Raft hands them over under load.
func BenchmarkStateLeaseCycle(b *testing.B) {
	for _, per := range []int{1, 64} {
		b.Run(map[int]string{1: "batch=1", 64: "batch=64"}[per], func(b *testing.B) {
			st, err := statestore.Open(b.TempDir(), statestore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			f, err := fsm.Open(stateStore{st})
			if err != nil {
				b.Fatal(err)
			}
			var idx uint64
			logs := make([]*raft.Log, 0, 2*per)
			now := int64(1788602400000)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var k secret.Hash
				binary.BigEndian.PutUint64(k[:], uint64(i))
				owner := secret.Hash{1}
				now++
				for _, c := range []fsm.Command{
					&fsm.LeaseAcquire{Now: now, Lease: k, Owner: owner, TTLSeconds: 60},
					&fsm.LeaseRelease{Now: now, Lease: k, Owner: owner},
				} {
					idx++
					logs = append(logs, &raft.Log{Index: idx, Type: raft.LogCommand, Data: fsm.Encode(c)})
				}
				if len(logs) >= 2*per {
					f.ApplyBatch(logs)
					logs = logs[:0]
				}
			}
		})
	}
}

// BenchmarkStateQueueCycle measures an enqueue, a claim and an ack on the
// disk store, a new queue every 100 jobs, in batches of 64 entries, and
// the leader's question for the next deadline after each batch.
func BenchmarkStateQueueCycle(b *testing.B) {
	st, err := statestore.Open(b.TempDir(), statestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	f, err := fsm.Open(stateStore{st})
	if err != nil {
		b.Fatal(err)
	}
	var idx uint64
	var logs []*raft.Log
	add := func(c fsm.Command) {
		idx++
		logs = append(logs, &raft.Log{Index: idx, Type: raft.LogCommand, Data: fsm.Encode(c)})
		if len(logs) == 64 {
			f.ApplyBatch(logs)
			f.NextDeadline()
			logs = logs[:0]
		}
	}
	tok := secret.Hash{7}
	var q secret.ID
	now := int64(1788602400000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now++
		if i%100 == 0 {
			binary.BigEndian.PutUint64(q[:], uint64(i))
			var client secret.Hash
			binary.BigEndian.PutUint64(client[:], uint64(i))
			add(&fsm.QueueCreate{Now: now, Queue: q, WriteToken: tok, WorkerToken: tok, ReadToken: tok, Client: client})
		}
		var job secret.ID
		binary.BigEndian.PutUint64(job[:], uint64(i))
		rcpt := secret.Hash{byte(i), byte(i >> 8), byte(i >> 16), 9}
		add(&fsm.JobEnqueue{Now: now, Queue: q, Token: tok, Job: job, Key: fmt.Sprint("job-", i), Payload: []byte(`{"n":1}`)})
		add(&fsm.JobClaim{Now: now, Queue: q, Token: tok, Receipt: rcpt, VisibilitySeconds: 60})
		add(&fsm.JobAck{Now: now, Queue: q, Token: tok, Job: job, Receipt: rcpt})
	}
}
