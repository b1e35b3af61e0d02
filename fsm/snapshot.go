package fsm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/wire"
)

// Snapshot layout: magic, format version, the state in sorted order, and a
// SHA-256 of everything before it. Equal states give equal bytes. Version 2
// counts its settings; version 1, which held the first settingsV1 of them
// uncounted, is still read (the later settings take their defaults).
// Version 3 (cluster level 1) adds the active cluster level after the
// settings; a state at level 0 is written as version 2, byte for byte as
// builds before the level wrote it, so they can read it. Version 4
// (cluster level 2) adds each lease's slot count and, for a key with more
// than one, its holders, and its checkpoint; a state at level 1 is still
// written as version 3.
const (
	snapshotMagic   = "HOLDFAST-SNAP"
	snapshotVersion = 4
	// snapshotVersionLevel0 is the format of a state at level 0.
	snapshotVersionLevel0 = 2
)

// snapshotVersionAt is the snapshot format of a state at a cluster level.
func snapshotVersionAt(level uint32) uint64 {
	switch level {
	case 0:
		return snapshotVersionLevel0
	case 1:
		return 3
	}
	return snapshotVersion
}

// ErrSnapshot is wrapped by every error restoring a snapshot.
var ErrSnapshot = errors.New("fsm: invalid snapshot")

// view is an immutable capture of the state: records are copy-on-write, so
// after the epoch moves on nothing in a view changes.
type view struct {
	clock    int64
	fencing  uint64
	settings Settings
	level    uint32
	leases   []*lease
	queues   []*queue
	clients  []*client
	nodes    []NodeInfo
}

// capture takes a view and starts a new epoch so later changes copy records.
func (f *FSM) capture() *view {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.st
	v := &view{
		clock:    s.clock,
		fencing:  s.fencing,
		settings: s.settings,
		level:    s.level,
		leases:   make([]*lease, 0, len(s.leases)),
		queues:   make([]*queue, 0, len(s.queues)),
		clients:  make([]*client, 0, len(s.clients)),
	}
	for _, l := range s.leases {
		v.leases = append(v.leases, l)
	}
	for _, q := range s.queues {
		v.queues = append(v.queues, q)
	}
	for _, c := range s.clients {
		v.clients = append(v.clients, c)
	}
	v.nodes = s.sortedNodes()
	s.epoch++
	return v
}

// writeTo encodes the view in its canonical order.
func (v *view) writeTo(w io.Writer) error {
	slices.SortFunc(v.leases, func(a, b *lease) int { return bytes.Compare(a.id[:], b.id[:]) })
	slices.SortFunc(v.queues, func(a, b *queue) int { return bytes.Compare(a.id[:], b.id[:]) })
	slices.SortFunc(v.clients, func(a, b *client) int { return bytes.Compare(a.id[:], b.id[:]) })

	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64*1024)
	e := wire.NewEncoder(make([]byte, 0, 4096))
	flush := func() error {
		_, err := bw.Write(e.Bytes())
		e.Reset()
		return err
	}
	e.Fixed([]byte(snapshotMagic))
	version := snapshotVersionAt(v.level)
	e.Uvarint(version)
	e.Varint(v.clock)
	e.Uvarint(v.fencing)
	v.settings.encode(e)
	if v.level > 0 {
		e.Uvarint(uint64(v.level))
	}

	e.Uvarint(uint64(len(v.leases)))
	for _, l := range v.leases {
		l.encode(e, version)
		if err := flush(); err != nil {
			return fmt.Errorf("write snapshot lease: %w", err)
		}
	}
	e.Uvarint(uint64(len(v.queues)))
	for _, q := range v.queues {
		q.encode(e)
		if err := flush(); err != nil {
			return fmt.Errorf("write snapshot queue: %w", err)
		}
	}
	e.Uvarint(uint64(len(v.clients)))
	for _, c := range v.clients {
		e.Fixed(c.id[:])
		e.Uvarint(uint64(len(c.leaves)))
		for _, t := range c.leaves {
			e.Varint(t)
		}
	}
	e.Uvarint(uint64(len(v.nodes)))
	for _, n := range v.nodes {
		n.encode(e)
	}
	if err := flush(); err != nil {
		return fmt.Errorf("write snapshot clients and nodes: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("flush snapshot: %w", err)
	}
	if _, err := w.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("write snapshot checksum: %w", err)
	}
	return nil
}

func (l *lease) encode(e *wire.Encoder, version uint64) {
	e.Fixed(l.id[:])
	e.Fixed(l.fingerprint[:])
	e.Fixed(l.owner[:])
	e.Byte(byte(l.state))
	e.Uvarint(l.fencing)
	e.Varint(l.leaseExpiresAt)
	e.Varint(l.absoluteExpiresAt)
	e.Varint(l.completedAt)
	e.Blob(l.result)
	if version >= 4 {
		e.Uvarint(uint64(l.slotCount()))
		if l.set != nil {
			l.set.encode(e)
		}
		e.Bool(l.checkpoint != nil)
		if cp := l.checkpoint; cp != nil {
			e.Blob(cp.Value)
			e.Uvarint(cp.Fence)
			e.Varint(cp.At)
		}
	}
}

