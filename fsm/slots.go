package fsm

import (
	"slices"

	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/wire"
)

// MaxSlots bounds the slots of a lease key.
const MaxSlots = 1000

// A key acquired with more than one slot is held by up to that many owners
// at once, each with its own owner token, fencing token and expiry. Its
// record keeps them in a slotSet instead of the single owner's fields, and
// a timer at the earliest holder's expiry lets a sweep free slots whose
// leases ended, so the count of held slots (and max_leases, which counts
// each held slot) does not wait for the key's next acquire.

// slotHolder is one owner of a multi-slot key.
type slotHolder struct {
	owner     secret.Hash
	fencing   uint64
	expiresAt int64
	index     int // position in slotSet.heap
}

// holderLess orders holders by expiry, then by fencing token (unique).
func holderLess(a, b *slotHolder) bool {
	if a.expiresAt != b.expiresAt {
		return a.expiresAt < b.expiresAt
	}
	return a.fencing < b.fencing
}

// slotSet holds a multi-slot key's owners, by owner and in a min-heap of
// expiries, so taking, renewing or freeing one slot costs O(log N).
type slotSet struct {
	slots   uint32 // the key's slot count, more than one
	byOwner map[secret.Hash]*slotHolder
	heap    []*slotHolder
}

func newSlotSet(slots uint32) *slotSet {
	return &slotSet{slots: slots, byOwner: make(map[secret.Hash]*slotHolder)}
}

// clone copies the set, its holders included, for copy-on-write.
func (s *slotSet) clone() *slotSet {
	c := &slotSet{slots: s.slots, byOwner: make(map[secret.Hash]*slotHolder, len(s.heap)), heap: make([]*slotHolder, len(s.heap))}
	for i, h := range s.heap {
		n := *h
		c.heap[i] = &n
		c.byOwner[n.owner] = &n
	}
	return c
}

func (s *slotSet) len() int { return len(s.heap) }

// earliest is the holder whose lease ends first; nil when none is held.
func (s *slotSet) earliest() *slotHolder {
	if len(s.heap) == 0 {
		return nil
	}
	return s.heap[0]
}

func (s *slotSet) add(h *slotHolder) {
	h.index = len(s.heap)
	s.heap = append(s.heap, h)
	s.byOwner[h.owner] = h
	s.up(h.index)
}

func (s *slotSet) remove(h *slotHolder) {
	delete(s.byOwner, h.owner)
	i, n := h.index, len(s.heap)-1
	if i != n {
		s.swap(i, n)
	}
	s.heap[n] = nil
	s.heap = s.heap[:n]
	if i != n {
		s.down(i)
		s.up(i)
	}
}

// moved restores the heap after h's expiry changed.
func (s *slotSet) moved(h *slotHolder) {
	s.down(h.index)
	s.up(h.index)
}

func (s *slotSet) swap(i, j int) {
	s.heap[i], s.heap[j] = s.heap[j], s.heap[i]
	s.heap[i].index = i
	s.heap[j].index = j
}

func (s *slotSet) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !holderLess(s.heap[i], s.heap[p]) {
			return
		}
		s.swap(i, p)
		i = p
	}
}

func (s *slotSet) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(s.heap) {
			return
		}
		if r := c + 1; r < len(s.heap) && holderLess(s.heap[r], s.heap[c]) {
			c = r
		}
		if !holderLess(s.heap[c], s.heap[i]) {
			return
		}
		s.swap(i, c)
		i = c
	}
}

// encode writes the holders in fencing order, so equal sets give equal bytes.
func (s *slotSet) encode(e *wire.Encoder) {
	hs := slices.Clone(s.heap)
	slices.SortFunc(hs, func(a, b *slotHolder) int {
		switch {
		case a.fencing < b.fencing:
			return -1
		case a.fencing > b.fencing:
			return 1
		}
		return 0
	})
	e.Uvarint(uint64(len(hs)))
	for _, h := range hs {
		e.Fixed(h.owner[:])
		e.Uvarint(h.fencing)
		e.Varint(h.expiresAt)
	}
}

func decodeSlotSet(d *wire.Decoder, slots uint32) *slotSet {
	s := newSlotSet(slots)
	for n := d.Len(); n > 0 && d.Err() == nil; n-- {
		h := &slotHolder{}
		d.Fixed(h.owner[:])
		h.fencing = d.Uvarint()
		h.expiresAt = d.Varint()
		if s.byOwner[h.owner] != nil || uint32(s.len()) >= slots {
			d.Fail("slot holders repeat an owner or exceed the key's slots")
			break
		}
		s.add(h)
	}
	return s
}

// slotCount is the key's number of slots.
func (l *lease) slotCount() uint32 {
	if l.set != nil {
		return l.set.slots
	}
	return 1
}

// slotsTimer is a multi-slot key's timer at its earliest holder's expiry.
func slotsTimer(id secret.Hash) timerKey { return timerKey{kind: timerSlots, a: id} }

// extraSlots is what l counts toward max_leases beyond its record: each
// held slot counts, and the record counts for the first.
func (l *lease) extraSlots() int64 {
	if l.set == nil {
		return 0
	}
	return int64(max(l.set.len()-1, 0))
}

// leaseCount is what counts toward max_leases: every record, and every
// held slot of a key beyond its first.
func (s *state) leaseCount() int64 { return s.counts.leases + s.counts.extraSlots }

// rearmSlots sets l's slots timer at its earliest holder's expiry, or
// cancels it when no slot is held.
func (s *state) rearmSlots(l *lease) {
	if h := l.set.earliest(); h != nil {
		s.timers.set(slotsTimer(l.id), h.expiresAt)
		return
	}
	s.timers.cancel(slotsTimer(l.id))
}

