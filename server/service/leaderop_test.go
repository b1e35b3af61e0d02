package service

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
)

func i64(v int64) *int64 { return &v }

func sampleOps() []*leaderOp {
	h := func(b byte) (x secret.Hash) { x[0], x[31] = b, b; return x }
	id := func(b byte) (x secret.ID) { x[0], x[15] = b, b; return x }
	return []*leaderOp{
		{cmd: &fsm.LeaseAcquire{Lease: h(1), Fingerprint: h(2), Owner: h(3)}, ttl: i64(30)},
		{cmd: &fsm.LeaseAcquire{Lease: h(1), Fingerprint: h(2), Owner: h(3)}},
		{cmd: &fsm.LeaseRenew{Lease: h(1), Owner: h(3)}, ttl: i64(-5)},
		{cmd: &fsm.LeaseRelease{Lease: h(1), Owner: h(3)}},
		{cmd: &fsm.LeaseComplete{Lease: h(1), Owner: h(3), Result: []byte(`{"a":1}`)}},
		{cmd: &fsm.QueueCreate{Queue: id(4), WriteToken: h(5), WorkerToken: h(6), ReadToken: h(7), Client: h(8)}},
		{cmd: &fsm.JobEnqueue{Queue: id(4), Token: h(5), Job: id(9), Key: "k", Payload: []byte(`null`)}},
		{cmd: &fsm.JobClaim{Queue: id(4), Token: h(6), Receipt: h(10)}, visibility: i64(60)},
		{cmd: &fsm.JobAck{Queue: id(4), Token: h(6), Job: id(9), Receipt: h(10)}},
		{cmd: &fsm.JobRelease{Queue: id(4), Token: h(6), Job: id(9), Receipt: h(10)}},
		{cmd: &fsm.JobRenew{Queue: id(4), Token: h(6), Job: id(9), Receipt: h(10)}, visibility: i64(120)},
		{read: &queueRead{queue: id(4), token: h(7)}},
		{read: &queueRead{queue: id(4), token: h(7), job: id(9), withJob: true}},
	}
}

func TestLeaderOpsRoundTrip(t *testing.T) {
	for i, op := range sampleOps() {
		got, err := decodeOp(op.encode(nil))
		if err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, op) {
			t.Fatalf("op %d: decoded %+v, want %+v", i, got, op)
		}
	}
}

func TestDecodeOpRefusesWhatNoClientCanAsk(t *testing.T) {
	for name, op := range map[string]*leaderOp{
		"sweep":    {cmd: &fsm.Sweep{Now: 1, Limit: 10}},
		"settings": {cmd: &fsm.SetSettings{Now: 1}},
		"node":     {cmd: &fsm.SetNode{Now: 1, Node: fsm.NodeInfo{ID: "x"}}},
	} {
		if _, err := decodeOp(op.encode(nil)); !errors.Is(err, errOpWire) {
			t.Errorf("%s: decoded (%v), want a refusal", name, err)
		}
	}
	good := sampleOps()[0].encode(nil)
	for name, b := range map[string][]byte{
		"empty":         nil,
		"other version": append([]byte{9}, good[1:]...),
		"unknown kind":  {opWireVersion, 77},
		"truncated":     good[:len(good)-3],
		"trailing":      append(append([]byte(nil), good...), 0),
	} {
		if _, err := decodeOp(b); !errors.Is(err, errOpWire) {
			t.Errorf("%s: decoded (%v), want a refusal", name, err)
		}
	}
}

