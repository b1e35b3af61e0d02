package fsm

import (
	"container/heap"
	"encoding/binary"
	"fmt"

	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/wire"
)

// How records are kept in the store. A lease, a job and a client are
// encoded as in a snapshot of the current format; a queue's header holds
// its fields and its job count, and each job is a record of its own.

// maxQueueJobs bounds a queue header's job count, far above any setting.
const maxQueueJobs = 1 << 31

// metaVersion is the format of the meta record.
const metaVersion = 2

func (s *state) encodeMeta(e *wire.Encoder) {
	e.Uvarint(metaVersion)
	e.Varint(s.clock)
	e.Uvarint(s.fencing)
	s.settings.encode(e)
	e.Uvarint(uint64(s.level))
	e.Varint(s.counts.leases)
	e.Varint(s.counts.queues)
	e.Varint(s.counts.clients)
	e.Varint(s.counts.extraSlots)
	e.Varint(s.counts.holds)
	for _, n := range s.counts.jobs[JobPending:] {
		e.Varint(n)
	}
}

func (s *state) decodeMeta(b []byte) error {
	d := wire.NewDecoder(b)
	if v := d.Uvarint(); v != metaVersion {
		return fmt.Errorf("meta record format %d, want %d", v, metaVersion)
	}
	s.clock = d.Varint()
	s.fencing = d.Uvarint()
	s.settings.decode(d, d.Uvarint())
	s.level = uint32(min(d.Uvarint(), 1<<32-1))
	s.counts.leases = d.Varint()
	s.counts.queues = d.Varint()
	s.counts.clients = d.Varint()
	s.counts.extraSlots = d.Varint()
	s.counts.holds = d.Varint()
	for i := JobPending; i <= JobFailed; i++ {
		s.counts.jobs[i] = d.Varint()
	}
	return d.Finish()
}

func decodeLease(b []byte) (*lease, error) {
	l := &lease{}
	d := wire.NewDecoder(b)
	l.decode(d, snapshotVersion)
	l.storedHolds = l.holds()
	return l, d.Finish()
}

// holds counts the holders the record shows: its owner, or a multi-slot
// key's holders, whether or not their time ran out (a sweep removes a
// slot's holder when it does; a single holder stays until the key is used
// again or its lifecycle ends).
func (l *lease) holds() int64 {
	n := int64(0)
	if l.state == leaseHeld {
		n = 1
	}
	if l.set != nil {
		n += int64(len(l.set.heap))
	}
	return n
}

// encode writes the client as snapshots hold it: its id and its
// creations' window ends, in the order they were made.
func (c *client) encode(e *wire.Encoder) {
	e.Fixed(c.id[:])
	e.Uvarint(uint64(len(c.leaves)))
	for _, t := range c.leaves {
		e.Varint(t)
	}
}

// decode reads a client as snapshots hold it; none of its creations is
// in a store yet.
func (c *client) decode(d *wire.Decoder) {
	d.Fixed(c.id[:])
	for k := d.Len(); k > 0 && d.Err() == nil; k-- {
		c.add(d.Varint())
	}
}

// encodeHeader writes a client's header record: its id and the last
// number given to one of its creations, which are records of their own.
func (c *client) encodeHeader(e *wire.Encoder) {
	e.Fixed(c.id[:])
	e.Uvarint(c.next)
}

// loadClient decodes a client's header and reads its creations from the
// committed store (see lookup).
func (s *state) loadClient(b []byte) (*client, error) { return loadClient(s.store, b) }

// loadClient decodes a client's header and reads its creations from r,
// in the order they were numbered, which is the order they were made.
func loadClient(r Reader, b []byte) (*client, error) {
	c := &client{}
	d := wire.NewDecoder(b)
	d.Fixed(c.id[:])
	c.next = d.Uvarint()
	if err := d.Finish(); err != nil {
		return nil, err
	}
	var derr error
	p := createPrefix(c.id)
	err := r.Scan(p, prefixEnd(p), func(k, v []byte) bool {
		q := binary.BigEndian.Uint64(k[len(k)-8:])
		if q == 0 || q > c.next {
			derr = fmt.Errorf("client %x: creation %d beyond the last numbered, %d", c.id, q, c.next)
			return false
		}
		d := wire.NewDecoder(v)
		t := d.Varint()
		if derr = d.Finish(); derr != nil {
			return false
		}
		c.leaves = append(c.leaves, t)
		c.seqs = append(c.seqs, q)
		return true
	})
	if err == nil {
		err = derr
	}
	return c, err
}

func (j *job) encode(e *wire.Encoder) {
	e.Fixed(j.id[:])
	e.String(j.key)
	e.Blob(j.payload)
	e.Byte(byte(j.status))
	e.Varint(j.attempts)
	e.Fixed(j.receipt[:])
	e.Varint(j.createdAt)
	e.Varint(j.updatedAt)
	e.Varint(j.visibleAt)
	e.Varint(j.completedAt)
}

