package fsm

import (
	"encoding/binary"
	"fmt"

	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/wire"
)

// Records live in the state's store (see store.go for the layout). While a
// batch of entries is applied, the records it reads are decoded into the
// state's caches, changed there in place and marked dirty; at the batch's
// end the dirty ones are encoded into the store's batch, which commits with
// the index of the batch's last entry. The caches keep a bounded number of
// records between batches: they save decoding, and decide nothing.

type leaseState uint8

const (
	leaseFree leaseState = iota + 1
	leaseHeld
	leaseDone
)

type lease struct {
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
	// replaced whole, never changed, so results may share it.
	checkpoint *Checkpoint
}

type queue struct {
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
	// dirty lists the jobs (by index) changed in the open batch.
	dirty []int
}

type job struct {
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
	id     secret.Hash
	leaves []int64
}

// counts are the sizes the limits and snapshots need without a scan.
type counts struct {
	leases  int64 // lease records
	queues  int64 // queue records
	clients int64 // client records
	// extraSlots counts held slots beyond the first of each multi-slot
	// key, which count toward max_leases besides the records.
	extraSlots int64
}

// records is one table's cache: decoded records by id, and which of them
// the open batch changed (true) or removed (false). A removed record stays
// in the cache as nil until the batch ends.
type records[K comparable, R any] struct {
	cache map[K]R
	dirty map[K]bool
	limit int
}

func newRecords[K comparable, R any](limit int) records[K, R] {
	return records[K, R]{cache: make(map[K]R), dirty: make(map[K]bool), limit: limit}
}

// trim keeps the cache within its limit between batches. Which records
// go is of no consequence but speed: the store holds them all.
func (r *records[K, R]) trim() {
	if len(r.cache) <= r.limit {
		return
	}
	for k := range r.cache {
		delete(r.cache, k)
		if len(r.cache) <= r.limit*3/4 {
			return
		}
	}
}

// Cache limits, in records, between batches.
const (
	leaseCacheLimit  = 1 << 16
	queueCacheLimit  = 1 << 10
	clientCacheLimit = 1 << 12
)

// state is the replicated state: the scalars here, the records in the store.
type state struct {
	// quiet is set while applying an entry whose result no caller waits
	// for (see FSM.ProposingIn): the answers' views are not built. It
	// changes nothing else.
	quiet    bool
	clock    int64
	fencing  uint64
	settings Settings
	level    uint32 // the active cluster level
	counts   counts
	nodes    map[string]NodeInfo // every entry, also in the store
	// nodesDirty is set when the open batch changed the directory.
	nodesDirty bool

	store Store
	// b is the open apply batch; nil between batches.
	b       StoreBatch
	leases  records[secret.Hash, *lease]
	queues  records[secret.ID, *queue]
	clients records[secret.Hash, *client]
	timers  timers
}

