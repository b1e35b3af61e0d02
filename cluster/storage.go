package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/atomicfile"
	"github.com/holdfast/holdfast/internal/raftlog"
)

// The kinds of file a node writes, as storage faults name them.
const (
	// StorageLog is the Raft log: the segment files under raft-log/.
	StorageLog = "raft-log"
	// StorageStable is raft.db: Raft's current term and vote (and the log
	// of a data dir made before the segment log).
	StorageStable = "raft.db"
	// StorageSnapshots is the snapshot directory, snapshots/.
	StorageSnapshots = "snapshots"
)

// storageKinds lists the kinds in the order faults are reported.
var storageKinds = []string{StorageLog, StorageStable, StorageSnapshots}

// ErrStorage is wrapped by every StorageError.
var ErrStorage = errors.New("storage fault")

// StorageError is a request refused, or lost, because a node could not
// write its files. On its own it means nothing was written: the leader's
// append failed for want of space (or the node, with no leader to send the
// request to, cannot write its own log). Wrapped with ErrOutcomeUnknown it
// means the request may or may not have been committed.
type StorageError struct {
	// NodeID is the node that could not write.
	NodeID string
	// Kind is the file kind (StorageLog, StorageStable, StorageSnapshots).
	Kind string
	// Err is the store's error.
	Err error
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("node %s cannot write its %s: %v", e.NodeID, e.Kind, e.Err)
}

// Unwrap returns the store's error.
func (e *StorageError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrStorage) hold.
func (e *StorageError) Is(target error) bool { return target == ErrStorage }

// Reason is the cause in a few words, without file names: the operating
// system's error ("no space left on device") when there is one.
func (e *StorageError) Reason() string { return faultReason(e.Err) }

// Stalled reports whether the node's log is stalled (a write has not
// returned within the bound) rather than failing: the disk needs
// checking, not space.
func (e *StorageError) Stalled() bool { return errors.Is(e.Err, raftlog.ErrStalled) }

// faultReason names err's cause without paths.
func faultReason(err error) string {
	var errno syscall.Errno
	switch {
	case errors.Is(err, raftlog.ErrStalled):
		return "its disk does not answer: a write has not returned"
	case errors.As(err, &errno):
		return errno.Error()
	case errors.Is(err, raftlog.ErrNoSpace):
		return "no space left on device"
	case errors.Is(err, raftlog.ErrPoisoned):
		return "the log can no longer be trusted after a failed sync or deletion"
	}
	return "write error"
}

// StorageFault is one kind of file a node cannot write, in StorageStatus.
type StorageFault struct {
	Kind        string `json:"kind"`
	Error       string `json:"error"`
	SinceUnixMs int64  `json:"since_unix_ms"`
}

// StorageStatus is a node's ability to write its files.
type StorageStatus struct {
	// OK is true when every kind of file could be written when last tried.
	OK bool `json:"ok"`
	// DataDir is the node's data directory.
	DataDir string `json:"data_dir"`
	// Faults lists what cannot be written, oldest kind first; empty when OK.
	Faults []StorageFault `json:"faults"`
}

// storageHealth tracks the node's storage faults. A fault episode of one
// kind of file starts at its first failed write and ends at the first
// write that works again: one log line each, however many writes fail in
// between. A write of the log that does not return within the stall bound
// is a fault of the log too (a stall), which ends when the write returns.
// While the log or raft.db fails, the node stays out of elections (see
// raftGate and stableGuard), and the Raft library's lines about each failed
// attempt are held back (see quietLogger); while the log is stalled, it
// sends no Raft messages at all (see raftGate).
type storageHealth struct {
	dataDir string
	log     hclog.Logger
	now     func() time.Time

	// blocked is set while the log or raft.db fails: read on Raft's vote
	// and election paths without the lock.
	blocked atomic.Bool
	// stalled is set while the log's fault is a stall (it wraps
	// raftlog.ErrStalled): read on every Raft message this node sends.
	stalled atomic.Bool
	// stalling is closed when a stall begins, and replaced by an open
	// channel when it ends: proposals waiting on the leader stop waiting
	// at once.
	stalling atomic.Pointer[chan struct{}]

	mu       sync.Mutex
	faults   map[string]*fault // by kind, while failing
	episodes map[string]uint64 // fault episodes started, by kind

	fatalOnce sync.Once
	fatal     chan struct{} // closed when the log store is poisoned
	fatalErr  error
}