func (j *job) decode(d *wire.Decoder) {
	d.Fixed(j.id[:])
	j.key = d.String()
	j.payload = d.Blob()
	j.status = JobStatus(d.Byte())
	j.attempts = d.Varint()
	d.Fixed(j.receipt[:])
	j.createdAt = d.Varint()
	j.updatedAt = d.Varint()
	j.visibleAt = d.Varint()
	j.completedAt = d.Varint()
}

// encodeHeader writes the queue's fields and its settled count. The jobs
// are records of their own, counted when the queue is read, so adding one
// leaves the header as it is.
func (q *queue) encodeHeader(e *wire.Encoder) {
	e.Fixed(q.id[:])
	e.Varint(q.createdAt)
	e.Varint(q.expiresAt)
	e.Fixed(q.write[:])
	e.Fixed(q.worker[:])
	e.Fixed(q.read[:])
	e.Uvarint(uint64(q.settled))
}

func (q *queue) decodeHeader(d *wire.Decoder) {
	d.Fixed(q.id[:])
	q.createdAt = d.Varint()
	q.expiresAt = d.Varint()
	d.Fixed(q.write[:])
	d.Fixed(q.worker[:])
	d.Fixed(q.read[:])
	settled := d.Uvarint()
	if settled > maxQueueJobs {
		d.Fail("queue settled count out of range")
		return
	}
	q.settled = int(settled)
}

// loadQueue decodes a queue's header and reads its jobs from the
// committed store (see lookup).
func (s *state) loadQueue(b []byte) (*queue, error) { return loadQueue(s.store, b) }

// loadQueue decodes a queue's header and reads its jobs from r, which
// must be numbered from 0 without a gap.
func loadQueue(r Reader, b []byte) (*queue, error) {
	q := &queue{byKey: make(map[string]int), byID: make(map[secret.ID]int)}
	d := wire.NewDecoder(b)
	q.decodeHeader(d)
	if err := d.Finish(); err != nil {
		return nil, err
	}
	var derr error
	err := r.Scan(jobKey(q, 0), prefixEnd(jobPrefix(q)), func(k, v []byte) bool {
		if i := binary.BigEndian.Uint32(k[len(k)-4:]); int(i) != len(q.jobs) {
			derr = fmt.Errorf("queue %x: job %d found where job %d belongs", q.id, i, len(q.jobs))
			return false
		}
		j := &job{}
		d := wire.NewDecoder(v)
		j.decode(d)
		j.storedStatus = j.status
		if derr = d.Finish(); derr != nil {
			return false
		}
		q.addJob(j)
		return true
	})
	if err == nil {
		err = derr
	}
	if err == nil && q.settled > len(q.jobs) {
		err = fmt.Errorf("queue %x settles %d of its %d jobs", q.id, q.settled, len(q.jobs))
	}
	return q, err
}

// addJob appends j to q's jobs and indexes.
func (q *queue) addJob(j *job) {
	q.byKey[j.key] = len(q.jobs)
	q.byID[j.id] = len(q.jobs)
	q.jobs = append(q.jobs, j)
	q.bytes += recordOverhead + int64(len(j.key)+len(j.payload))
}

// writeNodes writes the directory's entries and removes those gone.
func (s *state) writeNodes(w Writer) {
	for _, id := range s.nodesGone {
		if _, back := s.nodes[id]; !back {
			must(w.Delete(nodeKey(id)))
		}
	}
	e := wire.NewEncoder(nil)
	for _, n := range s.sortedNodes() {
		e.Reset()
		n.encode(e)
		must(w.Set(nodeKey(n.ID), e.Bytes()))
	}
}

// load reads the scalars, the node directory and the near timers of the
// store's state.
func (s *state) load() error { return s.loadFrom(s.store) }

// loadFrom reads the scalars, the node directory and the timers held in
// memory from r, which holds what the state's store holds (or will).
func (s *state) loadFrom(r Reader) error {
	if err := s.loadScalars(r); err != nil {
		return err
	}
	if err := s.timers.load(r); err != nil {
		return fmt.Errorf("read the timers: %w", err)
	}
	heap.Init(&s.timers.h)
	return nil
}

// loadScalars reads the scalars and the node directory of the state r
// holds.
func (s *state) loadScalars(r Reader) error {
	v, ok, err := r.Get(metaKey)
	if err != nil {
		return fmt.Errorf("read the state's meta record: %w", err)
	}
	if !ok {
		return nil // an empty store: the initial state
	}
	if err := s.decodeMeta(v); err != nil {
		return fmt.Errorf("read the state's meta record: %w", err)
	}
	if plantedFenceReset {
		s.fencing = 0
	}
	lower, upper := tableBounds(tableNode)
	var derr error
	err = r.Scan(lower, upper, func(_, v []byte) bool {
		var n NodeInfo
		d := wire.NewDecoder(v)
		n.decode(d)
		if derr = d.Finish(); derr == nil {
			s.nodes[n.ID] = n
		}
		return derr == nil
	})
	if err == nil {
		err = derr
	}
	if err != nil {
		return fmt.Errorf("read the node directory: %w", err)
	}
	return nil
}
