package fsm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/keyfilter"
	"github.com/holdfast/holdfast/internal/secret"
)

// FSM is the replicated state machine. Apply, ApplyBatch, Snapshot and
// Restore are called by Raft from one goroutine; the read methods may be
// called from any goroutine and see a consistent state.
type FSM struct {
	mu sync.RWMutex
	st *state
	// level mirrors st.level, set under mu after every change, so that the
	// level check of every write reads it without taking mu.
	level atomic.Uint32
	// resultsFrom is the first term whose entries' results Apply builds
	// (ResultsFrom).
	resultsFrom atomic.Uint64
}

// ResultsFrom makes Apply build results only for the entries of term and
// later terms (a new state machine builds every entry's); for the others
// Apply returns nil. Only the node that proposed an entry waits for its
// result, and only the leader of a term proposes entries of that term: a
// node sets the term it is about to propose in, or math.MaxUint64 while it
// proposes nothing, and its followers' replicas then apply each command
// without building an answer nobody reads. The state changes alike either
// way; only what Apply returns differs.
func (f *FSM) ResultsFrom(term uint64) { f.resultsFrom.Store(term) }

var _ raft.BatchingFSM = (*FSM)(nil)

// New returns an empty state machine with the default settings, its
// records in memory.
func New() *FSM {
	f, err := Open(NewMemStore())
	if err != nil {
		panic(err) // an empty store has nothing to read wrong
	}
	return f
}

// Open returns the state machine whose state store holds: an empty store
// gives the initial state (the default settings), one a node kept gives
// the state as of its Applied index, from which the log is applied again.
func Open(store Store) (*FSM, error) {
	s := newState(store)
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("open the state machine: %w", err)
	}
	f := &FSM{st: s}
	f.level.Store(s.level)
	return f, nil
}

// Applied is the index of the last log entry in the state's store.
func (f *FSM) Applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.store.Applied()
}

// Apply decodes and applies one committed log entry. It panics on an entry
// it cannot decode: replicas must never silently diverge.
func (f *FSM) Apply(l *raft.Log) interface{} {
	return f.ApplyBatch([]*raft.Log{l})[0]
}

