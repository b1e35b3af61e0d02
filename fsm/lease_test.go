package fsm

import (
	"bytes"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/secret"
)

const (
	sec  = int64(1000)
	day  = 86400 * sec
	absT = t0 + day // absolute expiry of a lifecycle started at t0
)

// leaseStep is one operation in a lease scenario. at is the time offset from
// t0 at which it is applied.
type leaseStep struct {
	at     time.Duration
	op     string // acquire, renew, release, complete
	key    string
	fp     string
	owner  string
	ttl    int64
	result string
	want   LeaseResult
}

func runLeaseSteps(t *testing.T, h *harness, steps []leaseStep) {
	t.Helper()
	for i, s := range steps {
		h.now = t0 + s.at.Milliseconds()
		key := s.key
		if key == "" {
			key = "invoice:2026-09-05"
		}
		var got *LeaseResult
		switch s.op {
		case "acquire":
			got = h.acquire(key, s.fp, s.owner, s.ttl)
		case "renew":
			got = h.renew(key, s.owner, s.ttl)
		case "release":
			got = h.release(key, s.owner)
		case "complete":
			got = h.complete(key, s.owner, s.result)
		default:
			t.Fatalf("step %d: unknown op %q", i, s.op)
		}
		if got.Outcome != s.want.Outcome {
			t.Fatalf("step %d (%s at %v): outcome %v, want %v (%+v)", i, s.op, s.at, got.Outcome, s.want.Outcome, *got)
		}
		wantLease(t, got, s.want)
	}
}

