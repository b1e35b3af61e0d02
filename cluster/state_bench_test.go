package cluster

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/statestore"
)

// BenchmarkStateLeaseCycle measures the state machine on its disk store:
// an acquire and a release of a new key (random, as a key's hash is), in
// batches of `per` entries as Raft hands them over under load. Run it on
// one CPU (taskset -c 0 ... -cpu 1) so that the store's flushes and
// compactions are in the time per operation.
func BenchmarkStateLeaseCycle(b *testing.B) {
	for _, per := range []int{1, 64} {
		b.Run(map[int]string{1: "batch=1", 64: "batch=64"}[per], func(b *testing.B) {
			f, _ := openBenchState(b)
			var idx uint64
			logs := make([]*raft.Log, 0, 2*per)
			now := int64(1788602400000)
			rng := rand.New(rand.NewPCG(1, 2))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				var k secret.Hash
				for j := 0; j < len(k); j += 8 {
					binary.LittleEndian.PutUint64(k[j:], rng.Uint64())
				}
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

// BenchmarkStateQueue measures the state machine on its disk store under
// the queue loads of ../shared/bench/holdfastload: 64 workers, each with
// a queue of its own (random ids) and a new one every 100 jobs, 256-byte
// payloads, in batches of 40 entries as Raft hands them over under that
// load, and the leader's question for the next deadline after each batch.
// enqueue enqueues; cycle enqueues, claims and acks. Run it on one CPU
// (taskset -c 0 ... -cpu 1) so that the store's flushes and compactions
// are in the time per operation.
func BenchmarkStateQueue(b *testing.B) {
	for _, cycle := range []bool{false, true} {
		b.Run(map[bool]string{false: "enqueue", true: "cycle"}[cycle], func(b *testing.B) {
			benchQueueLoad(b, cycle)
		})
	}
}

func benchQueueLoad(b *testing.B, cycle bool) {
	f, st := openBenchState(b)
	var idx uint64
	var logs []*raft.Log
	add := func(c fsm.Command) {
		idx++
		logs = append(logs, &raft.Log{Index: idx, Type: raft.LogCommand, Data: fsm.Encode(c)})
		if len(logs) == 40 {
			f.ApplyBatch(logs)
			f.NextDeadline()
			logs = logs[:0]
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(b []byte) {
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
	}
	const workers = 64
	queues := make([]secret.ID, workers)
	used := make([]int, workers)
	tok := secret.Hash{7}
	payload := []byte(`"` + strings.Repeat("x", 254) + `"`)
	now := int64(1788602400000)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		now++
		w := i % workers
		if used[w]%100 == 0 {
			random(queues[w][:])
			var client secret.Hash
			random(client[:])
			add(&fsm.QueueCreate{Now: now, Queue: queues[w], WriteToken: tok, WorkerToken: tok, ReadToken: tok, Client: client})
		}
		used[w]++
		var job secret.ID
		random(job[:])
		add(&fsm.JobEnqueue{Now: now, Queue: queues[w], Token: tok, Job: job, Key: "job-" + strconv.Itoa(i), Payload: payload})
		if cycle {
			var rcpt secret.Hash
			random(rcpt[:])
			add(&fsm.JobClaim{Now: now, Queue: queues[w], Token: tok, Receipt: rcpt, VisibilitySeconds: 60})
			add(&fsm.JobAck{Now: now, Queue: queues[w], Token: tok, Job: job, Receipt: rcpt})
		}
	}
	m := st.Metrics().Total()
	b.ReportMetric(m.WriteAmp(), "write-amp")
	b.ReportMetric(float64(m.TableBytesFlushed+m.TableBytesCompacted)/float64(b.N), "store-B/op")
}

// openBenchState opens a state machine on a new disk store with its key
// filter built, closed when b ends. MEMTABLE sets the memtable size.
func openBenchState(b *testing.B) (*fsm.FSM, *statestore.Store) {
	st, err := statestore.Open(b.TempDir(), statestore.Options{MemTableBytes: memtableBytes()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	f, err := fsm.Open(stateStore{st})
	if err != nil {
		b.Fatal(err)
	}
	if err := f.BuildKeyFilter(nil); err != nil {
		b.Fatal(err)
	}
	return f, st
}

func memtableBytes() uint64 {
	n, _ := strconv.ParseUint(os.Getenv("MEMTABLE"), 10, 64)
	return n
}

// BenchmarkStateRestore measures what a follower does with a snapshot it
// was sent: format=snapshot reads it in the state machine's format and
// writes it into a new store record by record (below cluster level 4);
// format=files checks the leader's store files and installs them
// (ArchiveLevel). The state is LEASES held leases (default 200,000); the
// bytes per second are those of the state machine's format in both, the
// state's size as a backup measures it.
func BenchmarkStateRestore(b *testing.B) {
	leases := 200_000
	if n, err := strconv.Atoi(os.Getenv("LEASES")); err == nil && n > 0 {
		leases = n
	}
	f, st := openBenchState(b)
	var logs []*raft.Log
	owner := secret.Hash{1}
	now := int64(1788602400000)
	for i := range leases {
		var k secret.Hash
		binary.BigEndian.PutUint64(k[:], uint64(i)*0x9E3779B97F4A7C15)
		binary.BigEndian.PutUint64(k[8:], uint64(i))
		logs = append(logs, &raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: fsm.Encode(&fsm.LeaseAcquire{Now: now + int64(i/64), Lease: k, Owner: owner, TTLSeconds: 86400})})
		if len(logs) == 64 || i == leases-1 {
			f.ApplyBatch(logs)
			logs = logs[:0]
		}
	}
	snap := f.SnapshotBytes()
	cp := filepath.Join(b.TempDir(), "cp")
	if err := st.Checkpoint(cp); err != nil {
		b.Fatal(err)
	}
	a, err := openArchive(cp, st.Applied())
	if err != nil {
		b.Fatal(err)
	}
	var files bytes.Buffer
	if err := a.writeTo(&files); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d leases: %d bytes in the state machine's format, %d as store files", leases, len(snap), files.Len())
	for _, c := range []struct {
		name string
		body []byte
	}{{"snapshot", snap}, {"files", files.Bytes()}} {
		b.Run("format="+c.name, func(b *testing.B) {
			into, intoStore := openBenchState(b)
			d := durableFSM{FSM: into, state: intoStore, log: hclog.NewNullLogger()}
			b.SetBytes(int64(len(snap)))
			for b.Loop() {
				if err := d.Restore(io.NopCloser(bytes.NewReader(c.body))); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
