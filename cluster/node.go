package cluster

import (
	"context"
	"errors"
	"fmt"
	"math"

	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/atomicfile"
	"github.com/holdfast/holdfast/internal/raftlog"
	"github.com/holdfast/holdfast/internal/statestore"
	"github.com/holdfast/holdfast/internal/tlsconf"
)

// Node is one member of a holdfast cluster.
type Node struct {
	cfg       Config
	log       hclog.Logger
	fsm       *fsm.FSM
	state     *statestore.Store // the state machine's records
	raft      *raft.Raft
	transport *raft.NetworkTransport
	stream    *tlsStream         // nil without a peer identity
	store     *mappedBolt        // the stable store, and the log store of a data dir made before raftlog
	logs      raft.LogStore      // the Raft log: a *raftlog.Store, or store
	snaps     raft.SnapshotStore // the snapshots, which backups are read from
	wal       *raftlog.Store     // nil when the log is in bolt
	watched   *watchedLog        // the log store below Raft's log cache
	storage   *storageHealth
	peers     *peerLogs // sums up the Raft library's failed calls to peers
	// joinNames maps each address a DNS join entry resolved to, at its
	// latest lookup, to the name looked up.
	joinNames atomic.Pointer[map[string]string]

	notifyCh   chan bool
	proposeCh  chan *proposal
	proposals  sync.Pool // of *proposal, reused once answered
	shutdownCh chan struct{}
	// diskFree is the data directory's free space as last read, and
	// diskUnread whether the last read failed (see readDiskFree).
	diskFree   atomic.Uint64
	diskUnread atomic.Bool
	closeOnce  sync.Once
	wg         sync.WaitGroup

	lead     leadership
	clock    clockGuard
	counters counters
	levels   levels
	marks    levelMarks
	// memberLevel is held while a voter is checked and added, and while
	// the level is checked against the configuration and raised, so
	// neither happens between the other's check and its change: a joiner
	// checked against level 0 is never added after the level rose, nor
	// the level raised over a configuration that gained a member since.
	memberLevel sync.Mutex
}

// ErrDataDirInUse is returned by Open when another process holds the data
// directory's lock.
var ErrDataDirInUse = errors.New("the data directory is in use")

