package fsm

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"reflect"
	"testing"

	"github.com/holdfast/holdfast/internal/secret"
)

// sampleCommands returns one command of every type, with every field set.
func sampleCommands() []Command {
	q, other := mkQueue("fuzz-q"), mkQueue("fuzz-other")
	lease := secret.LeaseID("ns_fuzz", "invoice:1")
	owner := secret.OwnerTokenHash("own_fuzz")
	maxJobs, ttl := int64(50), int64(120)
	return []Command{
		&LeaseAcquire{Now: t0, Lease: lease, Fingerprint: secret.FingerprintHash("ns_fuzz", "invoice:1", "fp"), Owner: owner, TTLSeconds: 60},
		&LeaseRenew{Now: t0 + 1, Lease: lease, Owner: owner, TTLSeconds: 90},
		&LeaseRelease{Now: t0 + 2, Lease: lease, Owner: owner},
		&LeaseComplete{Now: t0 + 3, Lease: lease, Owner: owner, Result: []byte(`{"receipt_id":4817}`)},
		&QueueCreate{Now: t0 + 4, Queue: q.id, WriteToken: q.write, WorkerToken: q.worker, ReadToken: q.read, Client: secret.ClientHash("127.0.0.1")},
		&JobEnqueue{Now: t0 + 5, Queue: q.id, Token: q.write, Job: jobID("job-1"), Key: "report:42", Payload: []byte(`{"report_id":42}`)},
		&JobClaim{Now: t0 + 6, Queue: q.id, Token: q.worker, Receipt: secret.ReceiptHash("r1"), VisibilitySeconds: 60},
		&JobAck{Now: t0 + 7, Queue: q.id, Token: q.worker, Job: jobID("job-1"), Receipt: secret.ReceiptHash("r1")},
		&JobRelease{Now: t0 + 8, Queue: other.id, Token: other.worker, Job: jobID("job-2"), Receipt: secret.ReceiptHash("r2")},
		&JobRenew{Now: t0 + 9, Queue: q.id, Token: q.worker, Job: jobID("job-1"), Receipt: secret.ReceiptHash("r1"), VisibilitySeconds: 300},
		&Sweep{Now: t0 + 10, Limit: 1000},
		&SetSettings{Now: t0 + 11, Patch: SettingsPatch{QueueMaxJobs: &maxJobs, LeaseTTLMaxSeconds: &ttl}},
		&SetNode{Now: t0 + 12, Node: NodeInfo{ID: "n1", HTTPAddr: "127.0.0.1:7070", RaftAddr: "127.0.0.1:7071"}},
		&RemoveNode{Now: t0 + 13, ID: "n2"},
		&JobRelease{Now: t0 + 14, Queue: q.id, Token: q.worker, Job: jobID("job-1"), Receipt: secret.ReceiptHash("r1"), DelaySeconds: 120},
		&JobRetry{Now: t0 + 15, Queue: q.id, Token: q.write, Job: jobID("job-1")},
		&JobClaim{Now: t0 + 16, Queue: q.id, Token: q.worker, Receipt: secret.ReceiptHash("r3"), VisibilitySeconds: 60, ByRequest: true},
	}
}

// FuzzDecode decodes arbitrary bytes as a log entry. Decoding never
// panics; an entry that decodes re-encodes to bytes that decode to the
// same command and encode to themselves again. The re-encoding need not
// equal the input: a varint written in more bytes than it needs decodes
// to the same value (a seed in testdata holds one).
func FuzzDecode(f *testing.F) {
	f.Add(Encode(&JobEnqueue{Now: 1, Key: "k", Payload: []byte("1")}))
	f.Add(Encode(&SetSettings{Now: 1, Patch: PatchOf(DefaultSettings())}))
	f.Add(Encode(&FenceFloor{Now: 1, Floor: 1_000_000_000}))
	f.Add(Encode(&SetLevel{Now: 1, Level: 1}))
	f.Add(Encode(&LeaseAcquire{Now: 1, TTLSeconds: 60, Slots: 3}))
	f.Add(Encode(&LeaseCheckpoint{Now: 1, Checkpoint: []byte(`{"step":3}`)}))
	cmds := sampleCommands()
	encoded := make([][]byte, len(cmds))
	for i, c := range cmds {
		encoded[i] = Encode(c)
		f.Add(encoded[i])
		f.Add(encoded[i][:len(encoded[i])-1])
	}
	f.Add(encodeBatch(encoded))
	f.Add(encodeBatch([][]byte{encoded[0], encodeBatch(encoded[1:2])}))
	f.Add([]byte{byte(TypeBatch), bodyVersion, 0})
	f.Add([]byte{byte(TypeSetSettings), bodyVersion, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := Decode(b)
		if err != nil {
			if c != nil {
				t.Fatalf("%x: error %v with a command %#v", b, err, c)
			}
			return
		}
		again := Encode(c)
		c2, err := Decode(again)
		if err != nil {
			t.Fatalf("%x decoded to %#v, whose encoding %x does not decode: %v", b, c, again, err)
		}
		if !reflect.DeepEqual(c, c2) {
			t.Fatalf("%x decoded to %#v, re-encoded and decoded to %#v", b, c, c2)
		}
		if third := Encode(c2); !bytes.Equal(third, again) {
			t.Fatalf("%x: encodings differ: %x then %x", b, again, third)
		}
	})
}