func TestLeaderResultsRoundTrip(t *testing.T) {
	var qid, jid secret.ID
	qid[3], jid[5] = 7, 9
	results := []opResult{
		{lease: &fsm.LeaseResult{Outcome: fsm.LeaseGranted, Now: 5, FencingToken: 1 << 40, TTLSeconds: 60, LeaseExpiresAt: 65000, AbsoluteExpiresAt: 86405000}},
		{lease: &fsm.LeaseResult{Outcome: fsm.LeaseCompleted, CompletedAt: 9, Result: []byte(`{"r":true}`)}},
		{queue: &fsm.QueueResult{Outcome: fsm.QueueEmpty, Now: 3, Queue: fsm.QueueView{ID: qid, CreatedAt: 1, ExpiresAt: 2, Counts: fsm.Counts{Pending: 1, Claimed: 2, Completed: 3, Failed: 4, Total: 10}}}},
		{queue: &fsm.QueueResult{Outcome: fsm.JobClaimed, Job: &fsm.JobView{ID: jid, Key: "k", Payload: []byte(`[1]`), Status: fsm.JobClaimedStatus, Attempts: 2, CreatedAt: 1, UpdatedAt: 2, VisibleAt: 3, QueueExpiresAt: 5}}},
		{queue: &fsm.QueueResult{Outcome: fsm.ReceiptRejected, Reason: fsm.ReceiptExpired, RetryAfterSeconds: 4}},
		{lease: &fsm.LeaseResult{Outcome: fsm.LeaseLimitReached, Now: 6, Limit: 2_000_000}},
		{queue: &fsm.QueueResult{Outcome: fsm.QueueLimitReached, Now: 7, Limit: 100_000}},
	}
	for i, r := range results {
		b, err := r.encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeResult(b)
		if err != nil || !reflect.DeepEqual(got, r) {
			t.Fatalf("result %d: %+v, %v; want %+v", i, got, err, r)
		}
	}
	ref := NotApplied("no leader")
	ref.Challenge = true
	b, err := opResult{refusal: ref}.encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeResult(b)
	if err != nil || got.refusal == nil {
		t.Fatalf("refusal: %+v %v", got, err)
	}
	want, _ := ref.Body()
	gb, _ := got.refusal.Body()
	if linkCode(got.refusal.Kind) != http.StatusServiceUnavailable || got.refusal.RetryAfter != 1 || !got.refusal.Challenge || string(gb) != string(want) {
		t.Fatalf("refusal decoded as %+v %s, want %+v %s", got.refusal, gb, ref, want)
	}
	if _, err := (opResult{}).encode(nil); err == nil {
		t.Fatal("an empty result was encoded")
	}
}

// FuzzDecodeLinkFrames: whatever bytes arrive on a peer link decode to an
// op or result, or are refused; never a panic.
func FuzzDecodeLinkFrames(f *testing.F) {
	for _, op := range sampleOps() {
		f.Add(op.encode(nil))
	}
	b, _ := opResult{lease: &fsm.LeaseResult{Outcome: fsm.LeaseHeld, RetryAfterSeconds: 3}}.encode(nil)
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		if op, err := decodeOp(in); err == nil {
			if op.cmd == nil && op.read == nil {
				t.Fatal("an op with neither a command nor a read")
			}
			if again, err := decodeOp(op.encode(nil)); err != nil || !reflect.DeepEqual(again, op) {
				t.Fatalf("re-encoded op does not round-trip: %v", err)
			}
		}
		if r, err := decodeResult(in); err == nil {
			if _, err := r.encode(nil); err != nil {
				t.Fatalf("a decoded result does not encode: %v", err)
			}
		}
	})
}

// TestALinkCallNotRunIsRefusedNotApplied: the answer to a forwarded call the
// link did not run (its queue full, or cancelled while waiting) tells the
// follower that nothing changed and when to retry.
func TestALinkCallNotRunIsRefusedNotApplied(t *testing.T) {
	res, err := decodeResult(refuseLinkCall(context.Background(), []byte("op"), nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.refusal == nil || linkCode(res.refusal.Kind) != http.StatusServiceUnavailable || res.refusal.RetryAfter < 1 ||
		!strings.Contains(string(res.refusal.body), `"outcome":"not_applied"`) {
		t.Fatalf("refusal of a call not run: %+v", res.refusal)
	}
}