// Open starts a node: it opens (or creates) the stores under DataDir,
// starts Raft, and, for a node without existing state, bootstraps or joins
// as the configuration says. It returns once Raft is running; forming or
// joining a cluster continues in the background.
func Open(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("cluster config: %w", err)
	}
	if err := atomicfile.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	n := &Node{
		cfg:        cfg,
		log:        cfg.Logger.Named("cluster"),
		notifyCh:   make(chan bool, 8),
		proposeCh:  make(chan *proposal, 4*maxBatch),
		shutdownCh: make(chan struct{}),
	}
	n.storage = newStorageHealth(cfg.DataDir, n.log.Named("storage"), cfg.Now)
	if err := n.openStores(); err != nil {
		n.closeStores()
		return nil, err
	}
	if err := n.openState(); err != nil {
		n.closeStores()
		return nil, err
	}
	// No results until this node proposes: the flusher says from which term.
	n.fsm.ResultsFrom(math.MaxUint64)
	if err := n.removeUnfinishedSnapshots(); err != nil {
		n.closeStores()
		return nil, err
	}
	snaps, err := openSnapshots(cfg.DataDir, quietLogger{cfg.Logger.Named("snapshots"), n.storage, nil}, n.storage)
	if err != nil {
		n.closeStores()
		return nil, err
	}
	snaps.level = n.fsm.Level
	n.snaps = snaps
	recorded, err := checkLevelRecord(n.store)
	if err != nil {
		n.closeStores()
		return nil, err
	}
	n.levels.recorded = recorded
	if err := n.checkSnapshots(snaps, n.logs); err != nil {
		n.closeStores()
		return nil, fmt.Errorf("%w; to bring this node back, empty its data directory and start it again with --join <a member's HTTP address> under the same --node-id (the README's \"Storage faults\")", err)
	}
	hasState, err := raft.HasExistingState(n.logs, n.store, snaps)
	if err != nil {
		n.closeStores()
		return nil, fmt.Errorf("inspect existing raft state: %w", err)
	}
	created, err := createdLevel(n.store, hasState)
	if err != nil {
		n.closeStores()
		return nil, err
	}
	if err := checkUpgradePath(max(recorded, n.marks.marked.Load()), created, fsm.BuildLevel, hasState); err != nil {
		n.closeStores()
		return nil, err
	}
	// The log cache keeps recent entries in memory, so replicating them does
	// not read them back from disk.
	cache, err := raft.NewLogCache(1024, n.watched)
	if err != nil {
		n.closeStores()
		return nil, fmt.Errorf("create log cache: %w", err)
	}
	logs := &levelLog{LogStore: &typedLog{LogStore: cache, below: n.watched}, marks: &n.marks}
	stable := &stableGuard{StableStore: n.store, self: []byte(n.transport.LocalAddr()), health: n.storage, refuse: n.refuseElections}
	trans := &raftGate{gatedTransport: n.transport, refuse: n.refuseElections, hold: n.logStall}
	current, err := n.stateIsCurrent(n.watched)
	if err != nil {
		n.closeStores()
		return nil, err
	}
	conf := n.raftConfig()
	conf.NoSnapshotRestoreOnStart = current
	r, err := raft.NewRaft(conf, durableFSM{FSM: n.fsm, state: n.state, log: n.log}, logs, stable, n.snaps, trans)
	if err != nil {
		n.closeStores()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	if n.stream != nil {
		n.stream.setExpected(n.membersAt)
	}
	n.log.Info("raft started", "node_id", cfg.NodeID, "raft_addr", n.RaftAddr(), "http_addr", cfg.HTTPAdvertise, "existing_state", hasState)
	if f := r.GetConfiguration(); f.Error() == nil {
		if was, moved := movedAddress(f.Configuration(), cfg.NodeID, n.RaftAddr()); moved {
			n.log.Warn("the cluster knows this node at another Raft address, so until the leader records this one its peers cannot reach it here and it cannot win an election; it asks the leader through the members' HTTP addresses it knows and --join's: if no member answers, start it with --join <a member's HTTP address>, or at the old address",
				"configured_raft_addr", was, "raft_addr", n.RaftAddr(), "has_join", len(cfg.Join) > 0)
		}
	}

	n.goLoop(n.watchLeadership)
	n.goLoop(n.watchPeers)
	n.goLoop(n.flush)
	n.goLoop(n.registerLoop)
	n.goLoop(n.clockLoop)
	n.goLoop(n.snapshotRetryLoop)
	n.readDiskFree()
	n.goLoop(n.keyFilterLoop)
	n.goLoop(n.diskLoop)
	alone := len(cfg.Join) == 0 && cfg.BootstrapExpect <= 1
	switch {
	case cfg.Restore != nil && hasState:
		_ = n.Shutdown(context.Background())
		return nil, fmt.Errorf("%w: %s already holds Raft state; restore into an empty data directory", ErrRestoreRefused, cfg.DataDir)
	case cfg.Restore != nil && !alone:
		_ = n.Shutdown(context.Background())
		return nil, fmt.Errorf("%w: the first node of the new cluster must bootstrap alone (no --join, --bootstrap-expect at most 1); the others join it after the restore", ErrRestoreRefused)
	case !hasState && alone:
		if err := n.bootstrapSelf(); err != nil {
			_ = n.Shutdown(context.Background())
			return nil, err
		}
	case !hasState:
		n.goLoop(n.formLoop)
	}
	if cfg.Restore != nil {
		if err := n.restore(cfg.Restore); err != nil {
			_ = n.Shutdown(context.Background())
			return nil, err
		}
	}
	return n, nil
}

// movedAddress reports the Raft address a configuration of several voters
// holds for id when it is not addr: the node now listens (or advertises)
// somewhere its peers do not dial.
func movedAddress(c raft.Configuration, id, addr string) (string, bool) {
	if len(c.Servers) < 2 {
		return "", false
	}
	for _, s := range c.Servers {
		if string(s.ID) == id && string(s.Address) != addr {
			return string(s.Address), true
		}
	}
	return "", false
}

