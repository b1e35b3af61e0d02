package fsm

import (
	"bytes"
	"container/heap"

	"github.com/holdfast/holdfast/internal/secret"
)

// Records are copy-on-write: a record whose epoch is older than the state's
// epoch may be referenced by a snapshot being persisted, so it is cloned
// before its first change in the new epoch. Snapshot only bumps the epoch
// and copies the top-level maps, which keeps it fast.

type leaseState uint8

const (
	leaseFree leaseState = iota + 1
	leaseHeld
	leaseDone
)

type lease struct {
	epoch             uint64
	id                secret.Hash
	fingerprint       secret.Hash
	owner             secret.Hash // zero unless held
	state             leaseState
	fencing           uint64
	leaseExpiresAt    int64
	absoluteExpiresAt int64
	completedAt       int64
	result            []byte
	// set holds the owners of a key whose first acquire asked for more
	// than one slot, and its slot count; nil for a single-slot key, whose
	// owner is in the fields above.
	set *slotSet
	// checkpoint is the last progress a holder stored; nil for none. It is
	// replaced whole, never changed, so records of two epochs (and results)
	// may share it.
	checkpoint *Checkpoint
}

type queue struct {
	epoch     uint64
	id        secret.ID
	createdAt int64
	expiresAt int64
	write     secret.Hash
	worker    secret.Hash
	read      secret.Hash
	jobs      []*job // enqueue order; jobs are never removed before the queue
	// settled is a count of leading jobs known to be completed or failed,
	// which never change again: a claim's search starts after them. It is
	// a cache, not state: any value up to the true count (0 after a restore)
	// gives the same claims.
	settled int
	byKey   map[string]int
	byID    map[secret.ID]int
}

type job struct {
	epoch       uint64
	id          secret.ID
	key         string
	payload     []byte
	status      JobStatus
	attempts    int64
	receipt     secret.Hash // latest claim's receipt hash
	createdAt   int64
	updatedAt   int64
	visibleAt   int64 // end of the current claim's window while claimed
	completedAt int64
}

// client counts one address's recent queue creations. Each entry is the
// time that creation leaves the window, fixed when it is made, so the record
// alone (not the settings of the day) decides when it expires.
type client struct {
	epoch  uint64
	id     secret.Hash
	leaves []int64
}

// state is the replicated state. Everything but epoch and timers is part of
// the snapshot; timers are derived from the records on restore.
type state struct {
	// quiet is set while applying an entry whose result no caller waits
	// for (see FSM.ProposingIn): the answers' views are not built. It
	// changes nothing else.
	quiet    bool
	clock    int64
	fencing  uint64
	settings Settings
	level    uint32 // the active cluster level
	leases   map[secret.Hash]*lease
	queues   map[secret.ID]*queue
	clients  map[secret.Hash]*client
	nodes    map[string]NodeInfo // values, so a snapshot copies them
	timers   timers
	epoch    uint64
	// extraSlots counts held slots beyond the first of each multi-slot key,
	// which count toward max_leases besides the records. It is derived from
	// the records.
	extraSlots int64
}

func newState() *state {
	return &state{
		settings: DefaultSettings(),
		leases:   make(map[secret.Hash]*lease),
		queues:   make(map[secret.ID]*queue),
		clients:  make(map[secret.Hash]*client),
		nodes:    make(map[string]NodeInfo),
		timers:   newTimers(),
	}
}

// advance moves the state clock to the command's time if that is later.
func (s *state) advance(now int64) {
	if plantedLocalClock {
		now = plantedNow()
	}
	if now > s.clock {
		s.clock = now
	}
}

func (s *state) mutLease(l *lease) *lease {
	if l.epoch == s.epoch {
		return l
	}
	c := *l
	c.epoch = s.epoch
	if l.set != nil {
		c.set = l.set.clone()
	}
	s.leases[c.id] = &c
	return &c
}

func (s *state) mutQueue(q *queue) *queue {
	if q.epoch == s.epoch {
		return q
	}
	c := *q
	c.epoch = s.epoch
	c.jobs = append(make([]*job, 0, cap(q.jobs)), q.jobs...)
	c.byKey = make(map[string]int, len(q.byKey))
	for k, v := range q.byKey {
		c.byKey[k] = v
	}
	c.byID = make(map[secret.ID]int, len(q.byID))
	for k, v := range q.byID {
		c.byID[k] = v
	}
	s.queues[c.id] = &c
	return &c
}

// mutJob returns a writable job at index i of q, which must itself be writable.
func (s *state) mutJob(q *queue, i int) *job {
	j := q.jobs[i]
	if j.epoch == s.epoch {
		return j
	}
	c := *j
	c.epoch = s.epoch
	q.jobs[i] = &c
	return &c
}

func (s *state) mutClient(c *client) *client {
	if c.epoch == s.epoch {
		return c
	}
	n := *c
	n.epoch = s.epoch
	n.leaves = append([]int64(nil), c.leaves...)
	s.clients[n.id] = &n
	return &n
}

// Timers index every future deadline held in the state so that a sweep
// finds due work without scanning, and so the leader can ask when the next
// sweep is needed. Ordering is total (time, kind, key), so the order in which
// due timers are handled never depends on heap layout or insertion order.