// ApplyBatch applies committed entries in order under one lock acquisition,
// in one batch of the store, which records the last entry's index. Entries
// that are not commands (configuration changes) yield nil, and so do
// entries the store holds already: a restarted node's log is replayed from
// its last snapshot, and the store may be ahead of that.
func (f *FSM) ApplyBatch(logs []*raft.Log) []interface{} {
	cmds := make([]Command, len(logs))
	applied := f.st.store.Applied()
	for i, l := range logs {
		if l.Type != raft.LogCommand || l.Index <= applied {
			continue
		}
		c, err := Decode(l.Data)
		if err != nil {
			panic(fmt.Sprintf("holdfast fsm: cannot apply log entry index=%d term=%d: %v", l.Index, l.Term, err))
		}
		cmds[i] = c
	}
	out := make([]interface{}, len(logs))
	from := f.resultsFrom.Load()
	last := logs[len(logs)-1].Index
	if last <= applied {
		return out
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.begin()
	for i, c := range cmds {
		if c != nil {
			f.st.quiet = logs[i].Term < from
			out[i] = f.st.apply(c)
		}
	}
	f.st.quiet = false
	f.st.commit(last)
	f.level.Store(f.st.level)
	return out
}

// ApplyCommand applies one command directly, bypassing the log. It exists
// for tests and tools that drive the state machine without Raft.
func (f *FSM) ApplyCommand(c Command) interface{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.begin()
	r := f.st.apply(c)
	f.st.commit(f.st.store.Applied() + 1)
	f.level.Store(f.st.level)
	return r
}

// apply advances the clock and dispatches on the command type. The result
// is always one of the typed results: *LeaseResult, *QueueResult,
// *SweepResult, *SettingsResult, *DirectoryResult, *FenceFloorResult,
// *LevelResult or *BatchResult.
func (s *state) apply(c Command) interface{} {
	s.advance(c.Stamp())
	// A batch's own stamp is 0; its commands advance the clock themselves.
	switch c := c.(type) {
	case *LeaseAcquire:
		return result(s, s.applyLeaseAcquire(c))
	case *LeaseRenew:
		return result(s, s.applyLeaseRenew(c))
	case *LeaseRelease:
		return result(s, s.applyLeaseRelease(c))
	case *LeaseComplete:
		return result(s, s.applyLeaseComplete(c))
	case *LeaseCheckpoint:
		return result(s, s.applyLeaseCheckpoint(c))
	case *QueueCreate:
		return result(s, s.applyQueueCreate(c))
	case *JobEnqueue:
		return result(s, s.applyJobEnqueue(c))
	case *JobClaim:
		return result(s, s.applyJobClaim(c))
	case *JobAck:
		return result(s, s.applyJobAck(c))
	case *JobRelease:
		return result(s, s.applyJobRelease(c))
	case *JobRenew:
		return result(s, s.applyJobRenew(c))
	case *JobRetry:
		return result(s, s.applyJobRetry(c))
	case *Sweep:
		return result(s, s.applySweep(c))
	case *SetSettings:
		return result(s, s.applySetSettings(c))
	case *SetNode:
		return result(s, s.applySetNode(c))
	case *RemoveNode:
		return result(s, s.applyRemoveNode(c))
	case *FenceFloor:
		return result(s, s.applyFenceFloor(c))
	case *SetLevel:
		return result(s, s.applySetLevel(c))
	case *Batch:
		if s.quiet {
			for _, sub := range c.Commands {
				s.apply(sub)
			}
			return nil
		}
		r := &BatchResult{Results: make([]interface{}, len(c.Commands))}
		for i, sub := range c.Commands {
			r.Results[i] = s.apply(sub)
		}
		return r
	}
	panic(fmt.Sprintf("holdfast fsm: no handler for command type %d", c.Type()))
}

// result boxes a command's result for Apply to return, or is nil when no
// caller waits for it (state.quiet).
func result[T any](s *state, r T) interface{} {
	if s.quiet {
		return nil
	}
	p := new(T)
	*p = r
	return p
}

func (s *state) applySetSettings(c *SetSettings) SettingsResult {
	next := s.settings.With(c.Patch)
	if err := next.Validate(); err != nil {
		return SettingsResult{Now: s.clock, Settings: s.settings, Error: err.Error()}
	}
	s.settings = next
	return SettingsResult{Now: s.clock, Applied: true, Settings: s.settings}
}

// readNow is the time reads judge expiry by: never before the state's clock.
func (s *state) readNow(nodeNow int64) int64 { return max(s.clock, nodeNow) }

// ReadQueue returns the queue's view if tok is its read token. nodeNow is
// the reading node's wall clock in Unix milliseconds; time-derived fields use
// the later of it and the state's clock.
func (f *FSM) ReadQueue(id secret.ID, tok secret.Hash, nodeNow int64) QueueResult {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := f.st.readNow(nodeNow)
	q, o := f.st.authorize(id, RoleRead, tok, now)
	if q == nil {
		return QueueResult{Outcome: o, Now: now}
	}
	return QueueResult{Outcome: QueueFound, Now: now, Queue: f.st.queueView(q, now)}
}

// ReadJob returns one job's view if tok is the queue's read token.
func (f *FSM) ReadJob(id secret.ID, tok secret.Hash, jid secret.ID, nodeNow int64) QueueResult {
	f.mu.RLock()
	defer f.mu.RUnlock()
	now := f.st.readNow(nodeNow)
	q, o := f.st.authorize(id, RoleRead, tok, now)
	if q == nil {
		return QueueResult{Outcome: o, Now: now}
	}
	i, ok := q.byID[jid]
	if !ok {
		return QueueResult{Outcome: JobNotFound, Now: now}
	}
	return QueueResult{Outcome: QueueFound, Now: now, Queue: queueHeader(q), Job: f.st.jobView(q, q.jobs[i], now)}
}

// Authorize reports whether tok grants role r on a live queue: 0 when it
// does, else QueueNotFound or QueueForbidden. The leader uses it to refuse
// requests before proposing them; Apply checks again.
func (f *FSM) Authorize(id secret.ID, r Role, tok secret.Hash, nodeNow int64) QueueOutcome {
	f.mu.RLock()
	defer f.mu.RUnlock()
	_, o := f.st.authorize(id, r, tok, f.st.readNow(nodeNow))
	return o
}

// NextDeadline returns the earliest time at which a sweep has work to do.
func (f *FSM) NextDeadline() (int64, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	tm, ok := f.st.timers.next()
	return tm.at, ok
}

// Clock returns the state machine's time in Unix milliseconds.
func (f *FSM) Clock() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.clock
}

// Settings returns the replicated settings.
func (f *FSM) Settings() Settings {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.settings
}

// FencingCounter returns the last fencing token issued cluster-wide.
func (f *FSM) FencingCounter() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.fencing
}

// Stats are gauges for metrics, the status page and backups.
type Stats struct {
	Leases     int    `json:"leases"`      // lease records (their lifecycles not ended and swept)
	LeasesHeld int    `json:"leases_held"` // holds the records show (see below)
	Queues     int    `json:"queues"`      // queues (not expired and swept)
	Jobs       Counts `json:"jobs"`        // their jobs by status
}

// Stats reads the gauges the state keeps as it changes, so it scans
// nothing. They count records as the last applied entry left them: a
// claim whose window ran out counts as claimed, and a lease or queue whose
// time ended counts, until the sweep that follows (the leader proposes one
// when the first is due); a lease's single holder whose hold ran out
// without a release counts as held until the key is used again or its
// lifecycle ends.
func (f *FSM) Stats() Stats {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.stats()
}

