package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/httpfront"
)

func TestCallDeadlineExpires(t *testing.T) {
	var d callDeadline
	ctx, end := d.begin(20 * time.Millisecond)
	defer end()
	if at, ok := ctx.Deadline(); !ok || time.Until(at) > 20*time.Millisecond {
		t.Fatalf("deadline %v %v, want within 20ms", at, ok)
	}
	if ctx.Err() != nil {
		t.Fatalf("err %v before the deadline", ctx.Err())
	}
	waitDeadlineExceeded(t, ctx)
}

// waitDeadlineExceeded waits for ctx, whose deadline is 20ms away, to end
// with context.DeadlineExceeded.
func waitDeadlineExceeded(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("done not closed 5s after a 20ms deadline")
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("err %v, want deadline exceeded", ctx.Err())
	}
}

func TestCallDeadlineEndedCallLeavesTheNextAlone(t *testing.T) {
	var d callDeadline
	ctx, end := d.begin(time.Hour)
	first := ctx.Done()
	end()
	if ctx.Err() != nil {
		t.Fatalf("err %v after an ended call", ctx.Err())
	}
	ctx, end = d.begin(time.Hour)
	defer end()
	if ctx.Done() != first {
		t.Fatal("an ended call's open channel was not reused")
	}
	// The timer of the call before, firing late, finds this call's
	// deadline ahead.
	d.expire()
	select {
	case <-ctx.Done():
		t.Fatal("a late timer ended the next call")
	default:
	}
	if ctx.Err() != nil {
		t.Fatalf("err %v", ctx.Err())
	}
}

func TestCallDeadlineAfterExpiryGivesANewChannel(t *testing.T) {
	var d callDeadline
	ctx, end := d.begin(time.Millisecond)
	<-ctx.Done()
	end()
	closed := ctx.Done()
	ctx, end = d.begin(time.Hour)
	defer end()
	if ctx.Done() == closed {
		t.Fatal("a closed channel was reused")
	}
	if ctx.Err() != nil {
		t.Fatalf("err %v on a new call", ctx.Err())
	}
	select {
	case <-ctx.Done():
		t.Fatal("the new call is done at once")
	default:
	}
}

// A context derived from a call's behaves as one derived from
// context.WithTimeout's: cancelled by its own cancel, or when the call's
// deadline passes.
func TestCallDeadlineDerived(t *testing.T) {
	var d callDeadline
	ctx, end := d.begin(20 * time.Millisecond)
	defer end()
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	waitDeadlineExceeded(t, child)
}

// A front call without a caller's timeout is bounded by its connection's
// reused deadline, one with X-Holdfast-Timeout by a context of its own;
// both end at the timeout asked for.
func TestFrontCallBounded(t *testing.T) {
	fc := &frontConn{}
	c := &frontCall{fc: fc, r: &httpfront.Request{}, ctx: context.Background()}
	ctx, end := c.Bounded(time.Hour)
	if ctx != context.Context(&fc.bound) {
		t.Fatal("a call without a caller's timeout does not use the connection's deadline")
	}
	if at, ok := ctx.Deadline(); !ok || time.Until(at) < 59*time.Minute || time.Until(at) > time.Hour {
		t.Fatalf("deadline %v %v, want an hour from now", at, ok)
	}
	end()
	ctx, end = c.Bounded(20 * time.Millisecond)
	waitDeadlineExceeded(t, ctx)
	end()

	c.timed = true
	ctx, end = c.Bounded(20 * time.Millisecond)
	defer end()
	if ctx == context.Context(&fc.bound) {
		t.Fatal("a call with a caller's timeout uses the connection's deadline")
	}
	waitDeadlineExceeded(t, ctx)
}

// A front request that does not wait is bounded by its connection's reused
// deadline; one that waits is handed to net/http, and the rate limit's
// token it took goes back.
func TestWaitingContextOnTheFront(t *testing.T) {
	s := &Server{cfg: Config{RequestTimeout: time.Minute}, limiter: newRateLimiter(1, 2)}
	fc := &frontConn{s: s, ip: "192.0.2.1"}
	c := &frontCall{fc: fc, r: &httpfront.Request{}, ctx: context.Background()}
	ctx, end, ok := s.waitingContext(c, 0)
	if !ok || ctx != context.Context(&fc.bound) {
		t.Fatalf("a call that does not wait: ok %v, its own context %v", ok, ctx != context.Context(&fc.bound))
	}
	if at, _ := ctx.Deadline(); time.Until(at) > time.Minute || time.Until(at) < time.Minute-time.Second {
		t.Fatalf("deadline %v, want a minute from now", at)
	}
	end()

	now := time.Now()
	for range 2 {
		if ok, _ := s.limiter.allow(fc.ip, now); !ok {
			t.Fatal("a burst of 2 refused")
		}
	}
	c.charged = true
	if _, _, ok := s.waitingContext(c, 30*time.Second); ok {
		t.Fatal("a call that waits was not handed over")
	}
	if ok, _ := s.limiter.allow(fc.ip, now); !ok {
		t.Fatal("the handed-over call's token was not given back")
	}
	if ok, _ := s.limiter.allow(fc.ip, now); ok {
		t.Fatal("more than one token came back")
	}
}