func (l *lease) decode(d *wire.Decoder, version uint64) {
	d.Fixed(l.id[:])
	d.Fixed(l.fingerprint[:])
	d.Fixed(l.owner[:])
	l.state = leaseState(d.Byte())
	l.fencing = d.Uvarint()
	l.leaseExpiresAt = d.Varint()
	l.absoluteExpiresAt = d.Varint()
	l.completedAt = d.Varint()
	l.result = d.Blob()
	if version >= 4 {
		n := d.Uvarint()
		if n < 1 || n > MaxSlots {
			d.Fail("lease slots out of range")
			return
		}
		if n > 1 {
			l.set = decodeSlotSet(d, uint32(n))
		}
		if d.Bool() {
			l.checkpoint = &Checkpoint{Value: d.Blob(), Fence: d.Uvarint(), At: d.Varint()}
		}
	}
}

func (q *queue) encode(e *wire.Encoder) {
	e.Fixed(q.id[:])
	e.Varint(q.createdAt)
	e.Varint(q.expiresAt)
	e.Fixed(q.write[:])
	e.Fixed(q.worker[:])
	e.Fixed(q.read[:])
	e.Uvarint(uint64(len(q.jobs)))
	for _, j := range q.jobs {
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
}

func (q *queue) decode(d *wire.Decoder) {
	d.Fixed(q.id[:])
	q.createdAt = d.Varint()
	q.expiresAt = d.Varint()
	d.Fixed(q.write[:])
	d.Fixed(q.worker[:])
	d.Fixed(q.read[:])
	n := d.Len()
	q.jobs = make([]*job, 0, n)
	q.byKey = make(map[string]int, n)
	q.byID = make(map[secret.ID]int, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		j := &job{}
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
		q.byKey[j.key] = i
		q.byID[j.id] = i
		q.jobs = append(q.jobs, j)
	}
}

// snapshotSink takes a snapshot's parts in order as they are decoded.
type snapshotSink interface {
	header(clock int64, fencing uint64, settings Settings, level uint32)
	lease(*lease)
	queue(*queue)
	client(*client)
	node(NodeInfo)
}

// decodeSnapshot checks snapshot bytes (magic, checksum, version, layout)
// and hands their parts to sink.
func decodeSnapshot(b []byte, sink snapshotSink) error {
	if len(b) < len(snapshotMagic)+sha256.Size || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return fmt.Errorf("%w: missing header", ErrSnapshot)
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return fmt.Errorf("%w: checksum mismatch", ErrSnapshot)
	}
	d := wire.NewDecoder(body[len(snapshotMagic):])
	version := d.Uvarint()
	if version < 1 || version > snapshotVersion {
		return fmt.Errorf("%w: unknown format version %d", ErrSnapshot, version)
	}
	clock := d.Varint()
	fencing := d.Uvarint()
	n := uint64(settingsV1)
	if version >= 2 {
		n = d.Uvarint()
	}
	var settings Settings
	settings.decode(d, n)
	var level uint64
	if version >= 3 {
		if level = d.Uvarint(); level == 0 || level > math.MaxUint32 {
			return fmt.Errorf("%w: level %d in a version 3 snapshot", ErrSnapshot, level)
		}
	}
	sink.header(clock, fencing, settings, uint32(level))
	for n := d.Len(); n > 0 && d.Err() == nil; n-- {
		l := &lease{}
		l.decode(d, version)
		sink.lease(l)
	}
	for n := d.Len(); n > 0 && d.Err() == nil; n-- {
		q := &queue{}
		q.decode(d)
		sink.queue(q)
	}
	for n := d.Len(); n > 0 && d.Err() == nil; n-- {
		c := &client{}
		d.Fixed(c.id[:])
		for k := d.Len(); k > 0 && d.Err() == nil; k-- {
			c.leaves = append(c.leaves, d.Varint())
		}
		sink.client(c)
	}
	for n := d.Len(); n > 0 && d.Err() == nil; n-- {
		var ni NodeInfo
		ni.decode(d)
		sink.node(ni)
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	return nil
}

// restoreSink fills a state from a snapshot.
type restoreSink struct{ s *state }

func (r restoreSink) header(clock int64, fencing uint64, settings Settings, level uint32) {
	r.s.clock, r.s.fencing, r.s.settings, r.s.level = clock, fencing, settings, level
}
func (r restoreSink) lease(l *lease)   { r.s.leases[l.id] = l }
func (r restoreSink) queue(q *queue)   { r.s.queues[q.id] = q }
func (r restoreSink) client(c *client) { r.s.clients[c.id] = c }
func (r restoreSink) node(n NodeInfo)  { r.s.nodes[n.ID] = n }

// decodeState parses snapshot bytes into a fresh state with its timers rebuilt.
func decodeState(b []byte) (*state, error) {
	s := newState()
	if err := decodeSnapshot(b, restoreSink{s}); err != nil {
		return nil, err
	}
	s.rebuildTimers()
	if plantedFenceReset {
		s.fencing = 0
	}
	return s, nil
}

// summarySink counts a snapshot's records as they pass, keeping none.
type summarySink struct {
	sum SnapshotSummary
	st  state // the settings, for the job counts
}

func (m *summarySink) header(clock int64, fencing uint64, settings Settings, level uint32) {
	m.sum.ClockUnixMs, m.sum.FencingCounter, m.st.settings, m.sum.Level = clock, fencing, settings, level
}
func (m *summarySink) lease(l *lease) { m.sum.countLease(l, m.sum.ClockUnixMs) }
func (m *summarySink) queue(q *queue) { m.sum.countQueue(&m.st, q, m.sum.ClockUnixMs) }
func (m *summarySink) client(*client) {}
func (m *summarySink) node(NodeInfo)  { m.sum.Nodes++ }

// rebuildTimers derives the timer index from the records.
func (s *state) rebuildTimers() {
	s.timers = newTimers()
	s.timers.leases = make(leaseHeap, 0, len(s.leases))
	s.extraSlots = 0
	for id, l := range s.leases {
		s.timers.leases = append(s.timers.leases, leaseExpiry{at: l.absoluteExpiresAt, id: id})
		if l.set != nil {
			s.extraSlots += l.extraSlots()
			s.rearmSlots(l)
		}
	}
	s.timers.leases.init()
	for id, q := range s.queues {
		s.timers.set(queueTimer(id), q.expiresAt)
		for _, j := range q.jobs {
			if j.status == JobClaimedStatus {
				s.timers.set(claimTimer(id, j.id), j.visibleAt)
			}
		}
	}
	for _, c := range s.clients {
		s.rearmClient(c)
	}
}

type fsmSnapshot struct{ v *view }

// Snapshot captures the state in O(records) pointer copies; encoding happens
// in Persist, concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	return &fsmSnapshot{v: f.capture()}, nil
}

