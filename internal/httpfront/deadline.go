package httpfront

import (
	"context"
	"sync"
	"time"
)

// callDeadline is the context of the requests of one connection that a
// handler bounds by a timeout alone (Request.Bounded): one timer and one
// done channel,
// reused from call to call, in place of a context, a timer and a channel
// made for every request. The calls of a connection run one after another,
// and nothing a call starts uses its context once the call has returned.
//
// It differs from context.WithTimeout in one way: ending a call (the
// CancelFunc begin returns) stops the timer but neither closes Done nor
// sets Err, so the channel serves the next call. Done is closed, and Err
// is context.DeadlineExceeded, only when a call's deadline passes; the
// next call then gets a new channel.
type callDeadline struct {
	mu       sync.Mutex
	deadline time.Time
	done     chan struct{}
	err      error
	timer    *time.Timer
	end      context.CancelFunc // stops the timer; made once
}

// begin starts a call bounded by timeout from now.
func (d *callDeadline) begin(timeout time.Duration) (context.Context, context.CancelFunc) {
	d.mu.Lock()
	if d.done == nil || d.err != nil {
		d.done, d.err = make(chan struct{}), nil
	}
	d.deadline = time.Now().Add(timeout)
	d.mu.Unlock()
	if d.timer == nil {
		d.timer = time.AfterFunc(timeout, d.expire)
		d.end = func() { d.timer.Stop() }
	} else {
		d.timer.Reset(timeout)
	}
	return d, d.end
}

// expire ends the call whose deadline has passed. A timer that fires late,
// after its call ended and the next began, finds the next call's deadline
// still ahead and leaves it alone.
func (d *callDeadline) expire() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == nil && !time.Now().Before(d.deadline) {
		d.err = context.DeadlineExceeded
		close(d.done)
	}
}

// Deadline is the current call's deadline.
func (d *callDeadline) Deadline() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.deadline, true
}

// Done is closed when the current call's deadline passes.
func (d *callDeadline) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.done
}

// Err is context.DeadlineExceeded once Done is closed, nil before.
func (d *callDeadline) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// Value carries no values: the requests it bounds start from
// context.Background.
func (*callDeadline) Value(any) any { return nil }

// Bounded is a context for the request's work that ends timeout from now:
// the connection's own, reused from request to request (so a request that
// is served makes no context, timer or channel of its own). Its CancelFunc
// must be called once the work is done, and the context is not used after,
// nor by anything the work started.
func (r *Request) Bounded(timeout time.Duration) (context.Context, context.CancelFunc) {
	return r.c.bound.begin(timeout)
}