// fault is one ongoing episode.
type fault struct {
	err   error
	since time.Time
	// held counts the library's log lines held back during the episode.
	held uint64
}

func newStorageHealth(dataDir string, log hclog.Logger, now func() time.Time) *storageHealth {
	h := &storageHealth{
		dataDir:  dataDir,
		log:      log,
		now:      now,
		faults:   map[string]*fault{},
		episodes: map[string]uint64{},
		fatal:    make(chan struct{}),
	}
	stalling := make(chan struct{})
	h.stalling.Store(&stalling)
	return h
}

// report records the outcome of a write of kind: a non-nil err starts an
// episode (or continues one), nil ends it. An error wrapping
// raftlog.ErrPoisoned is fatal.
func (h *storageHealth) report(kind string, err error) {
	if errors.Is(err, raftlog.ErrPoisoned) {
		h.halt(fmt.Errorf("the %s in %s can no longer be trusted: %w", kind, h.dataDir, err))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	f, failing := h.faults[kind]
	switch {
	case err != nil && !failing:
		h.faults[kind] = &fault{err: err, since: h.now()}
		h.episodes[kind]++
		h.log.Error("storage fault: this node cannot write its files; it reports it in /readyz, /cluster/status and /metrics and stays out of elections until writes work again",
			"data_dir", h.dataDir, "kind", kind, "error", err)
	case err != nil:
		f.err = err
	case failing:
		delete(h.faults, kind)
		h.log.Info("storage fault over: writes work again", "data_dir", h.dataDir, "kind", kind,
			"duration", h.now().Sub(f.since).Round(time.Millisecond).String(), "raft_lines_held_back", f.held)
	}
	logFault, logFails := h.faults[StorageLog]
	_, stableFails := h.faults[StorageStable]
	h.blocked.Store(logFails || stableFails)
	stalled := logFails && errors.Is(logFault.err, raftlog.ErrStalled)
	switch was := h.stalled.Swap(stalled); {
	case stalled && !was:
		close(*h.stalling.Load())
	case !stalled && was:
		stalling := make(chan struct{})
		h.stalling.Store(&stalling)
	}
}

// halt stops the node for good: Fatal is closed with err. The storage
// failures that cannot be retried use it, and so does a node that finds its
// cluster at a level above its build's.
func (h *storageHealth) halt(err error) {
	h.fatalOnce.Do(func() {
		h.fatalErr = err
		h.log.Error("this node stops: it cannot go on safely; see the error, then restart it (its log is read back from disk at start)", "error", err)
		close(h.fatal)
	})
}

// stopHere halts the node with err and never returns. It is for a storage
// call whose failure the Raft library answers with a panic (saving a new
// term, reading back an entry it applies): the caller's goroutine waits
// here while the process stops on Fatal, so the node exits naming the
// fault instead of crashing, and serves nothing it could not store or
// read back.
func (h *storageHealth) stopHere(err error) {
	h.halt(err)
	select {}
}

// outcome reports the outcome of a write of kind, which is cheap for a
// successful write while nothing blocks writes.
func (h *storageHealth) outcome(kind string, err error) {
	if err != nil || h.blocked.Load() {
		h.report(kind, err)
	}
}

// failing reports whether writes of kind fail.
func (h *storageHealth) failing(kind string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.faults[kind]
	return ok
}

// writeFault returns the fault that keeps this node from writing Raft
// entries or votes (its log or raft.db), or nil.
func (h *storageHealth) writeFault(nodeID string) *StorageError {
	if !h.blocked.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, kind := range []string{StorageLog, StorageStable} {
		if f, ok := h.faults[kind]; ok {
			return &StorageError{NodeID: nodeID, Kind: kind, Err: f.err}
		}
	}
	return nil
}

// stallFault returns the stall of this node's log as the error the node's
// Raft messages and proposals are refused with, or nil while it is not
// stalled. It is cheap while there is none.
func (h *storageHealth) stallFault(nodeID string) error {
	if !h.stalled.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if f, ok := h.faults[StorageLog]; ok && errors.Is(f.err, raftlog.ErrStalled) {
		return &StorageError{NodeID: nodeID, Kind: StorageLog, Err: f.err}
	}
	return nil
}

// stallBegins returns a channel closed when the log stalls (closed already
// if it is stalled).
func (h *storageHealth) stallBegins() <-chan struct{} { return *h.stalling.Load() }

// status returns the current condition.
func (h *storageHealth) status() StorageStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	st := StorageStatus{OK: len(h.faults) == 0, DataDir: h.dataDir, Faults: []StorageFault{}}
	for _, kind := range storageKinds {
		if f, ok := h.faults[kind]; ok {
			st.Faults = append(st.Faults, StorageFault{Kind: kind, Error: f.err.Error(), SinceUnixMs: f.since.UnixMilli()})
		}
	}
	return st
}

