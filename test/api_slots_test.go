//go:build unix

package test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/test/harness"
)

// awaitLevel waits, bounded, until n reports the cluster at level.
func awaitLevel(t *testing.T, n *harness.Node, level uint32) {
	t.Helper()
	deadline := time.Now().Add(40 * time.Second)
	for {
		var st levelStatus
		if _, err := n.GetJSON("/cluster/status", &st); err == nil && st.ActiveLevel >= level {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not reach level %d", level)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkSlotGrant checks a 201 acquire of a multi-slot key: the grant's
// fields, and slots and held.
func checkSlotGrant(t *testing.T, what string, a *answer, slots, held int64) (owner string, fence int64) {
	t.Helper()
	expectStatus(t, what, a, http.StatusCreated)
	fields(t, what, a.m, []string{"ok", "status", "owner_token", "ttl_seconds", "fencing_token", "lease_expires_at_timestamp",
		"lease_expires_at", "absolute_expires_at_timestamp", "absolute_expires_at", "slots", "held"}, nil)
	if s, h := integer(t, what, a.m, "slots"), integer(t, what, a.m, "held"); s != slots || h != held {
		t.Errorf("%s: slots %d held %d, want %d and %d", what, s, h, slots, held)
	}
	owner = str(t, what, a.m, "owner_token")
	checkOwnerToken(t, what, owner)
	return owner, integer(t, what, a.m, "fencing_token")
}

// checkSlotsConflict checks a 409 conflict naming slots.
func checkSlotsConflict(t *testing.T, what string, a *answer, slots int64, optional ...string) {
	t.Helper()
	if !expectError(t, what, a, http.StatusConflict, "slots", append([]string{"status", "slots"}, optional...)) {
		return
	}
	if s := str(t, what, a.m, "status"); s != "conflict" {
		t.Errorf("%s: status %q, want conflict", what, s)
	}
	if got := integer(t, what, a.m, "slots"); got != slots {
		t.Errorf("%s: slots %d, want %d", what, got, slots)
	}
}

// leaseSlots: a key acquired with slots N has up to N owners at once,
// each with its own owner token and a fencing token from the one counter;
// the next acquire is refused held (or waits for the next free slot);
// another count is a conflict naming slots; renew and release act on the
// caller's slot; complete is refused and changes nothing.
func leaseSlots(t *testing.T, e *apiEnv, n *harness.Node) {
	awaitLevel(t, n, 2)
	ns := e.newNamespace(t, n)
	key := "crawl:" + randHex(t, 8)
	acquire := func(extra map[string]any) call {
		b := map[string]any{"namespace": ns, "key": key, "ttl_seconds": 300}
		for k, v := range extra {
			b[k] = v
		}
		return post("/lease", b)
	}
	var owners []string
	var fences []int64
	var last int64
	for i := range 3 {
		o, f := checkSlotGrant(t, fmt.Sprintf("slot %d", i+1), e.do(t, n, acquire(map[string]any{"slots": 3})), 3, int64(i+1))
		if f <= last {
			t.Errorf("slot %d: fencing_token %d, not above %d", i+1, f, last)
		}
		owners, fences, last = append(owners, o), append(fences, f), f
	}
	full := e.do(t, n, acquire(map[string]any{"slots": 3}))
	if expectError(t, "a fourth owner", full, http.StatusConflict, "", []string{"status", "retry_after_seconds", "fencing_token",
		"lease_expires_at", "absolute_expires_at", "lease_expires_at_timestamp", "absolute_expires_at_timestamp", "slots", "held"}) {
		if s, h := integer(t, "fourth", full.m, "slots"), integer(t, "fourth", full.m, "held"); s != 3 || h != 3 || str(t, "fourth", full.m, "status") != "held" {
			t.Errorf("a fourth owner: %s", full)
		}
		expectRetryAfter(t, "a fourth owner", full)
	}
	for _, other := range []map[string]any{{}, {"slots": 1}, {"slots": 2}} {
		checkSlotsConflict(t, fmt.Sprintf("acquire with %v", other), e.do(t, n, acquire(other)), 3, "absolute_expires_at", "absolute_expires_at_timestamp")
	}
	owner := func(i int, extra map[string]any) map[string]any {
		b := map[string]any{"namespace": ns, "key": key, "owner_token": owners[i]}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	checkSlotsConflict(t, "complete on a 3-slot key", e.do(t, n, post("/lease/complete", owner(0, map[string]any{"result": map[string]any{"ok": true}}))), 3)
	r := e.do(t, n, post("/lease/renew", owner(1, map[string]any{"ttl_seconds": 120})))
	expectStatus(t, "renew a slot", r, http.StatusOK)
	if integer(t, "renew", r.m, "fencing_token") != fences[1] || integer(t, "renew", r.m, "ttl_seconds") != 120 || integer(t, "renew", r.m, "held") != 3 {
		t.Errorf("renew of slot 2: %s", r)
	}
	rel := e.do(t, n, post("/lease/release", owner(0, nil)))
	expectStatus(t, "release a slot", rel, http.StatusOK)
	fields(t, "release a slot", rel.m, []string{"ok", "status", "fencing_token", "slots", "held"}, nil)
	if integer(t, "release", rel.m, "fencing_token") != fences[0] || integer(t, "release", rel.m, "held") != 2 {
		t.Errorf("release of slot 1 (after a refused complete, so still held): %s", rel)
	}
	checkLost(t, "release the same slot again", e.do(t, n, post("/lease/release", owner(0, nil))))
	o, f := checkSlotGrant(t, "the freed slot", e.do(t, n, acquire(map[string]any{"slots": 3})), 3, 3)
	if f <= last {
		t.Errorf("the freed slot: fencing_token %d, not above %d", f, last)
	}
	owners[0], fences[0], last = o, f, f

	// A blocking acquire gets the next slot a release frees.
	done := make(chan *answer, 1)
	go func() {
		a, err := e.trySend(t, nil, n, acquire(map[string]any{"slots": 3, "wait_seconds": 20}))
		if err != nil {
			t.Errorf("blocking acquire: %v", err)
		}
		done <- a
	}()
	time.Sleep(300 * time.Millisecond)
	rel = e.do(t, n, post("/lease/release", owner(2, nil)))
	if expectStatus(t, "release for the waiter", rel, http.StatusOK); integer(t, "release for the waiter", rel.m, "fencing_token") != fences[2] {
		t.Errorf("release of slot 3: %s", rel)
	}
	select {
	case a := <-done:
		if a != nil {
			if _, f := checkSlotGrant(t, "the waiter", a, 3, 3); f <= last {
				t.Errorf("the waiter: fencing_token %d, not above %d", f, last)
			}
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not get the freed slot")
	}

	single := "single:" + randHex(t, 8)
	expectStatus(t, "a single-slot key", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": single})), http.StatusCreated)
	checkSlotsConflict(t, "slots 2 on a single-slot key", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": single, "slots": 2})), 1,
		"absolute_expires_at", "absolute_expires_at_timestamp")
	for _, bad := range []any{0, fsm.MaxSlots + 1, -1, "3", 2.5} {
		expectError(t, fmt.Sprintf("slots %v", bad), e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": "bad:" + randHex(t, 4), "slots": bad})),
			http.StatusBadRequest, "slots", nil)
	}
}

// leaseCheckpoints: the holder's checkpoint is stored (redacted) and every
// later grant of the key returns it with the fence that wrote it; an owner
// token that no longer holds the key stores nothing; complete replaces it;
// multi-slot keys refuse it; bad bodies are refused naming the field.
func leaseCheckpoints(t *testing.T, e *apiEnv, n *harness.Node) {
	awaitLevel(t, n, 2)
	ns := e.newNamespace(t, n)
	key := "resume:" + randHex(t, 8)
	acquire := map[string]any{"namespace": ns, "key": key, "ttl_seconds": 2}
	g1 := checkGranted(t, "first grant", e.do(t, n, post("/lease", acquire)), 2)
	owner := func(tok string, cp any) map[string]any {
		return map[string]any{"namespace": ns, "key": key, "owner_token": tok, "checkpoint": cp}
	}
	a := e.do(t, n, post("/lease/checkpoint", owner(g1.owner, map[string]any{"step": 1, "api_key": "sk-live-1"})))
	expectStatus(t, "checkpoint", a, http.StatusOK)
	fields(t, "checkpoint", a.m, []string{"ok", "status", "fencing_token", "checkpoint_at", "checkpoint_at_timestamp"}, nil)
	if str(t, "checkpoint", a.m, "status") != "checkpointed" || integer(t, "checkpoint", a.m, "fencing_token") != g1.fence {
		t.Errorf("checkpoint: %s", a)
	}
	cpAt := timePair(t, "checkpoint", a.m, "checkpoint_at", "checkpoint_at_timestamp")
	// The lease expires; the next grant carries the holder's progress.
	time.Sleep(2500 * time.Millisecond)
	g2 := e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key, "ttl_seconds": 60}))
	expectStatus(t, "the next grant", g2, http.StatusCreated)
	fields(t, "the next grant", g2.m, []string{"ok", "status", "owner_token", "ttl_seconds", "fencing_token", "lease_expires_at_timestamp",
		"lease_expires_at", "absolute_expires_at_timestamp", "absolute_expires_at", "checkpoint", "checkpoint_fencing_token", "checkpoint_at", "checkpoint_at_timestamp"}, nil)
	if got := string(rawField(t, "the next grant", g2, "checkpoint")); got != `{"api_key":"[redacted]","step":1}` {
		t.Errorf("the next grant's checkpoint %s, want the redacted progress", got)
	}
	if integer(t, "next", g2.m, "checkpoint_fencing_token") != g1.fence || timePair(t, "next", g2.m, "checkpoint_at", "checkpoint_at_timestamp") != cpAt {
		t.Errorf("the next grant: %s", g2)
	}
	owner2 := str(t, "next", g2.m, "owner_token")
	// The paused first holder wakes up: its write is refused, nothing stored.
	checkLost(t, "checkpoint by the lost holder", e.do(t, n, post("/lease/checkpoint", owner(g1.owner, map[string]any{"step": 99}))))
	expectStatus(t, "checkpoint by the new holder", e.do(t, n, post("/lease/checkpoint", owner(owner2, []any{2, "b"}))), http.StatusOK)
	checkReleased(t, "release", e.do(t, n, post("/lease/release", map[string]any{"namespace": ns, "key": key, "owner_token": owner2})), integer(t, "next", g2.m, "fencing_token"))
	g3 := e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key}))
	if got := string(rawField(t, "third grant", g3, "checkpoint")); got != `[2,"b"]` {
		t.Errorf("the third grant's checkpoint %s, want the second holder's", got)
	}
	owner3 := str(t, "third", g3.m, "owner_token")
	for _, bad := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"no checkpoint", map[string]any{"namespace": ns, "key": key, "owner_token": owner3}, "checkpoint"},
		{"with ttl_seconds", map[string]any{"namespace": ns, "key": key, "owner_token": owner3, "checkpoint": 1, "ttl_seconds": 5}, "body"},
	} {
		expectError(t, bad.name, e.do(t, n, post("/lease/checkpoint", bad.body)), http.StatusBadRequest, bad.field, nil)
	}
	expectError(t, "checkpoint on renew", e.do(t, n, post("/lease/renew", map[string]any{"namespace": ns, "key": key, "owner_token": owner3, "checkpoint": 1})),
		http.StatusBadRequest, "checkpoint", nil)
	expectError(t, "a checkpoint over 32 KB", e.do(t, n, post("/lease/checkpoint", owner(owner3, strings.Repeat("x", 33000)))),
		http.StatusRequestEntityTooLarge, "checkpoint", nil)
	done := e.do(t, n, post("/lease/complete", map[string]any{"namespace": ns, "key": key, "owner_token": owner3, "result": "done"}))
	expectStatus(t, "complete", done, http.StatusOK)
	if a := e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": key})); a.Status != http.StatusOK || a.has("checkpoint") {
		t.Errorf("acquire after complete: %s, want the result without a checkpoint", a)
	}
	multi := "multi:" + randHex(t, 8)
	o, _ := checkSlotGrant(t, "a 2-slot key", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": multi, "slots": 2})), 2, 1)
	checkSlotsConflict(t, "checkpoint on a 2-slot key", e.do(t, n, post("/lease/checkpoint", map[string]any{"namespace": ns, "key": multi, "owner_token": o, "checkpoint": 1})), 2)
}
