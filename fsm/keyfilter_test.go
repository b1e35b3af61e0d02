package fsm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/holdfast/holdfast/internal/secret"
)

// TestKeyFilterBuild: a built filter answers lookups of keys never written
// without the store, and still finds every record; a build told to stop
// leaves none in use, and one that a restore overtook is dropped.
func TestKeyFilterBuild(t *testing.T) {
	h := newHarness(t)
	tinyCaches(h.f)
	owner := byte(1)
	acquire := func(i int) *LeaseResult {
		k := secret.OwnerTokenHash(fmt.Sprint("key-", i))
		return h.lease(&LeaseAcquire{Now: h.now, Lease: k, Owner: secret.Hash{owner}, TTLSeconds: 60})
	}
	for i := range 5000 {
		if r := acquire(i); r.Outcome != LeaseGranted {
			t.Fatalf("acquire %d: %v", i, r.Outcome)
		}
	}
	if !h.f.KeyFilterWanted() {
		t.Fatal("a state without a key filter does not want one")
	}
	if err := h.f.BuildKeyFilter(func() bool { return true }); !errors.Is(err, ErrBuildStopped) {
		t.Fatalf("a stopped build returned %v", err)
	}
	if !h.f.KeyFilterWanted() || h.f.st.filter != nil {
		t.Fatal("a stopped build left a filter in use")
	}
	if err := h.f.BuildKeyFilter(nil); err != nil {
		t.Fatal(err)
	}
	if h.f.KeyFilterWanted() || !h.f.KeyFilterBuilt() {
		t.Fatal("a finished build left no filter in use")
	}
	owner = 2
	for i := range 5000 {
		if r := acquire(i); r.Outcome != LeaseHeld {
			t.Fatalf("acquire %d again through the filter: %v, want it held", i, r.Outcome)
		}
	}
	for i := 5000; i < 5100; i++ { // new keys, after the build
		owner = 1
		acquire(i)
		owner = 2
		if r := acquire(i); r.Outcome != LeaseHeld {
			t.Fatalf("key %d, written after the build, was not found", i)
		}
	}

	// A restore replaces the state while a build reads the old one.
	h.f.st.filter = nil
	err := h.f.BuildKeyFilter(func() bool {
		g := snapshotRestore(t, h.f)
		h.f.mu.Lock()
		h.f.st = g.st
		h.f.mu.Unlock()
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	if h.f.st.filter != nil {
		t.Fatal("a build of a state a restore replaced was put in use")
	}
}
