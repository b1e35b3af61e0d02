package raftlog

import (
	"errors"
	"sync"
)

// health is the store's ability to write: the failure of the last append
// or deletion, the failure of preparing the next segment, and whether the
// store is poisoned. Changes are reported to notify.
type health struct {
	notify func(error)

	mu       sync.Mutex
	write    error // the last append's or deletion's failure; nil after a success
	prep     error // the last preparation's failure; nil after a success
	poisoned error // set once, never cleared
	reported error // what notify was last told
	watching bool  // watchSpace runs
}

// current is the condition to report: poisoned, then a failed write, then
// a failed preparation. Called under h.mu.
func (h *health) current() error {
	switch {
	case h.poisoned != nil:
		return h.poisoned
	case h.write != nil:
		return h.write
	}
	return h.prep
}

// update applies set under the lock and reports the condition if its kind
// or message changed.
func (h *health) update(set func()) {
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

// Err returns the store's current condition: nil while it writes, or the
// failure that keeps it from writing (wrapping ErrNoSpace, ErrStorage or
// ErrPoisoned).
func (s *Store) Err() error {
	s.health.mu.Lock()
	defer s.health.mu.Unlock()
	return s.health.current()
}