func (s *state) stats() Stats {
	c := &s.counts
	st := Stats{
		Leases:     int(c.leases),
		LeasesHeld: int(c.holds),
		Queues:     int(c.queues),
		Jobs: Counts{
			Pending:   int(c.jobs[JobPending]),
			Claimed:   int(c.jobs[JobClaimedStatus]),
			Completed: int(c.jobs[JobCompleted]),
			Failed:    int(c.jobs[JobFailed]),
		},
	}
	st.Jobs.Total = st.Jobs.Pending + st.Jobs.Claimed + st.Jobs.Completed + st.Jobs.Failed
	return st
}

// countLease counts l if its lifecycle has not ended at now.
func (st *Stats) countLease(l *lease, now int64) {
	if l.absoluteExpiresAt <= now {
		return
	}
	st.Leases++
	if l.state == leaseHeld && l.leaseExpiresAt > now {
		st.LeasesHeld++
	}
	if l.set != nil {
		for _, h := range l.set.heap {
			if h.expiresAt > now {
				st.LeasesHeld++
			}
		}
	}
}

// countQueue counts q and its jobs if q is live at now.
func (st *Stats) countQueue(s *state, q *queue, now int64) {
	if q.expiresAt <= now {
		return
	}
	st.Queues++
	c := s.queueView(q, now).Counts
	st.Jobs.Pending += c.Pending
	st.Jobs.Claimed += c.Claimed
	st.Jobs.Completed += c.Completed
	st.Jobs.Failed += c.Failed
	st.Jobs.Total += c.Total
}

// minKeyFilterKeys is the fewest keys a key filter is sized for.
const minKeyFilterKeys = 1 << 20

// KeyFilterBuilt reports whether lookups use a key filter now.
func (f *FSM) KeyFilterBuilt() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.filter != nil
}

// ErrBuildStopped is BuildKeyFilter's error when it was told to stop.
var ErrBuildStopped = errors.New("fsm: key filter build stopped")

// KeyFilterWanted reports whether a key filter should be built: there is
// none yet (a state just opened or restored), or the one there took more
// keys than it was sized for. None is being built.
func (f *FSM) KeyFilterWanted() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.building == nil && (f.st.filter == nil || f.st.filter.Full())
}

// BuildKeyFilter fills a new key filter with every record key of the
// store and puts it in use; until then lookups use the one before, or the
// store alone. It reads a view of the store without holding up Apply,
// whose commits add their keys to the new filter from that view on. It is
// for a node's background work, never for Apply, and decides no outcome:
// a key the filter calls present is looked up as before. When stop (if
// not nil) says so, the build is abandoned (ErrBuildStopped).
func (f *FSM) BuildKeyFilter(stop func() bool) error {
	f.mu.Lock()
	st := f.st
	if st.building != nil {
		f.mu.Unlock()
		return nil
	}
	// Room for twice the records there are, so that as many new ones
	// again fit before the next build, and for a million at least (a
	// filter of 1.2 MiB).
	nf := keyfilter.New(int(max(2*(st.counts.leases+st.counts.queues+st.counts.clients), minKeyFilterKeys)))
	v, err := st.store.View()
	if err != nil {
		f.mu.Unlock()
		return fmt.Errorf("build the key filter: %w", err)
	}
	st.building = nf
	f.mu.Unlock()

	err = func() error {
		defer v.Close()
		for _, t := range []byte{tableLease, tableQueue, tableClient} {
			lower, upper := tableBounds(t)
			n, stopped := 0, false
			if err := v.Scan(lower, upper, func(k, _ []byte) bool {
				nf.Add(k)
				if n++; n%4096 == 0 && stop != nil {
					stopped = stop()
				}
				return !stopped
			}); err != nil {
				return err
			}
			if stopped {
				return ErrBuildStopped
			}
		}
		return nil
	}()

	f.mu.Lock()
	defer f.mu.Unlock()
	if st.building == nf {
		st.building = nil
		if err == nil && f.st == st { // not replaced by a restore meanwhile
			st.filter = nf
		}
	}
	if err != nil {
		return fmt.Errorf("build the key filter: %w", err)
	}
	return nil
}

// HasLease reports whether the state holds a record of the lease id (in
// any state, its lifecycle not ended and swept): an acquire of it counts
// no new record.
func (f *FSM) HasLease(id secret.Hash) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.lease(id) != nil
}

// HasJobKey reports whether the queue id holds a job of key: an enqueue
// of it adds no job.
func (f *FSM) HasJobKey(id secret.ID, key string) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	q := f.st.queue(id)
	if q == nil {
		return false
	}
	_, ok := q.byKey[key]
	return ok
}
