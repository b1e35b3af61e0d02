package fsm

import (
	"bytes"
	"container/heap"
	"fmt"
	"strings"
	"sync"

	"github.com/RaduBerinde/btreemap"

	"github.com/holdfast/holdfast/internal/keyfilter"
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
	// storedHolds is what the record as the store has it adds to
	// counts.holds (see holds): changes in a batch count at its end.
	storedHolds int64
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
	// dirty lists the jobs (by index) changed in the open batch, and
	// headerDirty says whether the header changed too.
	dirty       []int
	headerDirty bool
	// bytes is about the memory its jobs take, for the cache's weight,
	// and counted what the cache counted of it when it last wrote it.
	bytes, counted int64
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
	// storedStatus is the status the store has for the job (0 before its
	// first write), which counts.jobs counts.
	storedStatus JobStatus
}

// client counts one address's recent queue creations. Each entry is the
// time that creation leaves the window, fixed when it is made, so the record
// alone (not the settings of the day) decides when it expires.
type client struct {
	id     secret.Hash
	leaves []int64
	// seqs numbers each entry of leaves in the store (0: not written
	// yet), next is the last number given, and gone lists the written
	// entries removed in the open batch.
	seqs []uint64
	next uint64
	gone []uint64
}

// counts are the sizes the limits and snapshots need without a scan.
type counts struct {
	leases  int64 // lease records
	queues  int64 // queue records
	clients int64 // client records
	// extraSlots counts held slots beyond the first of each multi-slot
	// key, which count toward max_leases besides the records.
	extraSlots int64
	// holds counts the holds the stored records show (see lease.holds),
	// and jobs the stored jobs by status: gauges, kept as records are
	// written, so that reading them scans nothing.
	holds int64
	jobs  [JobFailed + 1]int64
}

// records is one table's cache: decoded records by id, and which of them
// the open batch changed (true) or removed (false). A removed record stays
// in the cache as nil until the batch ends. The cache has two generations:
// a record found in the older moves to the newer, and when the newer
// weighs more than half the limit the older is dropped, so what is in use
// stays. A record weighs about the memory it takes (weigh), counted when
// it enters the newer generation and again each time a batch writes it,
// so a record that grows while cached is counted at its new size.
type records[K comparable, R any] struct {
	cache  map[K]R
	old    map[K]R
	dirty  map[K]bool
	limit  int64 // bytes
	weight int64 // of the newer generation
	weigh  func(R) int64
	// mu is held by readers between batches, which share the cache under
	// the state machine's read lock; a batch has the cache to itself.
	mu sync.Mutex
}

func newRecords[K comparable, R any](limit int64, weigh func(R) int64) *records[K, R] {
	return &records[K, R]{cache: make(map[K]R), old: make(map[K]R), dirty: make(map[K]bool), limit: limit, weigh: weigh}
}

// get returns the cached record for id, if any.
func (r *records[K, R]) get(id K) (R, bool) {
	if rec, ok := r.cache[id]; ok {
		return rec, true
	}
	rec, ok := r.old[id]
	if ok {
		r.add(id, rec)
		delete(r.old, id)
	}
	return rec, ok
}

// add puts a record read from the store, or found in the older
// generation, in the newer one.
func (r *records[K, R]) add(id K, rec R) {
	r.cache[id] = rec
	r.weight += r.weigh(rec)
}

// set adds or marks changed a record in the open batch.
func (r *records[K, R]) set(id K, rec R) {
	delete(r.old, id)
	r.cache[id] = rec
	r.dirty[id] = true
}

// remove marks a record removed in the open batch.
func (r *records[K, R]) remove(id K) {
	var zero R
	delete(r.old, id)
	r.cache[id] = zero
	r.dirty[id] = false
}

// written counts n more bytes for a record a batch wrote.
func (r *records[K, R]) written(n int64) { r.weight += n }

// trim keeps the cache within its limit between batches. Which records
// go is of no consequence but speed: the store holds them all.
func (r *records[K, R]) trim() {
	if r.weight > r.limit/2 {
		r.old, r.cache, r.weight = r.cache, make(map[K]R, len(r.cache)), 0
	}
}

// Cache limits, in bytes of records between batches (see records).
const (
	leaseCacheBytes  = 64 << 20
	queueCacheBytes  = 64 << 20
	clientCacheBytes = 8 << 20
)

// recordOverhead is about what a decoded record takes besides its
// variable parts (its struct, its map entries).
const recordOverhead = 200

func weighLease(l *lease) int64 {
	if l == nil {
		return recordOverhead
	}
	n := int64(recordOverhead + len(l.result))
	if l.checkpoint != nil {
		n += int64(len(l.checkpoint.Value))
	}
	if l.set != nil {
		n += int64(len(l.set.heap)) * recordOverhead
	}
	return n
}