func (n *Node) openStores() error {
	// bbolt reads its meta pages before it maps the file and calls any
	// failure to read them an invalid database; a disk that fails the read
	// is named as such instead.
	if err := readMetaPages(n.cfg.boltPath()); err != nil {
		return err
	}
	var store *raftboltdb.BoltStore
	err := mappedRead(n.cfg.boltPath(), func() (err error) {
		store, err = raftboltdb.New(raftboltdb.Options{
			Path:                    n.cfg.boltPath(),
			BoltOptions:             &bbolt.Options{Timeout: 2 * time.Second, NoFreelistSync: true, FreelistType: bbolt.FreelistMapType},
			MsgpackUseNewTimeFormat: true,
		})
		return err
	})
	if errors.Is(err, bbolt.ErrTimeout) {
		return fmt.Errorf("%w: %s is locked by another process (another holdfast serving this --data-dir?): stop it, or give this node a data directory of its own", ErrDataDirInUse, n.cfg.boltPath())
	}
	if err != nil {
		return fmt.Errorf("open bolt store %s: %w", n.cfg.boltPath(), err)
	}
	n.store = &mappedBolt{b: store, path: n.cfg.boltPath()}
	// bbolt syncs its file but never the directory holding it: without
	// this a power loss can take a new raft.db away, with the term, the
	// vote and the segment list in it.
	if err := atomicfile.SyncDir(n.cfg.DataDir); err != nil {
		return fmt.Errorf("make %s durable: %w", n.cfg.boltPath(), err)
	}
	if err := n.openLog(); err != nil {
		return err
	}

	tc := &raft.NetworkTransportConfig{
		ServerAddressProvider:   dialOverrides(n.cfg.RaftPeerAddrs),
		Logger:                  n.cfg.Logger.Named("raft-net"),
		MaxPool:                 4,
		Timeout:                 10 * time.Second,
		MsgpackUseNewTimeFormat: true,
	}
	if n.cfg.Peer == nil {
		stream, err := newTCPStream(n.cfg.RaftBind, n.cfg.RaftAdvertise, n.shutdownCh)
		if err != nil {
			return fmt.Errorf("start raft transport on %s: %w", n.cfg.RaftBind, err)
		}
		tc.Stream = stream
		n.transport = raft.NewNetworkTransportWithConfig(tc)
		return nil
	}
	stream, err := newTLSStream(n.cfg.RaftBind, n.cfg.RaftAdvertise, n.cfg.Peer, n.cfg.Logger.Named("raft-tls"), n.shutdownCh)
	if err != nil {
		return fmt.Errorf("start raft TLS transport on %s: %w", n.cfg.RaftBind, err)
	}
	tc.Stream = stream
	n.stream = stream
	n.transport = raft.NewNetworkTransportWithConfig(tc)
	return nil
}

// membersAt returns the ids of the members this node dials at a Raft
// address: by its dial overrides, and by the configuration it knows.
func (n *Node) membersAt(addr raft.ServerAddress) []string {
	var ids []string
	for id, a := range n.cfg.RaftPeerAddrs {
		if raft.ServerAddress(a) == addr {
			ids = append(ids, id)
		}
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			if s.Address == addr && !slices.Contains(ids, string(s.ID)) {
				ids = append(ids, string(s.ID))
			}
		}
	}
	return ids
}

// PeerURL is the URL of path on another node's HTTP listener at addr:
// HTTPS when this node has a peer identity.
func (n *Node) PeerURL(addr, path string) string {
	if n.cfg.Peer != nil {
		return "https://" + addr + path
	}
	return "http://" + addr + path
}

// Peer returns this node's peer identity, or nil without peer TLS.
func (n *Node) Peer() *tlsconf.Peer { return n.cfg.Peer }

