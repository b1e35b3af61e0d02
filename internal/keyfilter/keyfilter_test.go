package keyfilter

import (
	"encoding/binary"
	"sync"
	"testing"
)

func key(prefix byte, i int) []byte {
	k := []byte{prefix, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint64(k[1:], uint64(i))
	return k
}

// TestNoKeyAddedIsEverAbsent: the one promise a state machine relies on.
func TestNoKeyAddedIsEverAbsent(t *testing.T) {
	f := New(100_000)
	for i := range 100_000 {
		f.Add(key('l', i))
	}
	for i := range 100_000 {
		if !f.MayContain(key('l', i)) {
			t.Fatalf("key %d was added but the filter says absent", i)
		}
	}
	if f.Full() {
		t.Fatal("a filter at its capacity says it is full")
	}
	f.Add(key('q', 0))
	if !f.Full() {
		t.Fatal("a filter past its capacity does not say so")
	}
}

// TestFalsePositivesAtCapacity: keys never added (sequential ones, as ids
// and times are, and another table's prefix) are mostly answered absent.
func TestFalsePositivesAtCapacity(t *testing.T) {
	const n = 200_000
	f := New(n)
	for i := range n {
		f.Add(key('l', i))
	}
	fp := 0
	for i := range n {
		if f.MayContain(key('l', n+i)) {
			fp++
		}
		if f.MayContain(key('q', i)) {
			fp++
		}
	}
	if rate := float64(fp) / (2 * n); rate > 0.03 {
		t.Fatalf("false positive rate %.4f at capacity, want at most 0.03", rate)
	}
}

// TestConcurrentAddsAreAllKept: a filter being built from a store scan
// takes the writes of commits at the same time.
func TestConcurrentAddsAreAllKept(t *testing.T) {
	f := New(40_000)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10_000 {
				f.Add(key(byte(w), i))
			}
		}()
	}
	wg.Wait()
	for w := range 4 {
		for i := range 10_000 {
			if !f.MayContain(key(byte(w), i)) {
				t.Fatalf("key %d/%d lost among concurrent adds", w, i)
			}
		}
	}
	if f.Added() != 40_000 {
		t.Fatalf("added = %d, want 40000", f.Added())
	}
}