func weighQueue(q *queue) int64 {
	if q == nil {
		return recordOverhead
	}
	q.counted = q.bytes
	return recordOverhead + q.bytes
}

func weighClient(c *client) int64 {
	if c == nil {
		return recordOverhead
	}
	return recordOverhead + 8*int64(len(c.leaves))
}

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
	// nodesDirty is set when the open batch changed the directory, and
	// nodesGone lists the entries it removed.
	nodesDirty bool
	nodesGone  []string

	store Store
	// b is the open apply batch; nil between batches.
	b       StoreBatch
	leases  *records[secret.Hash, *lease]
	queues  *records[secret.ID, *queue]
	clients *records[secret.Hash, *client]
	timers  *timers
	// filter holds every record key (lease, queue, client) the store
	// holds, and more: a key it calls absent is not looked up in the
	// store. nil until one is built (see FSM.BuildKeyFilter). building is
	// a filter being filled from a view of the store, which the commits
	// after that view add their keys to as well.
	filter, building *keyfilter.Filter
}

func newState(store Store) *state {
	s := &state{
		settings: DefaultSettings(),
		nodes:    make(map[string]NodeInfo),
		store:    store,
		leases:   newRecords[secret.Hash](leaseCacheBytes, weighLease),
		queues:   newRecords[secret.ID](queueCacheBytes, weighQueue),
		clients:  newRecords[secret.Hash](clientCacheBytes, weighClient),
	}
	s.timers = newTimers(s)
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
func lookup[K comparable, R comparable](s *state, r *records[K, R], id K, key []byte, decode func([]byte) (R, error)) R {
	if s.b == nil {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	if rec, ok := r.get(id); ok {
		return rec
	}
	var zero R
	if s.filter != nil && !s.filter.MayContain(key) {
		r.cache[id] = zero // never written
		return zero
	}
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
	r.add(id, rec)
	return rec
}

// failRead handles a record the store could not give back. Within a batch
// the node must stop (a replica that cannot read its state must not go on
// applying); a reader between batches panics the same way, as the node
// must not serve a state it cannot read.
func (s *state) failRead(err error) { must(err) }

func (s *state) lease(id secret.Hash) *lease {
	return lookup(s, s.leases, id, leaseKey(id), decodeLease)
}

func (s *state) queue(id secret.ID) *queue {
	return lookup(s, s.queues, id, queueKey(id), s.loadQueue)
}

func (s *state) client(id secret.Hash) *client {
	return lookup(s, s.clients, id, clientKey(id), s.loadClient)
}

// putLease adds or marks changed a lease record of the open batch.
func (s *state) putLease(l *lease) {
	s.leases.set(l.id, l)
}

func (s *state) mutLease(l *lease) *lease {
	s.putLease(l)
	return l
}

// mutQueue marks q's header (its fields or its settled count) changed.
func (s *state) mutQueue(q *queue) *queue {
	q.headerDirty = true
	return s.touchQueue(q)
}

// touchQueue marks q changed in the open batch, its header or not: a
// change to jobs alone (mutJob) writes only them.
func (s *state) touchQueue(q *queue) *queue {
	s.queues.set(q.id, q)
	return q
}

// mutJob returns job i of q, which must itself be writable, marked changed.
func (s *state) mutJob(q *queue, i int) *job {
	q.dirty = append(q.dirty, i)
	return q.jobs[i]
}

func (s *state) mutClient(c *client) *client {
	s.clients.set(c.id, c)
	return c
}

// removeLease removes a lease record in the open batch.
func (s *state) removeLease(id secret.Hash) {
	if l := s.lease(id); l != nil {
		s.counts.holds -= l.storedHolds
	}
	s.leases.remove(id)
	s.counts.leases--
}

func (s *state) removeQueue(q *queue) {
	s.queues.remove(q.id)
	s.counts.queues--
	for i, j := range q.jobs {
		must(s.b.Delete(jobKey(q, i)))
		s.countJob(j.storedStatus, -1)
	}
}

// removeClient removes a client record whose creations have all left
// the window (pruned: their keys are in gone) in the open batch.
func (s *state) removeClient(c *client) {
	c.deleteGone(s.b)
	s.clients.remove(c.id)
	s.counts.clients--
}

// deleteGone deletes the keys of the creations pruned since the client
// was last written.
func (c *client) deleteGone(w Writer) {
	for _, q := range c.gone {
		must(w.Delete(createKey(c.id, q)))
	}
	c.gone = c.gone[:0]
}

// begin opens a batch of the store.
func (s *state) begin() { s.b = s.store.Begin() }

// commit writes the open batch's changes and commits it at index.
func (s *state) commit(index uint64) {
	s.flush(s.b)
	must(s.b.Commit(index))
	s.b = nil
	clear(s.timers.gone)
	s.timers.armed.Clear(true)
	s.leases.trim()
	s.queues.trim()
	s.clients.trim()
}

// flush encodes the dirty records and the scalars into w.
func (s *state) flush(w Writer) {
	e := wire.NewEncoder(make([]byte, 0, 1024))
	flushRecords(w, s.leases, func(id secret.Hash) []byte { return leaseKey(id) }, func(id secret.Hash, l *lease) {
		s.leases.written(weighLease(l))
		h := l.holds()
		s.counts.holds += h - l.storedHolds
		l.storedHolds = h
		e.Reset()
		l.encode(e, snapshotVersion)
		s.setRecord(w, leaseKey(id), e.Bytes())
	})
	flushRecords(w, s.queues, func(id secret.ID) []byte { return queueKey(id) }, func(id secret.ID, q *queue) {
		s.queues.written(q.bytes - q.counted) // what it grew by
		q.counted = q.bytes
		if q.headerDirty {
			e.Reset()
			q.encodeHeader(e)
			s.setRecord(w, queueKey(id), e.Bytes())
			q.headerDirty = false
		}
		for _, i := range q.dirty {
			j := q.jobs[i]
			s.countJob(j.storedStatus, -1)
			s.countJob(j.status, 1)
			j.storedStatus = j.status
			e.Reset()
			j.encode(e)
			must(w.Set(jobKey(q, i), e.Bytes()))
		}
		q.dirty = q.dirty[:0]
	})
	flushRecords(w, s.clients, func(id secret.Hash) []byte { return clientKey(id) }, func(id secret.Hash, c *client) {
		s.clients.written(weighClient(c))
		c.deleteGone(w)
		for i, q := range c.seqs {
			if q == 0 {
				c.next++
				c.seqs[i] = c.next
				e.Reset()
				e.Varint(c.leaves[i])
				must(w.Set(createKey(id, c.next), e.Bytes()))
			}
		}
		e.Reset()
		c.encodeHeader(e)
		s.setRecord(w, clientKey(id), e.Bytes())
	})
	if s.nodesDirty {
		s.writeNodes(w)
		s.nodesDirty = false
		s.nodesGone = s.nodesGone[:0]
	}
	e.Reset()
	s.encodeMeta(e)
	must(w.Set(metaKey, e.Bytes()))
}

// flushRecords writes each record of r the open batch changed (write) and
// deletes each it removed, which then leaves the cache.
func flushRecords[K comparable, R comparable](w Writer, r *records[K, R], key func(K) []byte, write func(K, R)) {
	var zero R
	for id, live := range r.dirty {
		if rec := r.cache[id]; live && rec != zero {
			write(id, rec)
		} else {
			must(w.Delete(key(id)))
			delete(r.cache, id)
		}
		delete(r.dirty, id)
	}
}

// countJob adds n jobs of status st (none for 0, a job never stored) to
// the gauges.
func (s *state) countJob(st JobStatus, n int64) {
	if st >= JobPending && st <= JobFailed {
		s.counts.jobs[st] += n
	}
}

// setRecord writes a lease, queue or client record and adds its key to
// the key filters.
func (s *state) setRecord(w Writer, key, value []byte) {
	must(w.Set(key, value))
	if s.filter != nil {
		s.filter.Add(key)
	}
	if s.building != nil {
		s.building.Add(key)
	}
}

// Timers index every future deadline held in the state so that a sweep
// finds due work without scanning the records, and so the leader can ask
// when the next sweep is needed. Their order is total (time, kind, key), so
// the order in which due timers are handled never depends on anything but
// the state. They are kept two ways:
//
//   - A lease's lifecycle end and a queue's deadline never move, and leave
//     only when they are due: they live in the store alone, as keys in
//     that order (tableTimer), read from the last one a sweep removed
//     (sweptFrom), so the deletions behind it cost nothing to pass.
//   - A claim's window end, a client's earliest creation and a multi-slot
//     key's earliest holder move, and leave early (an ack, a release):
//     they are in memory, in a heap (as many as there are claims, clients
//     and multi-slot keys, not records), and in the store (tableMoving)
//     so a node that opens its store finds them again.

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

// fixed says whether a timer of kind k is fixed: armed once, at a time its
// record keeps, and removed only when due.
func fixed(k timerKind) bool { return k == timerLease || k == timerQueue }

type timer struct {
	at    int64
	key   timerKey
	index int // in the heap of moving timers
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

// timers is the state's timer index: the moving timers in memory, the
// fixed ones in the store's open batch.
type timers struct {
	s     *state
	h     timerHeap
	byKey map[timerKey]*timer
	// sweptFrom is a key at or below every fixed timer in the store: just
	// past the last one a sweep removed. Reads of the fixed timers start
	// there, so the deletions behind it cost nothing to pass.
	sweptFrom []byte
	// gone holds the fixed timers removed in the open batch, which the
	// committed store still shows, and armed those it armed, which it does
	// not show yet.
	gone  map[string]struct{}
	armed *btreemap.BTreeMap[string, struct{}]
}

func newTimers(s *state) *timers {
	return &timers{s: s, byKey: make(map[timerKey]*timer), sweptFrom: []byte{tableTimer},
		gone: make(map[string]struct{}), armed: btreemap.New[string, struct{}](8, strings.Compare)}
}

// set arms the moving timer for k at time at, moving it if it is armed.
func (t *timers) set(k timerKey, at int64) {
	if tm, ok := t.byKey[k]; ok {
		if tm.at == at {
			return
		}
		must(t.s.b.Delete(movingKey(tm.at, k)))
		tm.at = at
		heap.Fix(&t.h, tm.index)
	} else {
		tm := &timer{at: at, key: k}
		t.byKey[k] = tm
		heap.Push(&t.h, tm)
	}
	must(t.s.b.Set(movingKey(at, k), nil))
}

// cancel disarms the moving timer for k, if armed.
func (t *timers) cancel(k timerKey) {
	if tm, ok := t.byKey[k]; ok {
		must(t.s.b.Delete(movingKey(tm.at, k)))
		heap.Remove(&t.h, tm.index)
		delete(t.byKey, k)
	}
}

// arm arms the fixed timer for k at time at.
func (t *timers) arm(k timerKey, at int64) {
	key := timerIndexKey(at, k)
	if bytes.Compare(key, t.sweptFrom) < 0 {
		t.sweptFrom = key // never the case for a time after the clock
	}
	delete(t.gone, string(key))
	t.armed.ReplaceOrInsert(string(key), struct{}{})
	must(t.s.b.Set(key, nil))
}

// disarm removes the fixed timer for k armed at time at.
func (t *timers) disarm(k timerKey, at int64) {
	key := timerIndexKey(at, k)
	t.gone[string(key)] = struct{}{}
	t.armed.Delete(string(key))
	must(t.s.b.Delete(key))
}

// next returns the earliest timer. The fixed ones are read from the
// committed store, less those the open batch removed, and with those it
// armed: which timer is next never depends on how entries were grouped
// into batches.
func (t *timers) next() (timer, bool) {
	var tm timer
	var ok bool
	_, upper := tableBounds(tableTimer)
	must(t.s.store.Scan(t.sweptFrom, upper, func(k, _ []byte) bool {
		if _, gone := t.gone[string(k)]; gone {
			return true
		}
		tm, ok = parseTimerIndexKey(k)
		return false
	}))
	if k, _, found := t.armed.Min(); found {
		if a, _ := parseTimerIndexKey([]byte(k)); !ok || timerLess(&a, &tm) {
			tm, ok = a, true
		}
	}
	if len(t.h) > 0 && (!ok || timerLess(t.h[0], &tm)) {
		return *t.h[0], true
	}
	return tm, ok
}

// pop removes the timer next returned, in the open batch.
func (t *timers) pop(tm timer) {
	if !fixed(tm.key.kind) {
		t.cancel(tm.key)
		return
	}
	t.disarm(tm.key, tm.at)
	t.sweptFrom = append(timerIndexKey(tm.at, tm.key), 0)
}

// load reads the moving timers from the store.
func (t *timers) load(r Reader) error {
	lower, upper := tableBounds(tableMoving)
	return r.Scan(lower, upper, func(k, _ []byte) bool {
		tm, ok := parseTimerIndexKey(append([]byte{tableTimer}, k[1:]...))
		if ok {
			c := tm
			c.index = len(t.h)
			t.byKey[c.key] = &c
			t.h = append(t.h, &c)
		}
		return true
	})
}

// movingKey is a moving timer's key in the store.
func movingKey(at int64, k timerKey) []byte {
	b := timerIndexKey(at, k)
	b[0] = tableMoving
	return b
}

func secondsToMillis(s int64) int64 { return s * 1000 }

// ceilSeconds rounds a positive millisecond duration up to whole seconds.
func ceilSeconds(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return (ms + 999) / 1000
}