// episodeCounts returns the fault episodes started so far, by kind (every
// kind listed).
func (h *storageHealth) episodeCounts() map[string]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]uint64, len(storageKinds))
	for _, kind := range storageKinds {
		out[kind] = h.episodes[kind]
	}
	return out
}

// Repeated Raft library lines that a storage fault causes once per attempt,
// by the kind whose fault explains them.
var (
	writeFaultLines = []string{
		"failed to commit logs",    // the leader's append failed; it steps down
		"failed to append to logs", // a follower's append failed
		"failed to persist vote",
		"failed to make requestVote RPC", // raftGate refused to ask
		"entering candidate state",
		"entering follower state",
		"heartbeat timeout reached, starting election",
		"Election timeout reached, restarting election",
		"pre-vote campaign failed, waiting for election timeout",
		"pre-vote successful, starting election",
	}
	snapshotFaultLines = []string{
		"failed to take snapshot",
		"failed to make snapshot directly",
		"failed to write metadata",
		"failed to create state file",
		"failed to create snapshot to install",
		"failed to finalize snapshot",
	}
)

// holdBack reports whether a library line msg only repeats an ongoing
// fault, counting it in the fault's episode if so.
func (h *storageHealth) holdBack(msg string) bool {
	var kinds []string
	switch {
	case slices.Contains(writeFaultLines, msg):
		if !h.blocked.Load() {
			return false
		}
		kinds = []string{StorageLog, StorageStable}
	case slices.Contains(snapshotFaultLines, msg):
		kinds = []string{StorageSnapshots}
	default:
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, kind := range kinds {
		if f, ok := h.faults[kind]; ok {
			f.held++
			return true
		}
	}
	return false
}

// heldByStall reports whether a library line's arguments carry an error of
// a message raftGate held back because the log is stalled (a heartbeat,
// an append to a follower, ...): a repeat of the stall, counted in its
// episode. It is cheap while the log is not stalled.
func (h *storageHealth) heldByStall(args []interface{}) bool {
	if !h.stalled.Load() {
		return false
	}
	for _, a := range args {
		if err, ok := a.(error); ok && errors.Is(err, errLogStalled) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if f, ok := h.faults[StorageLog]; ok {
				f.held++
			}
			return true
		}
	}
	return false
}