func TestLeaseRules(t *testing.T) {
	held := func(fence uint64, at time.Duration, ttl int64) LeaseResult {
		now := t0 + at.Milliseconds()
		return LeaseResult{Outcome: LeaseGranted, FencingToken: fence, TTLSeconds: ttl, LeaseExpiresAt: now + ttl*sec, AbsoluteExpiresAt: absT}
	}
	cases := []struct {
		name  string
		steps []leaseStep
	}{
		{"first acquisition is granted with fence 1 and a 24h lifecycle", []leaseStep{
			{op: "acquire", fp: "charge-order-501", owner: "A", ttl: 60, want: held(1, 0, 60)},
		}},
		{"second caller sees held with retry-after and no owner", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: 17 * time.Second, op: "acquire", fp: "f", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseHeld, FencingToken: 1, RetryAfterSeconds: 43, LeaseExpiresAt: t0 + 60*sec, AbsoluteExpiresAt: absT}},
			{at: 59500 * time.Millisecond, op: "acquire", fp: "f", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseHeld, FencingToken: 1, RetryAfterSeconds: 1, LeaseExpiresAt: t0 + 60*sec, AbsoluteExpiresAt: absT}},
		}},
		{"the same owner again (a repeated request id) gets the same grant, unchanged", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: time.Second, op: "acquire", fp: "f", owner: "A", ttl: 120, want: LeaseResult{Outcome: LeaseGranted, FencingToken: 1, TTLSeconds: 59, LeaseExpiresAt: t0 + 60*sec, AbsoluteExpiresAt: absT}},
			{at: 2 * time.Second, op: "acquire", fp: "other", owner: "A", ttl: 60, want: LeaseResult{Outcome: LeaseConflict, AbsoluteExpiresAt: absT}},
			{at: 3 * time.Second, op: "acquire", fp: "f", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseHeld, FencingToken: 1, RetryAfterSeconds: 57, LeaseExpiresAt: t0 + 60*sec, AbsoluteExpiresAt: absT}},
			{at: 4 * time.Second, op: "release", owner: "A", want: LeaseResult{Outcome: LeaseReleased, FencingToken: 1, AbsoluteExpiresAt: absT}},
			{at: 5 * time.Second, op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(2, 5*time.Second, 60)},
		}},
		{"the same owner after its lease expired gets a new grant", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: 60 * time.Second, op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(2, 60*time.Second, 60)},
		}},
		{"renew keeps the fence and moves the expiry", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: 30 * time.Second, op: "renew", owner: "A", ttl: 120, want: LeaseResult{Outcome: LeaseRenewed, FencingToken: 1, TTLSeconds: 120, LeaseExpiresAt: t0 + 150*sec, AbsoluteExpiresAt: absT}},
			{at: 100 * time.Second, op: "acquire", fp: "f", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseHeld, FencingToken: 1, RetryAfterSeconds: 50, LeaseExpiresAt: t0 + 150*sec, AbsoluteExpiresAt: absT}},
		}},
		{"renew by another owner is lost", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{op: "renew", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseLost}},
		}},
		{"renew after expiry is lost", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 10, want: held(1, 0, 10)},
			{at: 10 * time.Second, op: "renew", owner: "A", ttl: 60, want: LeaseResult{Outcome: LeaseLost}},
		}},
		{"release frees the key at once; the next grant has a higher fence", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: time.Second, op: "release", owner: "A", want: LeaseResult{Outcome: LeaseReleased, FencingToken: 1, AbsoluteExpiresAt: absT}},
			{at: time.Second, op: "acquire", fp: "f", owner: "B", ttl: 60, want: held(2, time.Second, 60)},
			{at: 2 * time.Second, op: "release", owner: "A", want: LeaseResult{Outcome: LeaseLost}},
		}},
		{"complete stores the result; a matching acquire reuses it", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: 38 * time.Second, op: "complete", owner: "A", result: `{"receipt_id":4817}`, want: LeaseResult{Outcome: LeaseCompleted, FencingToken: 1, CompletedAt: t0 + 38*sec, AbsoluteExpiresAt: absT, Result: []byte(`{"receipt_id":4817}`)}},
			{at: time.Hour, op: "acquire", fp: "f", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseCompleted, FencingToken: 1, CompletedAt: t0 + 38*sec, AbsoluteExpiresAt: absT, Result: []byte(`{"receipt_id":4817}`)}},
			{at: time.Hour, op: "complete", owner: "A", result: `1`, want: LeaseResult{Outcome: LeaseLost}},
			{at: time.Hour, op: "release", owner: "A", want: LeaseResult{Outcome: LeaseLost}},
			{at: time.Hour, op: "renew", owner: "A", ttl: 60, want: LeaseResult{Outcome: LeaseLost}},
		}},
		{"another fingerprint conflicts while held, completed or free", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{op: "acquire", fp: "g", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseConflict, AbsoluteExpiresAt: absT}},
			{op: "release", owner: "A", want: LeaseResult{Outcome: LeaseReleased, FencingToken: 1, AbsoluteExpiresAt: absT}},
			{op: "acquire", fp: "g", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseConflict, AbsoluteExpiresAt: absT}},
			{op: "acquire", fp: "", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseConflict, AbsoluteExpiresAt: absT}},
		}},
		{"an expired lease is granted to the next caller with a higher fence; the old owner is lost", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: 60 * time.Second, op: "acquire", fp: "f", owner: "B", ttl: 60, want: held(2, 60*time.Second, 60)},
			{at: 61 * time.Second, op: "renew", owner: "A", ttl: 60, want: LeaseResult{Outcome: LeaseLost}},
			{at: 61 * time.Second, op: "complete", owner: "A", result: `{}`, want: LeaseResult{Outcome: LeaseLost}},
			{at: 61 * time.Second, op: "release", owner: "A", want: LeaseResult{Outcome: LeaseLost}},
			{at: 62 * time.Second, op: "complete", owner: "B", result: `{}`, want: LeaseResult{Outcome: LeaseCompleted, FencingToken: 2, CompletedAt: t0 + 62*sec, AbsoluteExpiresAt: absT, Result: []byte(`{}`)}},
		}},
		{"near the 24-hour boundary the ttl shrinks to the time left", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 86400, want: held(1, 0, 86400)},
			{at: 24*time.Hour - 30*time.Second, op: "renew", owner: "A", ttl: 120, want: LeaseResult{Outcome: LeaseRenewed, FencingToken: 1, TTLSeconds: 30, LeaseExpiresAt: absT, AbsoluteExpiresAt: absT}},
			{at: 24*time.Hour - 1500*time.Millisecond, op: "renew", owner: "A", ttl: 60, want: LeaseResult{Outcome: LeaseRenewed, FencingToken: 1, TTLSeconds: 2, LeaseExpiresAt: absT, AbsoluteExpiresAt: absT}},
			{at: 24 * time.Hour, op: "renew", owner: "A", ttl: 60, want: LeaseResult{Outcome: LeaseLost}},
		}},
		{"a grant late in the lifecycle is capped too", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: 24*time.Hour - 10*time.Second, op: "acquire", fp: "f", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseGranted, FencingToken: 2, TTLSeconds: 10, LeaseExpiresAt: absT, AbsoluteExpiresAt: absT}},
		}},
		{"after the absolute expiry a new lifecycle starts, with a new fingerprint binding and a higher fence", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{at: time.Second, op: "complete", owner: "A", result: `"done"`, want: LeaseResult{Outcome: LeaseCompleted, FencingToken: 1, CompletedAt: t0 + sec, AbsoluteExpiresAt: absT, Result: []byte(`"done"`)}},
			{at: 24 * time.Hour, op: "acquire", fp: "other", owner: "B", ttl: 60, want: LeaseResult{Outcome: LeaseGranted, FencingToken: 2, TTLSeconds: 60, LeaseExpiresAt: absT + 60*sec, AbsoluteExpiresAt: absT + day}},
		}},
		{"ttl out of range changes nothing", []leaseStep{
			{op: "acquire", fp: "f", owner: "A", ttl: 0, want: LeaseResult{Outcome: LeaseInvalid}},
			{op: "acquire", fp: "f", owner: "A", ttl: 86401, want: LeaseResult{Outcome: LeaseInvalid}},
			{op: "acquire", fp: "f", owner: "A", ttl: 1, want: held(1, 0, 1)},
			{op: "renew", owner: "A", ttl: 0, want: LeaseResult{Outcome: LeaseInvalid}},
		}},
		{"unknown key: renew, release and complete are lost", []leaseStep{
			{op: "renew", owner: "A", ttl: 60, want: LeaseResult{Outcome: LeaseLost}},
			{op: "release", owner: "A", want: LeaseResult{Outcome: LeaseLost}},
			{op: "complete", owner: "A", result: `{}`, want: LeaseResult{Outcome: LeaseLost}},
		}},
		{"keys are independent", []leaseStep{
			{op: "acquire", key: "k1", fp: "f", owner: "A", ttl: 60, want: held(1, 0, 60)},
			{op: "acquire", key: "k2", fp: "g", owner: "B", ttl: 60, want: held(2, 0, 60)},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runLeaseSteps(t, newHarness(t), tc.steps)
		})
	}
}

