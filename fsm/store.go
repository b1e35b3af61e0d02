package fsm

import (
	"encoding/binary"
	"errors"
)

// Store is where the state machine keeps its records: an ordered map of
// byte keys to byte values. The state machine reads and writes it only
// through these methods, within one batch per ApplyBatch, so it never does
// I/O of its own; a node gives it a store on disk (internal/statestore),
// tests and tools one in memory (NewMemStore).
//
// Keys the state machine writes never start with the byte 0x00.
type Store interface {
	Reader
	// Begin starts a batch, the only way to change the store.
	Begin() StoreBatch
	// Applied is the log index the last committed batch recorded: every
	// entry up to it is in the store, and no later one.
	Applied() uint64
	// View returns a consistent, read-only view of the committed state,
	// which later commits do not change. Close it when done.
	View() (View, error)
	// Replace makes the store hold exactly what fill writes, as of the
	// log index given (0 when not known: the next batch records one),
	// and nothing of what it held before. It is atomic: a crash during
	// Replace leaves the old contents or the new ones. Until it returns,
	// the store serves the old contents.
	Replace(index uint64, fill func(w Writer) error) error
}

// Reader reads a store.
type Reader interface {
	// Get returns key's value, which the caller may keep and change.
	Get(key []byte) ([]byte, bool, error)
	// Scan calls fn with each key in [lower, upper) in order, until fn
	// returns false. The slices are valid only during the call.
	Scan(lower, upper []byte, fn func(k, v []byte) bool) error
}

// Writer writes a store's keys.
type Writer interface {
	Set(key, value []byte) error
	Delete(key []byte) error
}

// StoreBatch is one apply batch: nothing of it is visible before Commit,
// and the state machine never reads it back (what it changed in the batch
// it keeps in memory until the commit).
type StoreBatch interface {
	Writer
	// Commit records index as the last log entry applied and makes the
	// batch visible. It need not be durable: the log is replayed after a
	// crash from the index the store recovers with.
	Commit(index uint64) error
	// Discard drops the batch.
	Discard()
}

// View is a read-only, consistent view of a store.
type View interface {
	Reader
	Close() error
}

// ErrStore is wrapped by the panic of an Apply that cannot read or write
// its store: a replica must stop rather than diverge or serve a state it
// could not read back.
var ErrStore = errors.New("fsm: state store failed")

// StoreError is what Apply panics with when its store fails.
type StoreError struct{ Err error }

func (e *StoreError) Error() string { return ErrStore.Error() + ": " + e.Err.Error() }

// Unwrap returns both ErrStore and the store's own error.
func (e *StoreError) Unwrap() []error { return []error{ErrStore, e.Err} }

// must stops Apply on a store error.
func must(err error) {
	if err != nil {
		panic(&StoreError{Err: err})
	}
}

// Key layout. Every table's keys start with its own byte; ids are fixed
// length, so a table's keys sort by id, which is the order snapshots list
// records in.
const (
	tableMeta   = 'm' // the scalars: clock, fencing counter, settings, level, counts
	tableLease  = 'l' // + lease id (32)
	tableQueue  = 'q' // + queue id (16): the queue's header
	tableJob    = 'J' // + queue creation time (8, as timers) + queue id (16) + job index (4, big-endian)
	tableClient = 'c' // + client id (32): the client's header
	tableCreate = 'C' // + client id (32) + sequence (8, big-endian): one creation's window end
	tableNode   = 'n' // + node id
	tableTimer  = 't' // + time (8, big-endian, sign bit flipped) + kind (1) + a (32) + b (16): a fixed timer
	tableMoving = 'v' // the same: a moving timer
)

var metaKey = []byte{tableMeta}

func leaseKey(id [32]byte) []byte {
	return append([]byte{tableLease}, id[:]...)
}

func queueKey(id [16]byte) []byte {
	return append([]byte{tableQueue}, id[:]...)
}

// jobKey is the key of q's job i. A queue's jobs are keyed by its
// creation time first, so the jobs written at any moment (those of recent
// queues) sit together at the table's end, as an append: the store's
// compactions then rewrite what is new, not the whole table, which keys
// led by a random queue id would make them do.
func jobKey(q *queue, i int) []byte {
	k := jobPrefix(q)
	return binary.BigEndian.AppendUint32(k, uint32(i))
}

// jobPrefix is what every key of q's jobs starts with.
func jobPrefix(q *queue) []byte {
	k := make([]byte, 1+8+16, 1+8+16+4)
	k[0] = tableJob
	putOrderedTime(k[1:], q.createdAt)
	copy(k[9:], q.id[:])
	return k
}

func clientKey(id [32]byte) []byte {
	return append([]byte{tableClient}, id[:]...)
}

// createKey is the key of a client's creation numbered seq: a client
// keeps each creation under a key of its own, so recording one writes one
// small key, not the client's whole list.
func createKey(id [32]byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(createPrefix(id), seq)
}

// createPrefix is what every key of a client's creations starts with.
func createPrefix(id [32]byte) []byte {
	k := make([]byte, 1+32, 1+32+8)
	k[0] = tableCreate
	copy(k[1:], id[:])
	return k
}

func nodeKey(id string) []byte {
	return append([]byte{tableNode}, id...)
}

// prefixEnd is the first key after every key that starts with p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// tableBounds are the scan bounds of one table.
func tableBounds(t byte) (lower, upper []byte) { return []byte{t}, []byte{t + 1} }

// putOrderedTime writes t into b[:8] so that times sort as their bytes do.
func putOrderedTime(b []byte, t int64) { binary.BigEndian.PutUint64(b, uint64(t)^(1<<63)) }

func timerIndexKey(at int64, k timerKey) []byte {
	b := make([]byte, 1+8+1+32+16)
	b[0] = tableTimer
	putOrderedTime(b[1:], at)
	b[9] = byte(k.kind)
	copy(b[10:], k.a[:])
	copy(b[42:], k.b[:])
	return b
}

func parseTimerIndexKey(b []byte) (timer, bool) {
	if len(b) != 1+8+1+32+16 || b[0] != tableTimer {
		return timer{}, false
	}
	t := timer{at: int64(binary.BigEndian.Uint64(b[1:]) ^ (1 << 63))}
	t.key.kind = timerKind(b[9])
	copy(t.key.a[:], b[10:42])
	copy(t.key.b[:], b[42:])
	return t, true
}