type timerKind uint8

const (
	timerLease timerKind = iota + 1
	timerQueue
	timerClaim
	timerClient
	timerSlots
)

type timerKey struct {
	kind timerKind
	a    [32]byte
	b    [16]byte
}

func leaseTimer(id secret.Hash) timerKey  { return timerKey{kind: timerLease, a: id} }
func clientTimer(id secret.Hash) timerKey { return timerKey{kind: timerClient, a: id} }

func queueTimer(id secret.ID) timerKey {
	k := timerKey{kind: timerQueue}
	copy(k.a[:], id[:])
	return k
}

func claimTimer(q, j secret.ID) timerKey {
	k := timerKey{kind: timerClaim, b: j}
	copy(k.a[:], q[:])
	return k
}

type timer struct {
	at    int64
	key   timerKey
	index int
}

// timerLess is the timers' total order: time, kind, key.
func timerLess(a, b *timer) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	if a.key.kind != b.key.kind {
		return a.key.kind < b.key.kind
	}
	if c := bytes.Compare(a.key.a[:], b.key.a[:]); c != 0 {
		return c < 0
	}
	return bytes.Compare(a.key.b[:], b.key.b[:]) < 0
}

type timerHeap []*timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return timerLess(h[i], h[j]) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// leaseExpiry is the end of one lease record's lifecycle. Lease timers are
// by far the most numerous, and a record's lifecycle end never moves, so
// they live apart in a heap of plain values without an index (about a fifth
// of the memory of an indexed timer). An entry whose record was replaced (a
// key acquired again after its lifecycle ended, before a sweep removed the
// old record) is stale: it is dropped when it reaches the top, which no
// result depends on, so a replica rebuilt from a snapshot without the stale
// entries handles the same timers in the same order.
type leaseExpiry struct {
	at int64
	id secret.Hash
}

func (e leaseExpiry) timer() timer { return timer{at: e.at, key: leaseTimer(e.id)} }

func (e leaseExpiry) less(o leaseExpiry) bool {
	if e.at != o.at {
		return e.at < o.at
	}
	return bytes.Compare(e.id[:], o.id[:]) < 0
}

// leaseHeap is a binary min-heap of lifecycle ends, kept by hand so that a
// push does not box its value.
type leaseHeap []leaseExpiry

func (h *leaseHeap) push(e leaseExpiry) {
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

func (h *leaseHeap) pop() {
	old := *h
	n := len(old) - 1
	old[0] = old[n]
	*h = old[:n]
	h.down(0)
	if c := cap(*h); c > 4096 && n < c/4 {
		*h = append(make(leaseHeap, 0, 2*n), *h...) // give back what a drained heap held
	}
}

// init orders entries appended in any order.
func (h leaseHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h leaseHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			return
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h leaseHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if r := c + 1; r < len(h) && h[r].less(h[c]) {
			c = r
		}
		if !h[c].less(h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

type timers struct {
	h      timerHeap
	byKey  map[timerKey]*timer
	leases leaseHeap
}

func newTimers() timers { return timers{byKey: make(map[timerKey]*timer)} }

// set arms the timer for k at time at, moving it if it exists. Lease
// lifecycle ends go through setLease instead.
func (t *timers) set(k timerKey, at int64) {
	if tm, ok := t.byKey[k]; ok {
		tm.at = at
		heap.Fix(&t.h, tm.index)
		return
	}
	tm := &timer{at: at, key: k}
	t.byKey[k] = tm
	heap.Push(&t.h, tm)
}

// setLease arms the lifecycle end of a new lease record.
func (t *timers) setLease(id secret.Hash, at int64) {
	t.leases.push(leaseExpiry{at: at, id: id})
}

// cancel disarms the timer for k, if armed.
func (t *timers) cancel(k timerKey) {
	if tm, ok := t.byKey[k]; ok {
		heap.Remove(&t.h, tm.index)
		delete(t.byKey, k)
	}
}

// next drops stale lease entries from the top (live says whether an entry
// is its record's), then returns the earliest timer.
func (t *timers) next(live func(leaseExpiry) bool) (timer, bool) {
	for len(t.leases) > 0 && !live(t.leases[0]) {
		t.leases.pop()
	}
	return t.peek()
}

// peek returns the earliest timer, stale lease entries included (they are
// due, so at worst a sweep is asked for early). It changes nothing.
func (t *timers) peek() (timer, bool) {
	switch {
	case len(t.h) == 0 && len(t.leases) == 0:
		return timer{}, false
	case len(t.leases) == 0:
		return *t.h[0], true
	}
	l := t.leases[0].timer()
	if len(t.h) == 0 || timerLess(&l, t.h[0]) {
		return l, true
	}
	return *t.h[0], true
}

// pop removes the timer next returned.
func (t *timers) pop(tm timer) {
	if tm.key.kind == timerLease {
		t.leases.pop()
		return
	}
	heap.Pop(&t.h)
	delete(t.byKey, tm.key)
}

func secondsToMillis(s int64) int64 { return s * 1000 }

// ceilSeconds rounds a positive millisecond duration up to whole seconds.
func ceilSeconds(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return (ms + 999) / 1000
}