func TestLeaseInvalidChangesNothing(t *testing.T) {
	h := newHarness(t)
	h.acquire("k", "f", "A", 60)
	before := h.f.StateHash()
	for _, c := range []Command{
		&LeaseAcquire{Now: h.now, Lease: secret.LeaseID("ns_test", "x"), TTLSeconds: 0},
		&LeaseRenew{Now: h.now, Lease: secret.LeaseID("ns_test", "k"), Owner: secret.OwnerTokenHash("A"), TTLSeconds: 86401},
		&LeaseComplete{Now: h.now, Lease: secret.LeaseID("ns_test", "k"), Owner: secret.OwnerTokenHash("A"), Result: make([]byte, 32*1024+1)},
		&LeaseRenew{Now: h.now, Lease: secret.LeaseID("ns_test", "k"), Owner: secret.OwnerTokenHash("B"), TTLSeconds: 60},
	} {
		r := h.lease(c)
		if r.Outcome != LeaseInvalid && r.Outcome != LeaseLost {
			t.Fatalf("%T: outcome %v", c, r.Outcome)
		}
	}
	if h.f.StateHash() != before {
		t.Fatal("a refused command changed the state")
	}
}

func TestLeaseCleanupBySweep(t *testing.T) {
	h := newHarness(t)
	if _, ok := h.f.NextDeadline(); ok {
		t.Fatal("an empty state has a deadline")
	}
	h.acquire("k", "f", "A", 60)
	at, ok := h.f.NextDeadline()
	if !ok || at != absT {
		t.Fatalf("NextDeadline = %d,%v; want the absolute expiry %d", at, ok, absT)
	}
	h.now = absT - 1
	if r := h.sweep(100); r.LeasesRemoved != 0 || r.More {
		t.Fatalf("early sweep did work: %+v", r)
	}
	h.now = absT
	if r := h.sweep(100); r.LeasesRemoved != 1 {
		t.Fatalf("sweep at the absolute expiry: %+v", r)
	}
	if st := h.f.Stats(); st.Leases != 0 {
		t.Fatalf("lease still present after cleanup: %+v", st)
	}
	if _, ok := h.f.NextDeadline(); ok {
		t.Fatal("deadline left after cleanup")
	}
	// A new lifecycle after cleanup still gets a higher fencing token.
	if r := h.acquire("k", "f", "B", 60); r.Outcome != LeaseGranted || r.FencingToken != 2 {
		t.Fatalf("acquire after cleanup: %+v", *r)
	}
}