// quietLogger is the Raft library's logger: it holds back the lines that
// repeat an ongoing storage fault (the fault's own start and end lines say
// it once per episode) and, with peers set, sums up failed calls to a peer
// (see peerLogs); it passes everything else on.
type quietLogger struct {
	hclog.Logger
	h     *storageHealth
	peers *peerLogs
}

func (l quietLogger) Log(level hclog.Level, msg string, args ...interface{}) {
	if l.h.holdBack(msg) || l.h.heldByStall(args) || (l.peers != nil && l.peers.holdBack(msg, args)) {
		return
	}
	l.Logger.Log(level, msg, args...)
}

func (l quietLogger) Trace(msg string, args ...interface{}) { l.Log(hclog.Trace, msg, args...) }
func (l quietLogger) Debug(msg string, args ...interface{}) { l.Log(hclog.Debug, msg, args...) }
func (l quietLogger) Info(msg string, args ...interface{})  { l.Log(hclog.Info, msg, args...) }
func (l quietLogger) Warn(msg string, args ...interface{})  { l.Log(hclog.Warn, msg, args...) }
func (l quietLogger) Error(msg string, args ...interface{}) { l.Log(hclog.Error, msg, args...) }

// With returns a quiet logger with the arguments added.
func (l quietLogger) With(args ...interface{}) hclog.Logger {
	return quietLogger{l.Logger.With(args...), l.h, l.peers}
}

// Named returns a quiet sub-logger.
func (l quietLogger) Named(name string) hclog.Logger {
	return quietLogger{l.Logger.Named(name), l.h, l.peers}
}

// ResetNamed returns a quiet logger with its name replaced.
func (l quietLogger) ResetNamed(name string) hclog.Logger {
	return quietLogger{l.Logger.ResetNamed(name), l.h, l.peers}
}

// errStayOut is why raftGate sends no vote request.
var errStayOut = errors.New("this node cannot write its storage: it stays out of elections")

// errLogStalled is why raftGate sends no Raft message while this node's
// log is stalled.
var errLogStalled = errors.New("this node's Raft log is stalled: it sends no Raft messages until the write returns")

// gatedTransport is what raftGate wraps: both Raft transports holdfast
// uses (the network one, and the in-memory one of tests) are such.
type gatedTransport interface {
	raft.Transport
	raft.WithClose
	raft.WithPreVote
}

// raftGate is the Raft transport of a node. While refuse returns an error
// it sends no RequestVote or RequestPreVote and answers them locally with
// that error, so a node that cannot write its log never wins an election
// (and, asking for no pre-votes, never raises the others' term either).
// While hold returns an error (the log is stalled) it sends nothing at all:
// AppendEntries (heartbeats included), the appends of a pipeline,
// InstallSnapshot and TimeoutNow fail locally too. The Raft library's
// leader waits for its own append before anything else, while its
// heartbeats go on beside it; with them held, the followers stop hearing
// from a leader that cannot make its log durable and elect another. What
// this node receives is not gated: a new leader's heartbeat makes it a
// follower once that append returns (see SetHeartbeatHandler).
type raftGate struct {
	gatedTransport
	refuse func() error
	hold   func() error
}

var (
	_ raft.WithClose   = (*raftGate)(nil)
	_ raft.WithPreVote = (*raftGate)(nil)
	_ raft.WithPeers   = (*raftGate)(nil)
)

// RequestVote sends the vote request unless this node must stay out.
func (g *raftGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if err := g.refuse(); err != nil {
		return fmt.Errorf("%w: %w", errStayOut, err)
	}
	return g.gatedTransport.RequestVote(id, target, args, resp)
}

// RequestPreVote sends the pre-vote request unless this node must stay out.
func (g *raftGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if err := g.refuse(); err != nil {
		return fmt.Errorf("%w: %w", errStayOut, err)
	}
	return g.gatedTransport.RequestPreVote(id, target, args, resp)
}

// held returns the error a message is refused with while the log is
// stalled, or nil.
func (g *raftGate) held() error {
	if err := g.hold(); err != nil {
		return fmt.Errorf("%w: %w", errLogStalled, err)
	}
	return nil
}