// seedFSM returns a small state with a record of every kind: leases held
// and completed, a queue with pending and claimed jobs, a client window,
// changed settings and the node directory.
func seedFSM() *FSM {
	f := New()
	for _, c := range sampleCommands() {
		f.ApplyCommand(c)
	}
	q := mkQueue("fuzz-q")
	lease := secret.LeaseID("ns_fuzz", "invoice:2")
	f.ApplyCommand(&LeaseAcquire{Now: t0 + 20, Lease: lease, Fingerprint: secret.FingerprintHash("ns_fuzz", "invoice:2", ""), Owner: secret.OwnerTokenHash("own_2"), TTLSeconds: 600})
	f.ApplyCommand(&JobEnqueue{Now: t0 + 21, Queue: q.id, Token: q.write, Job: jobID("job-3"), Key: "report:43", Payload: []byte(`[1,"two",null]`)})
	f.ApplyCommand(&JobEnqueue{Now: t0 + 22, Queue: q.id, Token: q.write, Job: jobID("job-4"), Key: "report:44", Payload: []byte(`null`)})
	f.ApplyCommand(&JobClaim{Now: t0 + 23, Queue: q.id, Token: q.worker, Receipt: secret.ReceiptHash("r3"), VisibilitySeconds: 60})
	f.ApplyCommand(&SetNode{Now: t0 + 24, Node: NodeInfo{ID: "n3", HTTPAddr: "127.0.0.1:7090", RaftAddr: "127.0.0.1:7091"}})
	return f
}

// seal appends the snapshot checksum to body, so that the fuzzer's
// mutations reach the decoder behind the checksum.
func seal(body []byte) []byte {
	sum := sha256.Sum256(body)
	return append(bytes.Clone(body), sum[:]...)
}

// FuzzRestore restores arbitrary bytes as a snapshot, as they are and
// sealed with a valid checksum. Restoring never panics and fails only with
// ErrSnapshot; a restored state can be swept and read, and its own snapshot
// restores to the same bytes and state hash. A real snapshot restores to
// the state it was taken from.
func FuzzRestore(f *testing.F) {
	orig := seedFSM()
	snap := orig.SnapshotBytes()
	g := New()
	if err := g.Restore(&nopCloser{Reader: bytes.NewReader(snap)}); err != nil {
		f.Fatalf("restore of a real snapshot: %v", err)
	}
	if g.StateHash() != orig.StateHash() || g.StateHash() != sha256.Sum256(snap) {
		f.Fatal("a real snapshot restored to another state hash")
	}
	empty := New().SnapshotBytes()
	f.Add(snap)
	f.Add(snap[:len(snap)-sha256.Size]) // the body, sealed by the target
	f.Add(empty[:len(empty)-sha256.Size])
	f.Add(snap[:len(snap)/2])
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, seal(b)} {
			g := New()
			if err := g.Restore(&nopCloser{Reader: bytes.NewReader(in)}); err != nil {
				if !errors.Is(err, ErrSnapshot) {
					t.Fatalf("%x: error %v does not wrap ErrSnapshot", in, err)
				}
				continue
			}
			again := g.SnapshotBytes()
			h := New()
			if err := h.Restore(&nopCloser{Reader: bytes.NewReader(again)}); err != nil {
				t.Fatalf("%x restored, but its own snapshot %x does not: %v", in, again, err)
			}
			if h.StateHash() != g.StateHash() || !bytes.Equal(h.SnapshotBytes(), again) {
				t.Fatalf("%x restored, but its own snapshot restores to another state", in)
			}
			// The restored state serves reads and sweeps.
			_ = g.Settings()
			_ = g.Nodes()
			g.ApplyCommand(&Sweep{Now: g.st.clock + 1, Limit: 1 << 20})
			g.ApplyCommand(&Sweep{Now: 1 << 62, Limit: 1 << 20})
		}
	})
}