// Persist writes the snapshot to the sink.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.v.writeTo(sink); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("close snapshot sink: %w", err)
	}
	return nil
}

// Release implements raft.FSMSnapshot.
func (s *fsmSnapshot) Release() {}

// Restore replaces the whole state with the snapshot's. Readers see either
// the old state or the new one, never a mix.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	s, err := decodeState(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.st = s
	f.level.Store(s.level)
	f.mu.Unlock()
	return nil
}

// SnapshotBytes returns the canonical snapshot encoding of the current state.
func (f *FSM) SnapshotBytes() []byte {
	var buf bytes.Buffer
	// Writing to a bytes.Buffer cannot fail.
	_ = f.capture().writeTo(&buf)
	return buf.Bytes()
}

// StateHash returns the SHA-256 of the canonical snapshot encoding. Replicas
// that applied the same log report the same hash.
func (f *FSM) StateHash() secret.Hash {
	return sha256.Sum256(f.SnapshotBytes())
}

// SnapshotSummary describes the state a snapshot holds, as of the state's
// own clock: what `holdfast snapshot inspect` prints.
type SnapshotSummary struct {
	// ClockUnixMs is the state's clock: the last leader time it applied.
	ClockUnixMs int64 `json:"clock_unix_ms"`
	// FencingCounter is the last fencing token issued.
	FencingCounter uint64 `json:"fencing_counter"`
	// Level is the cluster level active in the state.
	Level uint32 `json:"level"`
	// Nodes counts the node directory's entries.
	Nodes int `json:"nodes"`
	Stats
}

// InspectSnapshot checks snapshot bytes (format and checksum) and
// summarises the state they hold, judged at the state's own clock.
// It builds no state: a snapshot of a million leases is summarised in the
// time it takes to read it.
func InspectSnapshot(b []byte) (SnapshotSummary, error) {
	var m summarySink
	if err := decodeSnapshot(b, &m); err != nil {
		return SnapshotSummary{}, err
	}
	return m.sum, nil
}

// SnapshotPrefixLen is how much of a snapshot's start SnapshotFencing
// needs: the magic, the version, the clock and the fencing counter.
const SnapshotPrefixLen = len(snapshotMagic) + 3*binary.MaxVarintLen64

// SnapshotFencing reads the fencing counter from the first
// SnapshotPrefixLen bytes of a snapshot (or all of a shorter one). It does
// not check the snapshot's checksum: it is for describing a snapshot whose
// bytes are checked elsewhere, as they stream past.
func SnapshotFencing(prefix []byte) (uint64, error) {
	if len(prefix) < len(snapshotMagic) || string(prefix[:len(snapshotMagic)]) != snapshotMagic {
		return 0, fmt.Errorf("%w: missing header", ErrSnapshot)
	}
	d := wire.NewDecoder(prefix[len(snapshotMagic):])
	if v := d.Uvarint(); v < 1 || v > snapshotVersion {
		return 0, fmt.Errorf("%w: unknown format version %d", ErrSnapshot, v)
	}
	d.Varint()
	fencing := d.Uvarint()
	if err := d.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	return fencing, nil
}
