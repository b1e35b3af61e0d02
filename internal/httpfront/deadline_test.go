package httpfront

import (
	"context"
	"errors"
	"testing"
	"time"
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

// A request's Bounded context is its connection's, reused: the same
// object for every request, ending at the timeout asked for.
func TestRequestBoundedIsTheConnections(t *testing.T) {
	r := &Request{c: &conn{}}
	ctx, end := r.Bounded(time.Hour)
	if ctx != context.Context(&r.c.bound) {
		t.Fatal("a request's bounded context is not its connection's")
	}
	if at, ok := ctx.Deadline(); !ok || time.Until(at) < 59*time.Minute || time.Until(at) > time.Hour {
		t.Fatalf("deadline %v %v, want an hour from now", at, ok)
	}
	end()
	ctx, end = r.Bounded(20 * time.Millisecond)
	defer end()
	waitDeadlineExceeded(t, ctx)
}