// AppendEntries sends entries or a heartbeat unless the log is stalled.
func (g *raftGate) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	if err := g.held(); err != nil {
		return err
	}
	return g.gatedTransport.AppendEntries(id, target, args, resp)
}

// AppendEntriesPipeline opens a pipeline whose appends are held like
// AppendEntries; none is opened while the log is stalled.
func (g *raftGate) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	if err := g.held(); err != nil {
		return nil, err
	}
	p, err := g.gatedTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &gatedPipeline{AppendPipeline: p, gate: g}, nil
}

// InstallSnapshot sends a snapshot unless the log is stalled.
func (g *raftGate) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	if err := g.held(); err != nil {
		return err
	}
	return g.gatedTransport.InstallSnapshot(id, target, args, resp, data)
}

// TimeoutNow hands leadership over unless the log is stalled.
func (g *raftGate) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	if err := g.held(); err != nil {
		return err
	}
	return g.gatedTransport.TimeoutNow(id, target, args, resp)
}

// SetHeartbeatHandler keeps the Raft library from handling heartbeats on
// the transport's connection goroutines: every request reaches its main
// loop through Consumer. On that fast path a heartbeat with a newer term
// sets the term and the node's state beside the main loop, which may be
// setting them too (hashicorp/raft issue 695): a node could record a
// newer term and then an older one over it in raft.db while it stored
// entries of the newer term, and so vote twice in a term after a
// restart. A heartbeat now waits behind the appends before it, which
// themselves count as contact from the leader.
func (g *raftGate) SetHeartbeatHandler(func(raft.RPC)) {}

// Connect passes on to a transport with peers to connect (the in-memory
// one); the network transport dials by itself and has none.
func (g *raftGate) Connect(peer raft.ServerAddress, t raft.Transport) {
	if p, ok := g.gatedTransport.(raft.WithPeers); ok {
		p.Connect(peer, t)
	}
}

// Disconnect passes on like Connect.
func (g *raftGate) Disconnect(peer raft.ServerAddress) {
	if p, ok := g.gatedTransport.(raft.WithPeers); ok {
		p.Disconnect(peer)
	}
}

// DisconnectAll passes on like Connect.
func (g *raftGate) DisconnectAll() {
	if p, ok := g.gatedTransport.(raft.WithPeers); ok {
		p.DisconnectAll()
	}
}

// gatedPipeline is a pipeline opened through raftGate: an append sent
// while the log is stalled fails, which makes Raft close the pipeline and
// fall back to single appends, held by the gate as well.
type gatedPipeline struct {
	raft.AppendPipeline
	gate *raftGate
}

// AppendEntries sends an append on the pipeline unless the log is stalled.
func (p *gatedPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	if err := p.gate.held(); err != nil {
		return nil, err
	}
	return p.AppendPipeline.AppendEntries(args, resp)
}

// keyLastVoteCand is the stable-store key under which Raft records the
// candidate it voted for (hashicorp/raft's keyLastVoteCand).
const keyLastVoteCand = "LastVoteCand"

// stableGuard is Raft's stable store (raft.db): it reports its write
// errors as StorageStable faults, and while the node cannot write its log
// it refuses to record a vote for the node itself, so a node alone in its
// configuration (whose own vote is a majority, needing no vote request)
// does not win an election it could not serve either. A vote for another
// candidate is recorded as usual.
type stableGuard struct {
	raft.StableStore
	self   []byte // this node's address as Raft records its own vote
	health *storageHealth
	refuse func() error
}

func (s *stableGuard) Set(key, val []byte) error {
	if string(key) == keyLastVoteCand && string(val) == string(s.self) {
		if err := s.refuse(); err != nil {
			return fmt.Errorf("not voting for itself: %w: %w", errStayOut, err)
		}
	}
	return s.outcome(s.StableStore.Set(key, val))
}