// openLog opens the Raft log: the segment log under DataDir/raft-log,
// unless the data dir predates it and keeps its log in bolt.
func (n *Node) openLog() error {
	path := n.cfg.logPath()
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		last, err := n.store.LastIndex()
		if err != nil {
			return fmt.Errorf("inspect bolt log store: %w", err)
		}
		if last > 0 {
			n.log.Info("keeping the raft log in bolt: this data dir was made before the segment log", "last_index", last)
			n.logs = n.store
			n.watched = &watchedLog{LogStore: n.store, report: func(err error) { n.storage.outcome(StorageStable, err) }}
			return nil
		}
	}
	marked, err := checkLevelMark(path)
	if err != nil {
		return err
	}
	n.marks.dir = path
	n.marks.marked.Store(marked)
	wal, err := raftlog.Open(path, raftlog.Options{
		SegmentSize: n.cfg.LogSegmentSize,
		Warn:        n.log.Named("raftlog").Warn,
		Manifest:    boltManifest{n.store},
		Health:      func(err error) { n.storage.report(StorageLog, err) },
		StallAfter:  n.cfg.LogStallAfter,
	})
	if err == nil {
		if err = checkTermCoversLog(n.store, wal); err != nil {
			_ = wal.Close()
		}
	}
	if errors.Is(err, raftlog.ErrCorrupt) {
		return fmt.Errorf("open raft log %s: %w; this node cannot prove it holds what it acknowledged, so it does not start: "+
			"keep a copy of its data directory to study it, empty the directory and start the node again with --join <a member's HTTP address> under the same --node-id (the README's \"Storage faults\")", path, err)
	}
	if err != nil {
		return fmt.Errorf("open raft log %s: %w", path, err)
	}
	n.wal, n.logs = wal, wal
	n.watched = &watchedLog{LogStore: wal, report: func(err error) {
		// The store's health callback reports the rest; a poisoned store
		// is reported here too, so the process stops whichever path saw it.
		if errors.Is(err, raftlog.ErrPoisoned) {
			n.storage.report(StorageLog, err)
		}
	}, unreadable: func(err error) {
		// Raft panics on an entry it cannot read back while applying.
		n.storage.stopHere(fmt.Errorf("the Raft log in %s: %w", path, err))
	}}
	return nil
}

func (n *Node) closeStores() {
	if n.transport != nil {
		_ = n.transport.Close()
	}
	if n.wal != nil {
		if err := n.wal.Close(); err != nil {
			n.log.Error("close raft log", "error", err)
		}
	}
	if n.store != nil {
		if err := n.store.Close(); err != nil {
			n.log.Error("close bolt store", "error", err)
		}
	}
	if n.state != nil {
		if err := n.state.Close(); err != nil {
			n.log.Error("close state store", "error", err)
		}
	}
}

func (n *Node) raftConfig() *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = raft.ServerID(n.cfg.NodeID)
	raftLog := n.cfg.Logger.Named("raft")
	n.peers = newPeerLogs(raftLog, nil)
	c.Logger = quietLogger{raftLog, n.storage, n.peers}
	c.NotifyCh = n.notifyCh
	c.BatchApplyCh = true
	c.MaxAppendEntries = n.cfg.MaxAppendEntries
	c.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	c.ElectionTimeout = n.cfg.ElectionTimeout
	c.LeaderLeaseTimeout = n.cfg.LeaderLeaseTimeout
	c.CommitTimeout = n.cfg.CommitTimeout
	c.SnapshotThreshold = n.cfg.SnapshotThreshold
	c.SnapshotInterval = n.snapshotInterval(n.fsm.Level())
	c.TrailingLogs = n.cfg.TrailingLogs
	return c
}

// snapshotInterval is the SnapshotInterval Raft should use at a cluster
// level: the configured one or, left at 0, the level's. From
// CheckpointLevel a snapshot is cheap, and a store file that compactions
// replaced stays on disk until no kept checkpoint links it: checking every
// 30 s keeps the two kept checkpoints young. Below it a snapshot encodes
// the whole state, which every 120 s is often enough.
func (n *Node) snapshotInterval(level uint32) time.Duration {
	switch {
	case n.cfg.SnapshotInterval > 0:
		return n.cfg.SnapshotInterval
	case level >= CheckpointLevel:
		return 30 * time.Second
	default:
		return 120 * time.Second
	}
}

// bootstrapSelf forms a new cluster of this node alone. It keeps the plan
// of that cluster, its one member speaking this node's build's level, so
// that its first term as leader starts it at that level (startAtBootLevel)
// as a cluster formed with bootstrap-expect starts at its members'. A
// member whose data was wiped, started again without Join, comes here too
// and forms a cluster apart from its old one: the plan counts only this
// node and is acted on only while the configuration is still the one
// bootstrapped here, so it raises no level but that of the cluster this
// node forms alone.
func (n *Node) bootstrapSelf() error {
	conf := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter,
		ID:       raft.ServerID(n.cfg.NodeID),
		Address:  n.transport.LocalAddr(),
	}}}
	plan := &bootPlan{servers: slices.Clone(conf.Servers), level: n.speaks()}
	n.levels.planBoot(plan)
	if err := n.raft.BootstrapCluster(conf).Error(); err != nil {
		n.levels.planBoot(nil)
		return fmt.Errorf("bootstrap single-node cluster: %w", err)
	}
	n.log.Info("bootstrapped a single-node cluster", "level", plan.level)
	return nil
}