func TestSweepWorkIsBounded(t *testing.T) {
	h := newHarness(t)
	for i := 0; i < 10; i++ {
		h.acquire(string(rune('a'+i)), "f", "A", 60)
	}
	h.now = absT
	total := 0
	for i := 0; ; i++ {
		r := h.sweep(3)
		if r.LeasesRemoved > 3 {
			t.Fatalf("sweep removed %d leases with limit 3", r.LeasesRemoved)
		}
		total += r.LeasesRemoved
		if !r.More {
			break
		}
		if i > 10 {
			t.Fatal("sweep never finished")
		}
	}
	if total != 10 {
		t.Fatalf("swept %d leases, want 10", total)
	}
}

// TestFencingNeverResets drives grants through release, expiry, completion,
// cleanup and new lifecycles, with a snapshot and restore in the middle, and
// demands every token be greater than all before it.
func TestFencingNeverResets(t *testing.T) {
	h := newHarness(t)
	var last uint64
	grant := func(key, owner string) {
		t.Helper()
		r := h.acquire(key, "f", owner, 10)
		if r.Outcome != LeaseGranted {
			t.Fatalf("acquire %s by %s: %v", key, owner, r.Outcome)
		}
		if r.FencingToken <= last {
			t.Fatalf("fencing token %d is not greater than %d", r.FencingToken, last)
		}
		last = r.FencingToken
	}
	for round := 0; round < 3; round++ {
		grant("k", "A")
		if r := h.release("k", "A"); r.Outcome != LeaseReleased {
			t.Fatalf("release: %v", r.Outcome)
		}
		grant("k", "B")
		h.advance(11 * time.Second) // B's lease expires
		grant("k", "C")
		if r := h.complete("k", "C", `{}`); r.Outcome != LeaseCompleted {
			t.Fatalf("complete: %v", r.Outcome)
		}
		grant("other", "D")
		if round == 1 {
			h.f = snapshotRestore(t, h.f)
			if h.f.FencingCounter() != last {
				t.Fatalf("restored counter %d, want %d", h.f.FencingCounter(), last)
			}
		}
		h.advance(24 * time.Hour) // lifecycle ends
		for r := h.sweep(1000); r.More; r = h.sweep(1000) {
		}
		if st := h.f.Stats(); st.Leases != 0 {
			t.Fatalf("round %d: %d leases survived cleanup", round, st.Leases)
		}
	}
	if last != 12 {
		t.Fatalf("issued %d tokens, want 12", last)
	}
}

func TestClockNeverMovesBack(t *testing.T) {
	h := newHarness(t)
	h.acquire("k", "f", "A", 60)
	if h.f.Clock() != t0 {
		t.Fatalf("clock %d, want %d", h.f.Clock(), t0)
	}
	// A command stamped 10 minutes earlier (a new leader whose clock lags)
	// must not move the clock back nor revive expired decisions.
	h.now = t0 + 61*sec
	h.acquire("k2", "f", "A", 60)
	h.now = t0 - 10*60*sec
	r := h.acquire("k", "f", "B", 60)
	if h.f.Clock() != t0+61*sec {
		t.Fatalf("clock moved back to %d", h.f.Clock())
	}
	if r.Outcome != LeaseGranted || r.Now != t0+61*sec || r.LeaseExpiresAt != t0+121*sec {
		t.Fatalf("late-stamped acquire judged at the wrong time: %+v", *r)
	}
}