// SetUint64 records a number. Raft cannot go on without saving a new term
// (it panics), so a node that cannot save one stops.
func (s *stableGuard) SetUint64(key []byte, val uint64) error {
	err := s.outcome(s.StableStore.SetUint64(key, val))
	if err != nil && string(key) == string(keyCurrentTerm) {
		s.health.stopHere(fmt.Errorf("raft.db in %s: save the current term %d: %w", s.health.dataDir, val, err))
	}
	return err
}

// outcome reports a write's outcome and returns its error.
func (s *stableGuard) outcome(err error) error {
	s.health.outcome(StorageStable, err)
	return err
}

// typedLog is the log store Raft sees, above its LogCache: the cache turns
// an append's error into text, so the store's own error (which says whether
// the append wrote nothing: raftlog.ErrNoSpace) is taken from below it.
type typedLog struct {
	raft.LogStore
	below *watchedLog
}

func (l *typedLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *typedLog) StoreLogs(logs []*raft.Log) error {
	err := l.LogStore.StoreLogs(logs)
	if err != nil {
		if typed := l.below.lastErr.Swap(nil); typed != nil {
			return *typed
		}
	}
	return err
}

// watchedLog wraps the log store below the cache: it keeps the error of a
// failed append for typedLog and, for a log kept in bolt (whose store has no
// health callback), reports writes' outcomes as StorageStable faults.
type watchedLog struct {
	raft.LogStore
	lastErr atomic.Pointer[error]
	// report, when set, is told each write's outcome.
	report func(error)
	// unreadable, when set, is told of an entry that is there but cannot
	// be read back.
	unreadable func(error)
}

// GetLog reads an entry; one that is there but cannot be read back goes to
// unreadable.
func (l *watchedLog) GetLog(index uint64, log *raft.Log) error {
	err := l.LogStore.GetLog(index, log)
	if err != nil && !errors.Is(err, raft.ErrLogNotFound) && l.unreadable != nil {
		l.unreadable(err)
	}
	return err
}

func (l *watchedLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *watchedLog) StoreLogs(logs []*raft.Log) error {
	err := l.LogStore.StoreLogs(logs)
	if err != nil {
		l.lastErr.Store(&err)
	}
	if l.report != nil {
		l.report(err)
	}
	return err
}

func (l *watchedLog) DeleteRange(min, max uint64) error {
	err := l.LogStore.DeleteRange(min, max)
	if l.report != nil {
		l.report(err)
	}
	return err
}

// openSnapshots opens the snapshot store of the data directory dataDir,
// making its directory (snapshots/) durably first: the file store would
// make it without syncing the data directory.
func openSnapshots(dataDir string, log hclog.Logger, health *storageHealth) (*watchedSnapshots, error) {
	dir := filepath.Join(dataDir, StorageSnapshots)
	if err := atomicfile.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create the snapshot directory: %w", err)
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dataDir, keptSnapshots, log)
	if err != nil {
		return nil, fmt.Errorf("open snapshot store: %w", err)
	}
	return &watchedSnapshots{SnapshotStore: snaps, health: health, dir: dir}, nil
}

// keptSnapshots is how many finished snapshots the store keeps: the newest,
// and one to start from if it is found damaged. As checkpoints of the
// state store each older one keeps the files compactions have replaced
// since it was taken, so more would cost disk, up to a copy of the store
// each.
const keptSnapshots = 2

// watchedSnapshots is the snapshot store: a snapshot that cannot be
// created, written or closed is a StorageSnapshots fault, which the next
// snapshot closed successfully ends.
type watchedSnapshots struct {
	raft.SnapshotStore
	health *storageHealth
	// dir is the store's directory, where a failed Create may leave the
	// temporary directory it made ("TERM-INDEX-MILLISECONDS.tmp"): it is
	// removed, so that a disk that stays full does not collect one per
	// attempt.
	dir string
	// frozen holds the checkpoints of snapshots open while they are read.
	frozen frozenSnapshots
	// level is the cluster's active level (nil: 0), which decides what
	// Open reads a checkpoint as.
	level func() uint32
}

