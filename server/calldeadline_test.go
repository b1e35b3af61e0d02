package server

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func TestCallDeadlineExpires(t *testing.T) {
	var d callDeadline
	defer d.stop()
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
	defer d.stop()
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
	defer d.stop()
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
	defer d.stop()
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
	defer fc.bound.stop()
	c := &frontCall{fc: fc, req: &frontRequest{}, ctx: context.Background()}
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

	c.req.hasTO = true
	ctx, end = c.Bounded(20 * time.Millisecond)
	defer end()
	if ctx == context.Context(&fc.bound) {
		t.Fatal("a call with a caller's timeout uses the connection's deadline")
	}
	waitDeadlineExceeded(t, ctx)
}

// A front request that may wait is bounded by its connection's reused
// deadline too, at the request timeout plus the wait.
func TestWaitingContextUsesTheConnectionsDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	fc := &frontConn{conn: a}
	defer fc.bound.stop()
	s := &Server{cfg: Config{RequestTimeout: time.Minute}}
	c := &frontCall{fc: fc, req: &frontRequest{}, ctx: context.Background()}
	for _, wait := range []time.Duration{0, 30 * time.Second} {
		ctx, end := s.waitingContext(c, wait)
		if ctx != context.Context(&fc.bound) {
			t.Fatalf("wait %v: the call does not use the connection's deadline", wait)
		}
		want := time.Minute + wait
		if at, ok := ctx.Deadline(); !ok || time.Until(at) > want || time.Until(at) < want-time.Second {
			t.Fatalf("wait %v: deadline %v %v, want %v from now", wait, at, ok, want)
		}
		end()
	}
}