// freeEndedSlots removes the holders of l whose leases ended at the
// state's clock and rearms its timer; it returns the record, made writable
// only when a slot was freed, and how many were.
func (s *state) freeEndedSlots(l *lease) (*lease, int64) {
	if h := l.set.earliest(); h == nil || h.expiresAt > s.clock {
		return l, 0
	}
	l = s.mutLease(l)
	var freed int64
	for h := l.set.earliest(); h != nil && h.expiresAt <= s.clock; h = l.set.earliest() {
		s.removeHolder(l, h)
		freed++
	}
	s.rearmSlots(l)
	return l, freed
}

func (s *state) removeHolder(l *lease, h *slotHolder) {
	if l.set.len() > 1 {
		s.counts.extraSlots--
	}
	l.set.remove(h)
}

// slotsResult is a multi-slot key's result for holder h (nil: for none).
func (s *state) slotsResult(o LeaseOutcome, l *lease, h *slotHolder) LeaseResult {
	r := LeaseResult{
		Outcome:           o,
		Now:               s.clock,
		AbsoluteExpiresAt: l.absoluteExpiresAt,
		Slots:             l.slotCount(),
		Held:              uint32(l.set.len()),
	}
	if h != nil {
		r.FencingToken = h.fencing
		r.LeaseExpiresAt = h.expiresAt
		r.TTLSeconds = ceilSeconds(h.expiresAt - s.clock)
	}
	return r
}

// acquireSlot is an acquire of l, a live multi-slot key with the caller's
// fingerprint and slot count.
func (s *state) acquireSlot(l *lease, c *LeaseAcquire) LeaseResult {
	l, _ = s.freeEndedSlots(l)
	if h := l.set.byOwner[c.Owner]; h != nil {
		// The same request again (owner tokens derive from request ids):
		// the same grant, unchanged.
		return s.slotsResult(LeaseGranted, l, h)
	}
	limit := l.slotCount()
	if plantedSlotOvergrant {
		limit++
	}
	if uint32(l.set.len()) >= limit {
		h := l.set.earliest()
		r := s.slotsResult(LeaseHeld, l, h)
		r.TTLSeconds = 0
		r.RetryAfterSeconds = ceilSeconds(h.expiresAt - s.clock)
		return r
	}
	if l.set.len() > 0 && s.leaseCount() >= s.settings.MaxLeases {
		return LeaseResult{Outcome: LeaseLimitReached, Now: s.clock, Limit: s.settings.MaxLeases}
	}
	return s.grantSlot(s.mutLease(l), c)
}

// grantSlot gives a free slot of l (writable) to c's owner.
func (s *state) grantSlot(l *lease, c *LeaseAcquire) LeaseResult {
	s.fencing++
	h := &slotHolder{owner: c.Owner, fencing: s.fencing, expiresAt: min(s.clock+secondsToMillis(c.TTLSeconds), l.absoluteExpiresAt)}
	if l.set.len() > 0 {
		s.counts.extraSlots++
	}
	l.set.add(h)
	s.rearmSlots(l)
	return s.slotsResult(LeaseGranted, l, h)
}

// heldSlot returns the writable key l and the caller's slot, if owner holds
// one unexpired at the state's clock.
func (s *state) heldSlot(l *lease, owner secret.Hash) (*lease, *slotHolder) {
	if h := l.set.byOwner[owner]; h == nil || h.expiresAt <= s.clock {
		return l, nil
	}
	l = s.mutLease(l)
	return l, l.set.byOwner[owner]
}

func (s *state) renewSlot(l *lease, c *LeaseRenew) LeaseResult {
	l, h := s.heldSlot(l, c.Owner)
	if h == nil {
		return LeaseResult{Outcome: LeaseLost, Now: s.clock}
	}
	h.expiresAt = min(s.clock+secondsToMillis(c.TTLSeconds), l.absoluteExpiresAt)
	l.set.moved(h)
	s.rearmSlots(l)
	return s.slotsResult(LeaseRenewed, l, h)
}

func (s *state) releaseSlot(l *lease, owner secret.Hash) LeaseResult {
	l, h := s.heldSlot(l, owner)
	if h == nil {
		return LeaseResult{Outcome: LeaseLost, Now: s.clock}
	}
	s.removeHolder(l, h)
	s.rearmSlots(l)
	r := s.slotsResult(LeaseReleased, l, nil)
	r.FencingToken = h.fencing
	return r
}

// sweepSlots frees the slots of a key whose leases ended.
func (s *state) sweepSlots(id secret.Hash, r *SweepResult) {
	l := s.lease(id)
	if l == nil || l.set == nil {
		return
	}
	l, freed := s.freeEndedSlots(l)
	if freed == 0 {
		s.rearmSlots(l) // a renewal moved the earliest expiry past this timer
	}
	r.SlotsFreed += freed
}

// slotsWait is AcquireWait for a live multi-slot key with the caller's
// fingerprint: ready when a slot is free at now or the caller holds one.
func slotsWait(l *lease, c *LeaseAcquire, now int64) (LeaseResult, bool) {
	if c.slotCount() != l.slotCount() || l.set.byOwner[c.Owner] != nil {
		return LeaseResult{}, true
	}
	h := l.set.earliest()
	if uint32(l.set.len()) < l.slotCount() || h.expiresAt <= now {
		return LeaseResult{}, true
	}
	return heldAnswer(l, now, h.fencing, h.expiresAt), false
}