func (s *watchedSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		s.health.report(StorageSnapshots, err)
		if s.dir != "" {
			names, _ := unfinishedSnapshots(s.dir) // unreadable: nothing to remove
			prefix := fmt.Sprintf("%d-%d-", term, index)
			for _, name := range names {
				if strings.HasPrefix(name, prefix) {
					_ = os.RemoveAll(filepath.Join(s.dir, name))
				}
			}
		}
		return nil, err
	}
	w := &watchedSink{SnapshotSink: sink, health: s.health}
	if s.dir != "" {
		w.dir = filepath.Join(s.dir, sink.ID()+".tmp")
		// The file store writes the state to ID.tmp/state.bin; a second
		// descriptor of it paces its write-out. Without it (a store of
		// another layout) the final sync writes everything at once.
		if f, err := os.Open(filepath.Join(s.dir, sink.ID()+".tmp", "state.bin")); err == nil {
			w.file = f
		}
	}
	return w, nil
}

// unfinishedSnapshots lists the snapshot store's temporary directories
// (*.tmp) in dir: snapshots being written, or left unfinished.
func unfinishedSnapshots(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && strings.HasSuffix(e.Name(), ".tmp") {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// snapshotWriteOut is how many bytes of a snapshot are written between two
// write-outs of its file to the disk (see watchedSink).
const snapshotWriteOut = 1 << 20

// watchedSink reports a snapshot's write and close errors, and a
// successful close. With the snapshot's file open (file), it writes the
// file out to the disk every snapshotWriteOut bytes as it goes: a state of
// a hundred megabytes synced at once at the end kept every append of the
// Raft log on the same disk waiting for up to seconds. With the
// snapshot's directory known (dir), it syncs it before the file store
// finishes the snapshot (see Close).
type watchedSink struct {
	raft.SnapshotSink
	health  *storageHealth
	dir     string   // the snapshot's directory while it is written (ID.tmp); "": not synced here
	file    *os.File // the snapshot's state file, read-only; nil: no pacing
	written int64    // bytes written since the last write-out
	// closed is set by the first Close: the state machine's Persist
	// closes the sink and Raft closes it again, which the file store
	// answers with nil.
	closed bool
}

func (s *watchedSink) Write(p []byte) (int, error) {
	n, err := s.SnapshotSink.Write(p)
	if err != nil {
		s.health.report(StorageSnapshots, err)
	}
	s.written += int64(n)
	if s.file != nil && s.written >= snapshotWriteOut {
		s.written = 0
		// Only a pace: a failure here changes nothing, the final sync
		// still makes the file durable or reports it.
		_ = raftlog.WriteOut(s.file, 0, 0)
	}
	// Writing a large state takes seconds of CPU, in chunks of tens of
	// KiB: after each, the goroutines waiting to run (requests) go first,
	// rather than wait until the scheduler preempts the writer.
	runtime.Gosched()
	return n, err
}

// Close finishes the snapshot. The file store syncs the state and meta
// files, renames ID.tmp to ID and syncs the snapshots directory, but never
// syncs ID.tmp itself: after a power loss ID could be there and empty, and
// Raft compacts its log once Close returns. So the directory, whose
// entries (meta.json, state.bin) the store made when it created the sink,
// is synced first; if that fails the snapshot is cancelled.
func (s *watchedSink) Close() error {
	var err error
	if s.dir != "" && !s.closed {
		if err = atomicfile.SyncDir(s.dir); err != nil {
			err = fmt.Errorf("snapshot %s: %w", s.ID(), err)
			_ = s.SnapshotSink.Cancel()
		}
	}
	s.closed = true
	if err == nil {
		err = s.SnapshotSink.Close()
	}
	s.health.report(StorageSnapshots, err)
	s.release()
	return err
}

// Cancel implements raft.SnapshotSink.
func (s *watchedSink) Cancel() error {
	err := s.SnapshotSink.Cancel()
	s.release()
	return err
}

// release closes the pacing descriptor of the snapshot's file.
func (s *watchedSink) release() {
	if s.file != nil {
		_ = s.file.Close()
		s.file = nil
	}
}

// snapshotRetryLoop takes a snapshot again, every SnapshotRetry, while the
// last one could not be written: otherwise the next is taken only after
// SnapshotThreshold more entries, and the fault (with /readyz) would outlast
// its cause. A snapshot that closes ends the fault; with nothing new to
// snapshot, a probe file written and synced in the snapshots directory
// does.
func (n *Node) snapshotRetryLoop() {
	n.every(n.cfg.SnapshotRetry, func() {
		if !n.storage.failing(StorageSnapshots) {
			return
		}
		// A failure is reported by the snapshot store itself.
		if err := n.raft.Snapshot().Error(); errors.Is(err, raft.ErrNothingNewToSnapshot) {
			n.storage.report(StorageSnapshots, probeDir(filepath.Join(n.cfg.DataDir, StorageSnapshots)))
		}
	})
}

// probeDir writes, syncs and removes a small file in dir.
func probeDir(dir string) error {
	f, err := os.CreateTemp(dir, "probe-*.tmp")
	if err != nil {
		return fmt.Errorf("probe the snapshots directory: %w", err)
	}
	_, err = f.Write(make([]byte, 4096))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if rerr := os.Remove(f.Name()); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("probe the snapshots directory: %w", err)
	}
	return nil
}

// Storage returns this node's storage condition.
func (n *Node) Storage() StorageStatus { return n.storage.status() }

// StorageFaults returns the storage fault episodes started since the node
// started, by kind (every kind listed).
func (n *Node) StorageFaults() map[string]uint64 { return n.storage.episodeCounts() }

// WriteFault returns why this node cannot write Raft entries (its log or
// raft.db fails), or nil when it can.
func (n *Node) WriteFault() *StorageError { return n.storage.writeFault(n.cfg.NodeID) }

// Fatal returns a channel closed when the node's storage failed in a way
// that cannot be retried (a failed fdatasync or deletion of the log's
// suffix): memory and disk may disagree, so the process must stop. FatalErr
// then says why.
func (n *Node) Fatal() <-chan struct{} { return n.storage.fatal }

// FatalErr returns why Fatal was closed, or nil.
func (n *Node) FatalErr() error {
	select {
	case <-n.storage.fatal:
		return n.storage.fatalErr
	default:
		return nil
	}
}

// logStall returns the stall of this node's log as a StorageError, or nil
// while its log is not stalled: raftGate sends no Raft message, and the
// node proposes nothing and confirms no read, while it is set.
func (n *Node) logStall() error { return n.storage.stallFault(n.cfg.NodeID) }

// refuseElections returns why this node must stay out of elections now
// (its log or raft.db cannot be written), or nil. A log that failed for
// want of space reports itself writable again once its file system has
// room, without waiting for an append a node out of elections may never
// be sent.
func (n *Node) refuseElections() error {
	if f := n.storage.writeFault(n.cfg.NodeID); f != nil {
		return f
	}
	return nil
}

// appendError maps the error of a leader's failed append: a StorageError
// when nothing was written for want of space, ErrOutcomeUnknown wrapping
// one when the log can no longer be trusted; nil for any other error.
func (n *Node) appendError(err error) error {
	switch {
	case errors.Is(err, raftlog.ErrPoisoned):
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, &StorageError{NodeID: n.cfg.NodeID, Kind: StorageLog, Err: err})
	case errors.Is(err, raftlog.ErrNoSpace):
		return &StorageError{NodeID: n.cfg.NodeID, Kind: StorageLog, Err: err}
	}
	return nil
}