// TestReplacedRecordLeavesNoTrace acquires a key again after its lifecycle
// ended but before a sweep removed the record, which leaves a stale entry in
// the lease timers of this replica and none in a replica restored from a
// snapshot: both must sweep alike, step by step, the stale entry costing no
// work and no "more".
func TestReplacedRecordLeavesNoTrace(t *testing.T) {
	h := newHarness(t)
	h.acquire("a", "f", "A", 60)
	h.acquire("b", "f", "B", 60)
	h.now = absT
	if r := h.acquire("a", "f", "A2", 60); r.Outcome != LeaseGranted || r.AbsoluteExpiresAt != absT+day {
		t.Fatalf("acquire after the lifecycle, before the sweep: %+v", *r)
	}
	if at, ok := h.f.NextDeadline(); !ok || at > absT {
		t.Fatalf("NextDeadline = %d,%v; want a due one", at, ok)
	}
	restored := &harness{t: t, f: snapshotRestore(t, h.f), now: h.now, index: h.index}
	for step, want := range []SweepResult{
		{Now: absT, LeasesRemoved: 1},
		{Now: absT},
	} {
		for _, r := range []*harness{h, restored} {
			if got := r.sweep(1); *got != want {
				t.Fatalf("sweep %d: %+v, want %+v", step, *got, want)
			}
		}
	}
	if h.f.StateHash() != restored.f.StateHash() {
		t.Fatal("the replicas differ after the sweeps")
	}
	for _, r := range []*harness{h, restored} {
		if at, ok := r.f.NextDeadline(); !ok || at != absT+day {
			t.Fatalf("NextDeadline = %d,%v; want the new record's end %d", at, ok, absT+day)
		}
	}
	h.now = absT + day
	if got := h.sweep(10); got.LeasesRemoved != 1 || got.More {
		t.Fatalf("sweep at the new record's end: %+v", *got)
	}
}

// TestTimerKeysSortInTimerOrder: the timer index's keys sort as timers
// are handled, by time (negative ones too), then kind, then key.
func TestTimerKeysSortInTimerOrder(t *testing.T) {
	var timers []timer
	for _, at := range []int64{-5, 0, 1, 1 << 40} {
		for _, kind := range []timerKind{timerLease, timerClaim} {
			for _, a := range []byte{0, 7} {
				for _, b := range []byte{0, 9} {
					k := timerKey{kind: kind}
					k.a[31], k.b[0] = a, b
					timers = append(timers, timer{at: at, key: k})
				}
			}
		}
	}
	for i := 1; i < len(timers); i++ {
		prev, next := timerIndexKey(timers[i-1].at, timers[i-1].key), timerIndexKey(timers[i].at, timers[i].key)
		if bytes.Compare(prev, next) >= 0 {
			t.Fatalf("timer %+v sorts after %+v", timers[i-1], timers[i])
		}
		if got, ok := parseTimerIndexKey(next); !ok || got != timers[i] {
			t.Fatalf("key of %+v parses as %+v, %v", timers[i], got, ok)
		}
	}
}

// TestFenceFloor: a floor raises the fencing counter, never lowers it, and
// the next grant is above it.
func TestFenceFloor(t *testing.T) {
	f := New()
	grant := func(owner string) *LeaseResult {
		return f.ApplyCommand(&LeaseAcquire{Now: t0, Lease: secret.LeaseID("ns", owner), Fingerprint: secret.FingerprintHash("ns", owner, ""),
			Owner: secret.OwnerTokenHash(owner), TTLSeconds: 60}).(*LeaseResult)
	}
	if r := grant("a"); r.FencingToken != 1 {
		t.Fatalf("first grant %d", r.FencingToken)
	}
	for _, c := range []struct {
		floor, counter uint64
		raised         bool
	}{{1000, 1000, true}, {10, 1000, false}, {1000, 1000, false}, {5000, 5000, true}} {
		r := f.ApplyCommand(&FenceFloor{Now: t0, Floor: c.floor}).(*FenceFloorResult)
		if r.Counter != c.counter || r.Raised != c.raised || f.FencingCounter() != c.counter {
			t.Fatalf("floor %d: %+v, counter %d; want %d raised %v", c.floor, *r, f.FencingCounter(), c.counter, c.raised)
		}
	}
	if r := grant("b"); r.FencingToken != 5001 {
		t.Fatalf("grant after the floor: %d, want 5001", r.FencingToken)
	}
	if err := (&FenceFloor{Floor: MaxFencingToken}).Valid(); err == nil {
		t.Fatal("a floor that leaves no room below 2^53 was accepted")
	}
	if err := (&FenceFloor{Floor: 1 << 51}).Valid(); err != nil {
		t.Fatalf("floor 2^51: %v", err)
	}
}
