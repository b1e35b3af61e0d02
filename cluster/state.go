package cluster

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/statestore"
)

// StateDir is the directory under the data directory that holds the
// state machine's records (internal/statestore).
const StateDir = "state"

// stateStore is the state store as the state machine sees it.
type stateStore struct{ s *statestore.Store }

// StateStore is st as the state machine sees it, for tools that open a
// state machine on a store of their own (fsm.Open).
func StateStore(st *statestore.Store) fsm.Store { return stateStore{st} }

var _ fsm.Store = stateStore{}

func (a stateStore) Get(key []byte) ([]byte, bool, error) { return a.s.Get(key) }

func (a stateStore) Scan(lower, upper []byte, fn func(k, v []byte) bool) error {
	return a.s.Scan(lower, upper, fn)
}

func (a stateStore) Begin() fsm.StoreBatch { return a.s.Begin() }

func (a stateStore) Applied() uint64 { return a.s.Applied() }

func (a stateStore) View() (fsm.View, error) { return a.s.View() }

func (a stateStore) Replace(index uint64, fill func(w fsm.Writer) error) error {
	return a.s.Replace(index, func(w *statestore.Writer) error { return fill(w) })
}

// openState opens the state store under the data directory and the state
// machine on it.
func (n *Node) openState() error {
	st, err := statestore.Open(filepath.Join(n.cfg.DataDir, StateDir), statestore.Options{Logger: n.cfg.Logger.Named("state")})
	if err != nil {
		return err
	}
	f, err := fsm.Open(stateStore{st})
	if err != nil {
		_ = st.Close()
		return err
	}
	n.state, n.fsm = st, f
	return nil
}

// stateIsCurrent reports whether the state store holds every entry of the
// newest snapshot, so Raft need not restore it at start: the log after it
// is applied again, and the state machine skips what the store has.
//
// The store records the last entry the state machine applied, and Raft
// hands it neither its no-op entries (one per new leader) nor barriers,
// while a snapshot's index is the last entry of any kind: a store behind
// the snapshot by such entries alone holds its state. So the entries
// between are read from the log, and any other kind, or one the log no
// longer has, means the snapshot is restored.
func (n *Node) stateIsCurrent(logs raft.LogStore) (bool, error) {
	snaps, err := n.snaps.List()
	if err != nil {
		return false, fmt.Errorf("list snapshots: %w", err)
	}
	if len(snaps) == 0 {
		return true, nil
	}
	for i := n.state.Applied() + 1; i <= snaps[0].Index; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			if errors.Is(err, raft.ErrLogNotFound) {
				return false, nil
			}
			return false, fmt.Errorf("read log entry %d: %w", i, err)
		}
		if l.Type != raft.LogNoop && l.Type != raft.LogBarrier {
			return false, nil
		}
	}
	return true, nil
}

// durableFSM is the state machine as Raft sees it. Raft compacts its log
// below a snapshot once the snapshot is persisted, and the state store
// syncs nothing on its own: so the snapshot first makes the store durable
// up to at least its index.
type durableFSM struct {
	*fsm.FSM
	state *statestore.Store
	log   hclog.Logger
}

// Snapshot implements raft.FSM. From CheckpointLevel on, it sets the state
// store's memtable aside for flushing, which takes no time, so that
// Persist can keep the snapshot as a checkpoint of the store as of this
// moment once the flush is done.
func (d durableFSM) Snapshot() (raft.FSMSnapshot, error) {
	s, err := d.FSM.Snapshot()
	if err != nil {
		return nil, err
	}
	snap := flushingSnapshot{FSMSnapshot: s, state: d.state, log: d.log}
	if d.FSM.Level() >= CheckpointLevel {
		if flushed, err := d.state.StartFlush(); err == nil {
			snap.flushed, snap.applied = flushed, d.state.Applied()
		}
	}
	return snap, nil
}

// Restore implements raft.FSM. A snapshot that is a state store's files
// (ArchiveLevel) becomes the store, once they are whole, open and hold
// the index the archive says, and the state machine reads its state from
// them; one in the state machine's format is written into a new store
// record by record.
func (d durableFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	br := bufio.NewReaderSize(rc, 64<<10)
	if head, _ := br.Peek(len(archiveMagic)); !isArchive(head) {
		return d.FSM.Restore(io.NopCloser(br))
	}
	start := time.Now()
	var applied uint64
	err := d.FSM.RestoreStore(func(check func(fsm.Reader) error) error {
		return d.state.ReplaceFiles(func(dir string) (err error) {
			applied, err = readArchive(br, dir)
			return err
		}, func(fz *statestore.Frozen) error {
			if fz.Applied() != applied {
				return fmt.Errorf("%w: the store holds entries up to %d, the archive says %d", errArchive, fz.Applied(), applied)
			}
			return check(fz)
		})
	})
	if err != nil {
		return fmt.Errorf("install the state store received: %w", err)
	}
	d.log.Info("installed the state store received", "applied", applied, "seconds", time.Since(start).Seconds())
	return nil
}

type flushingSnapshot struct {
	raft.FSMSnapshot
	state *statestore.Store
	// flushed, when set, is closed once the store is durable up to
	// applied, the index of the snapshot's state.
	flushed <-chan struct{}
	applied uint64
	log     hclog.Logger
}

// Persist keeps the snapshot as a checkpoint of the state store when it
// can (see persistCheckpoint); otherwise it flushes the store and writes
// the state in the state machine's format.
func (s flushingSnapshot) Persist(sink raft.SnapshotSink) error {
	if dir, ok := checkpointDirOf(sink); ok && s.flushed != nil {
		kept, err := persistCheckpoint(s.state, s.flushed, s.applied, dir, sink)
		if err != nil {
			_ = sink.Cancel()
			return fmt.Errorf("persist snapshot: %w", err)
		}
		if kept {
			if err := sink.Close(); err != nil {
				return fmt.Errorf("close snapshot sink: %w", err)
			}
			return nil
		}
		s.log.Info("the state store had flushed entries past the snapshot's index when it was checkpointed; writing the snapshot in the state machine's format instead",
			"snapshot", sink.ID(), "index", s.applied)
	}
	if err := s.state.Flush(); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("persist snapshot: %w", err)
	}
	return s.FSMSnapshot.Persist(sink)
}

// keyFilterCheck is how often a node looks whether its state machine
// wants a new key filter (after it opened or restored its state, or when
// the filter took as many keys as it was sized for).
const keyFilterCheck = time.Second

// keyFilterLoop builds the state machine's key filter whenever it wants
// one. A failed build leaves lookups to the store (slower, never wrong)
// and is tried again at the next check.
func (n *Node) keyFilterLoop() {
	t := time.NewTicker(keyFilterCheck)
	defer t.Stop()
	for {
		if n.fsm.KeyFilterWanted() {
			start := time.Now()
			err := n.fsm.BuildKeyFilter(n.shuttingDown)
			if errors.Is(err, fsm.ErrBuildStopped) {
				return
			}
			if err != nil {
				n.log.Warn("could not build the key filter; lookups read the state store", "error", err)
			} else {
				n.log.Debug("built the key filter", "took", time.Since(start))
			}
		}
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
		}
	}
}

// shuttingDown reports whether Shutdown has begun.
func (n *Node) shuttingDown() bool {
	select {
	case <-n.shutdownCh:
		return true
	default:
		return false
	}
}
