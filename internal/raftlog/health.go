package raftlog

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// health is the store's ability to write: the failure of the last append
// or deletion, a write in progress for longer than the stall bound, the
// failure of preparing the next segment, and whether the store is
// poisoned. Changes are reported to notify, in the order they happen.
type health struct {
	notify func(error)
	// notifying is held from a change to the end of its notification, so
	// that notifications arrive in the order of the changes: a stall
	// reported after the write's end was would outlast it.
	notifying sync.Mutex

	// stallAfter is the stall bound (0: writes are not watched); dir is
	// the log directory, named in the stall's error. timer fires
	// stallAfter into each write; it is used under the store's wmu.
	stallAfter time.Duration
	dir        string
	timer      *time.Timer

	mu       sync.Mutex
	write    error     // the last append's or deletion's failure; nil after a success
	prep     error     // the last preparation's failure; nil after a success
	poisoned error     // set once, never cleared
	stall    error     // the write in progress has run longer than stallAfter
	writing  time.Time // when the write in progress began; zero between writes
	reported error     // what notify was last told
	watching bool      // watchSpace runs
}

// ErrStalled is wrapped by the condition a store reports while a write of
// the log (an append or a deletion, its fdatasync included) has been in
// progress for longer than Options.StallAfter: the disk does not answer.
// The condition ends when the write returns, with the write's own outcome.
var ErrStalled = errors.New("raftlog: stalled")

// current is the condition to report: poisoned, then a stalled write, then
// a failed write, then a failed preparation. Called under h.mu.
func (h *health) current() error {
	switch {
	case h.poisoned != nil:
		return h.poisoned
	case h.stall != nil:
		return h.stall
	case h.write != nil:
		return h.write
	}
	return h.prep
}

// update applies set under the lock and reports the condition if its kind
// or message changed.
func (h *health) update(set func()) {
	h.notifying.Lock()
	defer h.notifying.Unlock()
	h.mu.Lock()
	set()
	cur := h.current()
	changed := (cur == nil) != (h.reported == nil) || (cur != nil && cur.Error() != h.reported.Error())
	h.reported = cur
	h.mu.Unlock()
	if changed && h.notify != nil {
		h.notify(cur)
	}
}

func (h *health) setWrite(err error) { h.update(func() { h.write = err }) }
func (h *health) setPrep(err error)  { h.update(func() { h.prep = err }) }

// poison marks the store unusable; err explains why.
func (h *health) poison(err error) error {
	err = errors.Join(ErrPoisoned, err)
	h.update(func() {
		if h.poisoned == nil {
			h.poisoned = err
		}
	})
	return err
}

// isPoisoned returns the poisoning error, or nil.
func (h *health) isPoisoned() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.poisoned
}

// begin marks the start of a write (called under wmu) and arms the stall
// timer.
func (h *health) begin() {
	if h.stallAfter <= 0 {
		return
	}
	h.mu.Lock()
	h.writing = time.Now()
	h.mu.Unlock()
	if h.timer == nil {
		h.timer = time.AfterFunc(h.stallAfter, h.checkStall)
	} else {
		h.timer.Reset(h.stallAfter)
	}
}

// end marks the end of the write begun last (called under wmu, after the
// write's own outcome was recorded): a stall it caused is over.
func (h *health) end() {
	if h.stallAfter <= 0 {
		return
	}
	h.timer.Stop()
	h.mu.Lock()
	h.writing = time.Time{}
	stalled := h.stall != nil
	h.mu.Unlock()
	if stalled {
		h.update(func() { h.stall = nil })
	}
}

// checkStall, run by the timer, reports the write in progress as stalled
// once it has run for stallAfter. A run left over from an earlier write
// finds a later one, too recent to judge, or none.
func (h *health) checkStall() {
	h.update(func() {
		if h.stall == nil && !h.writing.IsZero() && time.Since(h.writing) >= h.stallAfter {
			h.stall = fmt.Errorf("%w: an append or deletion in %s has not returned after %s (the disk does not answer its write or fdatasync)",
				ErrStalled, h.dir, h.stallAfter)
		}
	})
}

// stopTimer stops the stall timer for good (called under wmu at Close).
func (h *health) stopTimer() {
	if h.timer != nil {
		h.timer.Stop()
	}
}

// Err returns the store's current condition: nil while it writes, or the
// failure that keeps it from writing (wrapping ErrNoSpace, ErrStorage,
// ErrStalled or ErrPoisoned).
func (s *Store) Err() error {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.current()
}
