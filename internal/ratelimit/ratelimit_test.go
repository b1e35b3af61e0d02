package ratelimit

import (
	"testing"
	"time"
)

func TestBurstThenRate(t *testing.T) {
	l := New(2, 3)
	now := time.Unix(1000, 0)
	for i := range 3 {
		if ok, _ := l.Allow("a", now); !ok {
			t.Fatalf("request %d of a burst of 3 refused", i+1)
		}
	}
	ok, wait := l.Allow("a", now)
	if ok || wait != 1 {
		t.Fatalf("a fourth at once: ok %v wait %d, want refused, 1 s", ok, wait)
	}
	if ok, _ := l.Allow("b", now); !ok {
		t.Fatal("another address shares the first one's bucket")
	}
	if ok, _ := l.Allow("a", now.Add(500*time.Millisecond)); !ok {
		t.Fatal("no token after half a second at 2 a second")
	}
	if !l.Limits() || New(0, 0).Limits() {
		t.Fatal("Limits does not follow the rate")
	}
}

// A refunded token leaves the bucket as if Allow had not run: compared
// with a twin that saw only the requests that were not refunded.
func TestRefundIsExact(t *testing.T) {
	l, twin := New(1, 4), New(1, 4)
	start := time.Unix(1000, 0)
	steps := []struct {
		at     time.Duration
		refund bool
	}{{0, false}, {0, true}, {100 * time.Millisecond, false}, {time.Second, true}, {3 * time.Second, true}, {3 * time.Second, false}, {3 * time.Second, false}}
	for i, st := range steps {
		now := start.Add(st.at)
		okL, _ := l.Allow("a", now)
		if st.refund {
			if okL {
				l.Refund("a")
			}
			continue
		}
		okT, _ := twin.Allow("a", now)
		if okL != okT {
			t.Fatalf("step %d: %v with refunds, %v without the refunded requests", i, okL, okT)
		}
	}
	for i := range 10 {
		now := start.Add(3 * time.Second)
		okL, waitL := l.Allow("a", now)
		okT, waitT := twin.Allow("a", now)
		if okL != okT || waitL != waitT {
			t.Fatalf("drain %d: %v/%d with refunds, %v/%d without", i, okL, waitL, okT, waitT)
		}
	}
}