// every calls f every d until Shutdown begins.
func (n *Node) every(d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-n.shutdownCh:
			return
		case <-t.C:
			f()
		}
	}
}

// goLoop runs f in a goroutine that Shutdown waits for.
func (n *Node) goLoop(f func()) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// FSM returns the node's state machine, for local (stale) reads.
func (n *Node) FSM() *fsm.FSM { return n.fsm }

// ID returns the node's Raft server id.
func (n *Node) ID() string { return n.cfg.NodeID }

// RaftAddr returns the Raft address other nodes dial.
func (n *Node) RaftAddr() string { return string(n.transport.LocalAddr()) }

// HTTPAddr returns this node's advertised HTTP address.
func (n *Node) HTTPAddr() string { return n.cfg.HTTPAdvertise }

// ClusterKey returns the shared node-to-node secret ("" when none is configured).
func (n *Node) ClusterKey() string { return n.cfg.ClusterKey }

// Now returns the node's wall clock in Unix milliseconds.
func (n *Node) Now() int64 { return n.cfg.Now().UnixMilli() }

// IsLeader reports whether Raft considers this node the leader.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Leader returns the leader's id and HTTP address as far as this node
// knows; either may be empty.
func (n *Node) Leader() (id, httpAddr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	info, _ := n.fsm.Node(string(lid))
	return string(lid), info.HTTPAddr
}

// TransferLeadership hands leadership to another voter if this node leads
// and has a peer to hand it to; ctx bounds the handover. The node keeps
// serving as a follower afterwards.
func (n *Node) TransferLeadership(ctx context.Context) {
	if !n.IsLeader() || n.voters() < 2 {
		return
	}
	if err := await(ctx, n.raft.LeadershipTransfer()); err != nil {
		n.log.Warn("leadership transfer failed", "error", err)
		return
	}
	n.log.Info("handed leadership over")
}

// LeaderDialAddr returns the HTTP address this node dials to reach the
// leader (the directory's, unless a dial override names another), or "".
func (n *Node) LeaderDialAddr() string {
	id, addr := n.Leader()
	if id == "" {
		return ""
	}
	return n.httpDialAddr(id, addr)
}

// httpDialAddr applies the HTTP dial override for member id, if any.
func (n *Node) httpDialAddr(id, addr string) string {
	if a, ok := n.cfg.HTTPPeerAddrs[id]; ok {
		return a
	}
	return addr
}

// dialOverrides turns an id → address map into Raft's address provider;
// nil when there are no overrides.
func dialOverrides(m map[string]string) raft.ServerAddressProvider {
	if len(m) == 0 {
		return nil
	}
	return addrProvider(m)
}

type addrProvider map[string]string

// ServerAddr implements raft.ServerAddressProvider; an unknown id falls back
// to the configuration's address.
func (p addrProvider) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if a, ok := p[string(id)]; ok {
		return raft.ServerAddress(a), nil
	}
	return "", fmt.Errorf("no dial override for %s", id)
}

// Shutdown stops the node gracefully: a leader first hands leadership to
// another voter, then Raft stops and the stores close.
func (n *Node) Shutdown(ctx context.Context) error {
	n.TransferLeadership(ctx)
	return n.stop()
}

// Kill stops the node without handing leadership over, as close to a crash
// as a process can get while staying alive. It is meant for tests.
func (n *Node) Kill() error { return n.stop() }

func (n *Node) stop() error {
	var err error
	n.closeOnce.Do(func() {
		close(n.shutdownCh)
		if e := n.raft.Shutdown().Error(); e != nil {
			err = fmt.Errorf("raft shutdown: %w", e)
		}
		n.lead.lose()
		n.wg.Wait()
		n.closeStores()
		n.log.Info("node stopped")
	})
	return err
}

func (n *Node) voters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// sleep waits d or until shutdown; it reports false on shutdown.
func (n *Node) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.shutdownCh:
		return false
	}
}

var errShutdown = errors.New("node is shutting down")