func newState(store Store) *state {
	s := &state{
		settings: DefaultSettings(),
		nodes:    make(map[string]NodeInfo),
		store:    store,
		leases:   newRecords[secret.Hash, *lease](leaseCacheLimit),
		queues:   newRecords[secret.ID, *queue](queueCacheLimit),
		clients:  newRecords[secret.Hash, *client](clientCacheLimit),
	}
	s.timers = timers{s}
	return s
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

// lookup finds a record in the cache or the committed store. Records are
// written to the store's batch only when it commits, and every change
// before that is made to the cached record, so a record the cache does not
// hold is as the store has it. The cache holds absent records too (nil).
// Only within a batch does lookup add to the cache: readers between
// batches share it under a read lock and must not change it.
func lookup[K comparable, R comparable](s *state, r *records[K, R], id K, key []byte, decode func([]byte) (R, error)) R {
	if rec, ok := r.cache[id]; ok {
		return rec
	}
	var zero R
	v, ok, err := s.store.Get(key)
	if err != nil {
		s.failRead(err)
		return zero
	}
	rec := zero
	if ok {
		if rec, err = decode(v); err != nil {
			s.failRead(fmt.Errorf("record %x: %w", key, err))
			return zero
		}
	}
	if s.b != nil {
		r.cache[id] = rec
	}
	return rec
}

// failRead handles a record the store could not give back. Within a batch
// the node must stop (a replica that cannot read its state must not go on
// applying); a reader between batches panics the same way, as the node
// must not serve a state it cannot read.
func (s *state) failRead(err error) { must(err) }

func (s *state) lease(id secret.Hash) *lease {
	return lookup(s, &s.leases, id, leaseKey(id), decodeLease)
}

func (s *state) queue(id secret.ID) *queue {
	return lookup(s, &s.queues, id, queueKey(id), s.loadQueue)
}

func (s *state) client(id secret.Hash) *client {
	return lookup(s, &s.clients, id, clientKey(id), decodeClient)
}

// putLease adds or marks changed a lease record of the open batch.
func (s *state) putLease(l *lease) {
	s.leases.cache[l.id] = l
	s.leases.dirty[l.id] = true
}

func (s *state) mutLease(l *lease) *lease {
	s.putLease(l)
	return l
}

func (s *state) mutQueue(q *queue) *queue {
	s.queues.cache[q.id] = q
	s.queues.dirty[q.id] = true
	return q
}

// mutJob returns job i of q, which must itself be writable, marked changed.
func (s *state) mutJob(q *queue, i int) *job {
	q.dirty = append(q.dirty, i)
	return q.jobs[i]
}

func (s *state) mutClient(c *client) *client {
	s.clients.cache[c.id] = c
	s.clients.dirty[c.id] = true
	return c
}

// removeLease removes a lease record in the open batch.
func (s *state) removeLease(id secret.Hash) {
	s.leases.cache[id] = nil
	s.leases.dirty[id] = false
	s.counts.leases--
}

func (s *state) removeQueue(q *queue) {
	s.queues.cache[q.id] = nil
	s.queues.dirty[q.id] = false
	s.counts.queues--
	for i := range q.jobs {
		must(s.b.Delete(jobKey(q.id, i)))
	}
}

func (s *state) removeClient(id secret.Hash) {
	s.clients.cache[id] = nil
	s.clients.dirty[id] = false
	s.counts.clients--
}

// begin opens a batch of the store.
func (s *state) begin() { s.b = s.store.Begin() }

// commit writes the open batch's changes and commits it at index.
func (s *state) commit(index uint64) {
	s.flush(s.b)
	must(s.b.Commit(index))
	s.b = nil
	s.leases.trim()
	s.queues.trim()
	s.clients.trim()
}

// flush encodes the dirty records and the scalars into w.
func (s *state) flush(w Writer) {
	e := wire.NewEncoder(make([]byte, 0, 1024))
	for id, live := range s.leases.dirty {
		if l := s.leases.cache[id]; live && l != nil {
			e.Reset()
			l.encode(e, snapshotVersion)
			must(w.Set(leaseKey(id), e.Bytes()))
		} else {
			must(w.Delete(leaseKey(id)))
			delete(s.leases.cache, id)
		}
		delete(s.leases.dirty, id)
	}
	for id, live := range s.queues.dirty {
		if q := s.queues.cache[id]; live && q != nil {
			e.Reset()
			q.encodeHeader(e)
			must(w.Set(queueKey(id), e.Bytes()))
			for _, i := range q.dirty {
				e.Reset()
				q.jobs[i].encode(e)
				must(w.Set(jobKey(id, i), e.Bytes()))
			}
			q.dirty = q.dirty[:0]
		} else {
			must(w.Delete(queueKey(id)))
			delete(s.queues.cache, id)
		}
		delete(s.queues.dirty, id)
	}
	for id, live := range s.clients.dirty {
		if c := s.clients.cache[id]; live && c != nil {
			e.Reset()
			c.encode(e)
			must(w.Set(clientKey(id), e.Bytes()))
		} else {
			must(w.Delete(clientKey(id)))
			delete(s.clients.cache, id)
		}
		delete(s.clients.dirty, id)
	}
	if s.nodesDirty {
		s.writeNodes(w)
		s.nodesDirty = false
	}
	e.Reset()
	s.encodeMeta(e)
	must(w.Set(metaKey, e.Bytes()))
}

// Timers index every future deadline held in the state so that a sweep
// finds due work without scanning the records, and so the leader can ask
// when the next sweep is needed. They live in the store as keys ordered by
// (time, kind, key), a total order, so the order in which due timers are
// handled never depends on anything but the state. A timer other than a
// lease's lifecycle end can move, so its armed time is kept beside it.

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
	at  int64
	key timerKey
}

// timers reads and writes the timer index of the state's open batch.
type timers struct{ s *state }

// set arms the timer for k at time at, moving it if it is armed. Lease
// lifecycle ends go through setLease instead.
func (t timers) set(k timerKey, at int64) {
	b := t.s.b
	ak := armedKey(k)
	old, ok, err := b.Get(ak)
	must(err)
	if ok && len(old) == 8 {
		prev := int64(binary.BigEndian.Uint64(old))
		if prev == at {
			return
		}
		must(b.Delete(timerIndexKey(prev, k)))
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], uint64(at))
	must(b.Set(timerIndexKey(at, k), nil))
	must(b.Set(ak, v[:]))
}

// cancel disarms the timer for k, if armed.
func (t timers) cancel(k timerKey) {
	b := t.s.b
	ak := armedKey(k)
	old, ok, err := b.Get(ak)
	must(err)
	if !ok {
		return
	}
	if len(old) == 8 {
		must(b.Delete(timerIndexKey(int64(binary.BigEndian.Uint64(old)), k)))
	}
	must(b.Delete(ak))
}

// setLease arms the lifecycle end of a new lease record; it never moves.
func (t timers) setLease(id secret.Hash, at int64) {
	must(t.s.b.Set(timerIndexKey(at, leaseTimer(id)), nil))
}

// cancelLease disarms the lifecycle end of a lease record removed.
func (t timers) cancelLease(id secret.Hash, at int64) {
	must(t.s.b.Delete(timerIndexKey(at, leaseTimer(id))))
}

// next returns the earliest timer of the open batch.
func (t timers) next() (timer, bool) {
	tm, ok, err := firstTimer(t.s.b)
	must(err)
	return tm, ok
}

// firstTimer returns the earliest timer r holds.
func firstTimer(r Reader) (timer, bool, error) {
	var tm timer
	var ok bool
	lower, upper := tableBounds(tableTimer)
	err := r.Scan(lower, upper, func(k, _ []byte) bool {
		tm, ok = parseTimerIndexKey(k)
		return false
	})
	return tm, ok, err
}

// pop removes the timer next returned.
func (t timers) pop(tm timer) {
	if tm.key.kind == timerLease {
		t.cancelLease(secret.Hash(tm.key.a), tm.at)
		return
	}
	t.cancel(tm.key)
}

func secondsToMillis(s int64) int64 { return s * 1000 }

// ceilSeconds rounds a positive millisecond duration up to whole seconds.
func ceilSeconds(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return (ms + 999) / 1000
}
