package fsm

import (
	"bytes"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/secret"
)

func (h *harness) checkpoint(key, owner, value string) *LeaseResult {
	h.t.Helper()
	return h.lease(&LeaseCheckpoint{Now: h.now, Lease: secret.LeaseID("ns_test", key), Owner: secret.OwnerTokenHash(owner), Checkpoint: []byte(value)})
}

// TestCheckpointOutlivesItsHolder: the holder's checkpoint is stored and
// answered with its fence; every later grant in the lifecycle returns the
// last one with the fence that wrote it and when; an owner that no longer
// holds the key stores nothing; complete replaces it with the result.
func TestCheckpointOutlivesItsHolder(t *testing.T) {
	h := slotsHarness(t)
	if r := h.checkpoint("job", "a", `{"step":0}`); r.Outcome != LeaseLost {
		t.Fatalf("checkpoint of an unknown key: %+v", *r)
	}
	g := h.acquire("job", "", "a", 10)
	if g.Checkpoint != nil {
		t.Fatalf("a first grant has a checkpoint: %+v", *g)
	}
	h.advance(time.Second)
	r := h.checkpoint("job", "a", `{"step":1}`)
	if r.Outcome != LeaseCheckpointed || r.FencingToken != g.FencingToken || r.Checkpoint.Fence != g.FencingToken || r.Checkpoint.At != h.now {
		t.Fatalf("checkpoint by the holder: %+v", *r)
	}
	at := h.now
	// a's lease ends; b acquires and gets a's progress.
	h.now = t0 + 11*sec
	g2 := h.acquire("job", "", "b", 10)
	if g2.Outcome != LeaseGranted || g2.Checkpoint == nil || !bytes.Equal(g2.Checkpoint.Value, []byte(`{"step":1}`)) || g2.Checkpoint.Fence != g.FencingToken || g2.Checkpoint.At != at {
		t.Fatalf("the next grant: %+v", *g2)
	}
	// a wakes up and writes with its old owner token: refused, unchanged.
	before := h.f.StateHash()
	if r := h.checkpoint("job", "a", `{"step":99}`); r.Outcome != LeaseLost {
		t.Fatalf("checkpoint by a lost owner: %+v", *r)
	}
	if h.f.StateHash() != before {
		t.Fatal("a refused checkpoint changed the state")
	}
	h.checkpoint("job", "b", `{"step":2}`)
	h.release("job", "b")
	g3 := h.acquire("job", "", "c", 10)
	if g3.Checkpoint == nil || !bytes.Equal(g3.Checkpoint.Value, []byte(`{"step":2}`)) || g3.Checkpoint.Fence != g2.FencingToken {
		t.Fatalf("after a release: %+v", *g3)
	}
	// It survives a snapshot.
	restored := snapshotRestore(t, h.f)
	h = &harness{t: t, f: restored, now: h.now, index: h.index}
	if r := h.complete("job", "c", `{"done":true}`); r.Outcome != LeaseCompleted {
		t.Fatalf("complete: %+v", *r)
	}
	if r := h.acquire("job", "", "d", 10); r.Outcome != LeaseCompleted || r.Checkpoint != nil || string(r.Result) != `{"done":true}` {
		t.Fatalf("after complete: %+v", *r)
	}
	if r := h.checkpoint("job", "c", `{"step":3}`); r.Outcome != LeaseLost {
		t.Fatalf("checkpoint after complete: %+v", *r)
	}
}

// TestCheckpointRules: checkpoints are for single-slot keys, bounded by
// max_result_bytes, and need level 2.
func TestCheckpointRules(t *testing.T) {
	h := newHarness(t)
	h.acquire("job", "", "a", 60)
	if r := h.checkpoint("job", "a", `1`); r.Outcome != LeaseInvalid {
		t.Fatalf("checkpoint at level 0: %+v", *r)
	}
	h = slotsHarness(t)
	h.acquireSlots("multi", "a", 2, 60)
	if r := h.checkpoint("multi", "a", `1`); r.Outcome != LeaseSlotsRefused || r.Slots != 2 {
		t.Fatalf("checkpoint on a 2-slot key: %+v", *r)
	}
	h.acquire("job", "", "a", 60)
	big := bytes.Repeat([]byte("1"), int(DefaultSettings().MaxResultBytes)+1)
	if r := h.lease(&LeaseCheckpoint{Now: h.now, Lease: secret.LeaseID("ns_test", "job"), Owner: secret.OwnerTokenHash("a"), Checkpoint: big}); r.Outcome != LeaseInvalid {
		t.Fatalf("a checkpoint over max_result_bytes: %+v", *r)
	}
}
