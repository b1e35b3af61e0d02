package fsm

import (
	"bufio"
	"bytes"
	"container/heap"
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

// view is a consistent capture of the state: its scalars and node
// directory, and a view of the store that later batches do not change.
type view struct {
	clock    int64
	fencing  uint64
	settings Settings
	level    uint32
	counts   counts
	nodes    []NodeInfo
	store    View
}

// capture takes a view of the committed state.
func (f *FSM) capture() (*view, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	sv, err := f.st.store.View()
	if err != nil {
		return nil, fmt.Errorf("snapshot: view the state store: %w", err)
	}
	return f.st.viewOf(sv), nil
}

// viewOf is the view of s whose records sv holds.
func (s *state) viewOf(sv View) *view {
	return &view{
		clock:    s.clock,
		fencing:  s.fencing,
		settings: s.settings,
		level:    s.level,
		counts:   s.counts,
		nodes:    s.sortedNodes(),
		store:    sv,
	}
}

// WriteStoreSnapshot writes the snapshot of the state that r holds (a
// checkpoint of a node's state store, say) to w: the bytes the state
// machine's own snapshot would have been at the index r was taken at.
func WriteStoreSnapshot(r Reader, w io.Writer) error {
	s := newState(nil)
	if err := s.loadScalars(r); err != nil {
		return fmt.Errorf("snapshot of a stored state: %w", err)
	}
	return s.viewOf(readerView{r}).writeTo(w)
}

// readerView is a Reader that needs no closing, as a View.
type readerView struct{ Reader }

func (readerView) Close() error { return nil }

// writeTo encodes the view in its canonical order: the store's, by id.
func (v *view) writeTo(w io.Writer) error {
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

	e.Uvarint(uint64(v.counts.leases))
	err := v.eachRecord(tableLease, v.counts.leases, func(b []byte) error {
		l, err := decodeLease(b)
		if err != nil {
			return err
		}
		l.encode(e, version)
		return flush()
	})
	if err != nil {
		return fmt.Errorf("write snapshot leases: %w", err)
	}
	e.Uvarint(uint64(v.counts.queues))
	err = v.eachRecord(tableQueue, v.counts.queues, func(b []byte) error {
		q, err := loadQueue(v.store, b)
		if err != nil {
			return err
		}
		q.encode(e)
		return flush()
	})
	if err != nil {
		return fmt.Errorf("write snapshot queues: %w", err)
	}
	e.Uvarint(uint64(v.counts.clients))
	err = v.eachRecord(tableClient, v.counts.clients, func(b []byte) error {
		c, err := loadClient(v.store, b)
		if err != nil {
			return err
		}
		c.encode(e)
		return flush()
	})
	if err != nil {
		return fmt.Errorf("write snapshot clients: %w", err)
	}
	e.Uvarint(uint64(len(v.nodes)))
	for _, n := range v.nodes {
		n.encode(e)
	}
	if err := flush(); err != nil {
		return fmt.Errorf("write snapshot nodes: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("flush snapshot: %w", err)
	}
	if _, err := w.Write(h.Sum(nil)); err != nil {
		return fmt.Errorf("write snapshot checksum: %w", err)
	}
	return nil
}

// eachRecord calls fn with each record of a table, in key order, and
// checks that there are as many as the state counts (a snapshot lists its
// count first).
func (v *view) eachRecord(table byte, want int64, fn func([]byte) error) error {
	var n int64
	var ferr error
	lower, upper := tableBounds(table)
	err := v.store.Scan(lower, upper, func(_, b []byte) bool {
		n++
		ferr = fn(b)
		return ferr == nil
	})
	switch {
	case err != nil:
		return err
	case ferr != nil:
		return ferr
	case n != want:
		return fmt.Errorf("the store holds %d records of table %q, the state counts %d", n, table, want)
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
		j.encode(e)
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
	// Made for the jobs a queue takes at the default limit at most: a
	// count read from a stream is not checked against what follows it
	// until those jobs are read.
	hint := min(n, queueIndexHint)
	q.jobs = make([]*job, 0, hint)
	q.byKey = make(map[string]int, hint)
	q.byID = make(map[secret.ID]int, hint)
	for i := 0; i < n && d.Err() == nil; i++ {
		j := &job{}
		j.decode(d)
		q.addJob(j)
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
	return readSnapshot(bytes.NewReader(b), sink)
}

// readSnapshot reads a snapshot from r as it goes, holding one record at
// a time, and hands its parts to sink; it checks the magic, version and
// layout as it reads, and the checksum at the end, so sink has taken
// every part before the snapshot is known whole: what it builds must be
// thrown away on an error (a restore replaces its store atomically).
func readSnapshot(r io.Reader, sink snapshotSink) error {
	h := sha256.New()
	d := wire.NewStreamDecoder(r, func(p []byte) { h.Write(p) })
	var magic [len(snapshotMagic)]byte
	if d.Fixed(magic[:]); d.Err() != nil || string(magic[:]) != snapshotMagic {
		return fmt.Errorf("%w: missing header", ErrSnapshot)
	}
	if err := decodeSnapshotBody(d, sink); err != nil {
		return err
	}
	sum, err := d.Tail(sha256.Size)
	if err != nil || len(sum) != sha256.Size {
		return fmt.Errorf("%w: truncated after its records, or more follows them", ErrSnapshot)
	}
	if !bytes.Equal(h.Sum(nil), sum) {
		return fmt.Errorf("%w: checksum mismatch", ErrSnapshot)
	}
	return nil
}

// decodeSnapshotBody reads the body after the magic: the version, the
// header and the records.
func decodeSnapshotBody(d *wire.Decoder, sink snapshotSink) error {
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
		c.decode(d)
		sink.client(c)
	}
	for n := d.Len(); n > 0 && d.Err() == nil; n-- {
		var ni NodeInfo
		ni.decode(d)
		sink.node(ni)
	}
	if err := d.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrSnapshot, err)
	}
	return nil
}

// restoreSink writes a snapshot's records into a store, with the timers
// and counts derived from them.
type restoreSink struct {
	s *state // the scalars and directory, and the counts
	w Writer
	e *wire.Encoder
}

func (r *restoreSink) header(clock int64, fencing uint64, settings Settings, level uint32) {
	r.s.clock, r.s.fencing, r.s.settings, r.s.level = clock, fencing, settings, level
}

func (r *restoreSink) set(key []byte) {
	must(r.w.Set(key, r.e.Bytes()))
	r.e.Reset()
}

func (r *restoreSink) lease(l *lease) {
	r.s.counts.leases++
	r.s.counts.holds += l.holds()
	r.s.counts.extraSlots += l.extraSlots()
	l.encode(r.e, snapshotVersion)
	r.set(leaseKey(l.id))
	writeTimer(r.w, leaseTimer(l.id), l.absoluteExpiresAt)
	if l.set != nil {
		if h := l.set.earliest(); h != nil {
			writeTimer(r.w, slotsTimer(l.id), h.expiresAt)
		}
	}
}

func (r *restoreSink) queue(q *queue) {
	r.s.counts.queues++
	q.encodeHeader(r.e)
	r.set(queueKey(q.id))
	writeTimer(r.w, queueTimer(q.id), q.expiresAt)
	for i, j := range q.jobs {
		r.s.countJob(j.status, 1)
		j.encode(r.e)
		r.set(jobKey(q, i))
		if j.status == JobClaimedStatus {
			writeTimer(r.w, claimTimer(q.id, j.id), j.visibleAt)
		}
	}
}

func (r *restoreSink) client(c *client) {
	if len(c.leaves) == 0 {
		return // a record without entries is removed at once, as rearmClient does
	}
	r.s.counts.clients++
	for i, t := range c.leaves {
		c.next++
		c.seqs[i] = c.next
		r.e.Varint(t)
		r.set(createKey(c.id, c.next))
	}
	c.encodeHeader(r.e)
	r.set(clientKey(c.id))
	writeTimer(r.w, clientTimer(c.id), slices.Min(c.leaves))
}

func (r *restoreSink) node(n NodeInfo) {
	r.s.nodes[n.ID] = n
	n.encode(r.e)
	r.set(nodeKey(n.ID))
}

// writeTimer arms a timer in a store being filled.
func writeTimer(w Writer, k timerKey, at int64) {
	if fixed(k.kind) {
		must(w.Set(timerIndexKey(at, k), nil))
		return
	}
	must(w.Set(movingKey(at, k), nil))
}

// restoreInto replaces the contents of store by the state of the snapshot
// r reads, and returns that state.
func restoreInto(store Store, r io.Reader) (*state, error) {
	s := newState(store)
	err := store.Replace(0, func(w Writer) (err error) {
		defer func() {
			if p := recover(); p != nil {
				se, ok := p.(*StoreError)
				if !ok {
					panic(p)
				}
				err = se
			}
		}()
		if err := readSnapshot(r, &restoreSink{s: s, w: w, e: wire.NewEncoder(nil)}); err != nil {
			return err
		}
		if plantedFenceReset {
			s.fencing = 0
		}
		e := wire.NewEncoder(nil)
		s.encodeMeta(e)
		return w.Set(metaKey, e.Bytes())
	})
	if err != nil {
		return nil, err
	}
	if err := s.timers.load(store); err != nil {
		return nil, fmt.Errorf("read the restored timers: %w", err)
	}
	heap.Init(&s.timers.h)
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

type fsmSnapshot struct{ v *view }

// Snapshot takes a view of the store; encoding happens in Persist,
// concurrently with Apply.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	v, err := f.capture()
	if err != nil {
		return nil, err
	}
	return &fsmSnapshot{v: v}, nil
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
func (s *fsmSnapshot) Release() { _ = s.v.store.Close() }

// Restore replaces the whole state with the snapshot's. Readers see either
// the old state or the new one, never a mix; the store holds either too.
//
// The snapshot is read as it arrives and written into the new store
// record by record, so a restore holds no more of it in memory than a
// record; it is checked whole (its checksum) before the new store
// replaces the old one.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := restoreInto(f.st.store, rc)
	if err != nil {
		return err
	}
	f.st = s
	f.level.Store(s.level)
	return nil
}

// RestoreStore replaces the whole state with the one another node's
// store held, received as that store's files rather than as a snapshot:
// install puts them into the state's store, first calling check with a
// reader of them, which reads the state as a node's start reads its own
// and fails on one the state machine cannot read (install must then keep
// the old contents). Readers see either the old state or the new one.
func (f *FSM) RestoreStore(install func(check func(Reader) error) error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := newState(f.st.store)
	if err := install(func(r Reader) error {
		if err := s.loadFrom(r); err != nil {
			return fmt.Errorf("read the received state: %w", err)
		}
		return nil
	}); err != nil {
		return err
	}
	f.st = s
	f.level.Store(s.level)
	return nil
}

// SnapshotBytes returns the canonical snapshot encoding of the current state.
func (f *FSM) SnapshotBytes() []byte {
	v, err := f.capture()
	must(err)
	defer v.store.Close()
	var buf bytes.Buffer
	must(v.writeTo(&buf))
	return buf.Bytes()
}

// StateHash returns the SHA-256 of the canonical snapshot encoding. Replicas
// that applied the same log report the same hash.
// The encoding streams through the hash: it is never held whole.
func (f *FSM) StateHash() secret.Hash {
	v, err := f.capture()
	must(err)
	defer v.store.Close()
	h := sha256.New()
	must(v.writeTo(h))
	return secret.Hash(h.Sum(nil))
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
	return InspectSnapshotReader(bytes.NewReader(b))
}

// InspectSnapshotReader is InspectSnapshot of a snapshot read from r as
// it comes, one record at a time: a snapshot of any size is checked in
// the memory of its largest record.
func InspectSnapshotReader(r io.Reader) (SnapshotSummary, error) {
	var m summarySink
	if err := readSnapshot(r, &m); err != nil {
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
