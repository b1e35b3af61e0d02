package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/raftlog"
)

// keyClusterLevel is where raft.db records the highest active cluster
// level this node has applied, so that a build below it refuses to start
// on the data directory instead of meeting entries it cannot read.
var keyClusterLevel = []byte("holdfast.cluster.level")

// reportFresh is how recent a member's report of its level must be for
// the leader to count it.
const reportFresh = 5 * time.Second

// bootReportWait bounds how long the first leader of a cluster this node
// formed waits, before it reports ready, for a fresh report from a member
// whose last one has aged: a round of status requests (one a second, each
// bounded by 2 s) and some.
const bootReportWait = 3 * time.Second

// bootstrapIndex is the index of the configuration BootstrapCluster writes:
// the log's first entry.
const bootstrapIndex = 1

// maxBootLog bounds the entries after the bootstrap's that the first
// leader of a new cluster reads to make sure none changed the
// configuration; a longer log is not a new cluster's.
const maxBootLog = 1024

// ErrLevel is wrapped by a LevelError.
var ErrLevel = errors.New("the cluster level is too low")

// LevelError refuses a request that needs a format of a cluster level the
// cluster has not reached: some member still runs a build that cannot
// read it. Nothing was written.
type LevelError struct {
	// Need is the level the request's entry needs; Active the cluster's.
	Need, Active uint32
}

func (e *LevelError) Error() string {
	return fmt.Sprintf("this request needs cluster level %d; the cluster is at level %d until every member runs a build that speaks level %d; nothing was changed",
		e.Need, e.Active, e.Need)
}

// Is makes errors.Is(err, ErrLevel) hold.
func (e *LevelError) Is(target error) bool { return target == ErrLevel }

// memberReport is what a member last said of its build in its status.
type memberReport struct {
	level   uint32
	version string
	at      time.Time
}

// bootPlan is what this node learned of its members' builds when it formed
// a new cluster: the configuration it bootstrapped and the lowest level its
// members' builds speak. Formed with bootstrap-expect, every member of the
// configuration answered its status, and the level is the lowest of theirs
// and this node's build's; bootstrapped alone, the configuration is this
// node and the level its build's.
type bootPlan struct {
	servers []raft.Server
	level   uint32
}

// holds reports whether conf is the configuration the plan bootstrapped:
// the same members at the same addresses.
func (p *bootPlan) holds(conf raft.Configuration) bool {
	return slices.Equal(conf.Servers, p.servers)
}

// bootConfigurationKept reports whether the configuration in force is
// still the one the bootstrap wrote as the log's first entry, with no
// configuration entry after it: nobody was added or removed since, not
// even a member removed and added again, which would leave the same
// configuration. (Raft v1.7.3's GetConfiguration does not say the index of
// the configuration, so the log is read.) What a snapshot covers is not
// read: the newest snapshot must record the bootstrap's entry as the index
// of its configuration, and the log must hold every entry after it. A
// restore installs its backup as such a snapshot, past a gap in the log.
// A log compacted past the bootstrap without such a snapshot, or longer
// than maxBootLog after it, is not a new cluster's.
func bootConfigurationKept(logs raft.LogStore, snaps raft.SnapshotStore) (bool, error) {
	first, err := logs.FirstIndex()
	if err != nil {
		return false, fmt.Errorf("read the log's first index: %w", err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return false, fmt.Errorf("read the log's last index: %w", err)
	}
	metas, err := snaps.List()
	if err != nil {
		return false, fmt.Errorf("list the snapshots: %w", err)
	}
	from := uint64(bootstrapIndex) // the first entry no snapshot covers
	switch {
	case len(metas) > 0 && metas[0].ConfigurationIndex != bootstrapIndex:
		return false, nil
	case len(metas) > 0:
		from = metas[0].Index + 1
	case last < bootstrapIndex:
		return false, nil // no bootstrap entry
	}
	if last >= from && (first > from || last-from > maxBootLog) {
		return false, nil
	}
	var e raft.Log
	for i := from; i <= last; i++ {
		if err := logs.GetLog(i, &e); err != nil {
			return false, fmt.Errorf("read log entry %d: %w", i, err)
		}
		changes := e.Type == raft.LogConfiguration || e.Type == raft.LogAddPeerDeprecated || e.Type == raft.LogRemovePeerDeprecated
		if changes != (i == bootstrapIndex) {
			return false, nil
		}
	}
	return true, nil
}

// levels tracks what the members report of their builds and what this node
// has done about the active level.
type levels struct {
	mu          sync.Mutex
	reports     map[string]memberReport
	config      string    // the configuration the settling time counts from
	configSince time.Time // when config was first seen
	recorded    uint32    // the level last recorded in raft.db
	boot        *bootPlan // set when this process bootstrapped a new cluster, until it acts on it (startAtBootLevel)
}

// report records a member's status answer.
func (l *levels) report(id string, level uint32, version string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.reports == nil {
		l.reports = map[string]memberReport{}
	}
	l.reports[id] = memberReport{level: level, version: version, at: at}
}

// of returns what member id last reported.
func (l *levels) of(id string) (memberReport, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.reports[id]
	return r, ok
}

// planBoot keeps the plan of the cluster this node is bootstrapping (nil:
// none).
func (l *levels) planBoot(p *bootPlan) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.boot = p
}

// takeBoot returns the bootstrap plan, if any, and forgets it: it is acted
// on once only, in this node's first term as leader (after the restore, for
// a cluster that starts from a backup), while the cluster is new.
func (l *levels) takeBoot() *bootPlan {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.boot
	l.boot = nil
	return p
}

// lowestReported is the lowest of from and the levels the members of
// servers other than self reported within reportFresh of now. A member
// with no fresh report is returned as missing, and the level is then not
// to be used.
func (l *levels) lowestReported(servers []raft.Server, self string, from uint32, now time.Time) (level uint32, missing string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	level = from
	for _, s := range servers {
		if string(s.ID) == self {
			continue
		}
		r, ok := l.reports[string(s.ID)]
		if !ok || now.Sub(r.at) > reportFresh {
			return 0, string(s.ID)
		}
		level = min(level, r.level)
	}
	return level, ""
}

// settled reports whether the configuration servers has stood unchanged
// for at least d.
func (l *levels) settled(servers []raft.Server, now time.Time, d time.Duration) bool {
	key := fmt.Sprint(servers)
	l.mu.Lock()
	defer l.mu.Unlock()
	if key != l.config || l.configSince.IsZero() {
		l.config, l.configSince = key, now
	}
	return now.Sub(l.configSince) >= d
}

// levelMarks keeps the log directory's level mark ahead of its entries:
// before an entry that needs a level above the marked one is stored, the
// mark is raised (raftlog.MarkLevel), so a build below the level finds the
// mark, and refuses to start, before it could meet the entry.
type levelMarks struct {
	dir    string // the segment log's directory; "" for a log kept in bolt
	mu     sync.Mutex
	marked atomic.Uint32
}

// need makes sure the log is marked with at least level.
func (m *levelMarks) need(level uint32) error {
	if level <= m.marked.Load() || m.dir == "" {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if level <= m.marked.Load() {
		return nil
	}
	if err := raftlog.MarkLevel(m.dir, level); err != nil {
		return err
	}
	m.marked.Store(level)
	return nil
}

// levelLog stores entries only after their level is marked, and refuses
// entries this build cannot read (a leader of a newer build writing past
// the active level): they are never stored, so never applied.
type levelLog struct {
	raft.LogStore
	marks *levelMarks
}

func (l *levelLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

func (l *levelLog) StoreLogs(logs []*raft.Log) error {
	var need uint32
	for _, e := range logs {
		if e.Type == raft.LogCommand {
			need = max(need, fsm.EntryLevel(e.Data))
		}
	}
	if need > fsm.BuildLevel {
		return fmt.Errorf("%w: an entry from index %d needs cluster level %d, above the level %d this build speaks; it is not stored",
			ErrLevel, logs[0].Index, need, fsm.BuildLevel)
	}
	if err := l.marks.need(need); err != nil {
		return err
	}
	return l.LogStore.StoreLogs(logs)
}

// checkLevelMark refuses a log directory marked with a level above this
// build's, before the log is opened.
func checkLevelMark(dir string) (uint32, error) {
	marked, err := raftlog.MarkedLevel(dir)
	if err != nil {
		return 0, err
	}
	if marked > fsm.BuildLevel {
		return 0, levelTooHigh(uint64(marked))
	}
	return marked, nil
}

// levelTooHigh is the refusal of a data directory at a level above this
// build's.
func levelTooHigh(level uint64) error {
	return fmt.Errorf("this build speaks cluster level %d, but the cluster this data directory belongs to is at level %d: it cannot read what the cluster writes; start a build of level %d or later (the README's \"Upgrading\")",
		fsm.BuildLevel, level, level)
}

// checkUpgradePath refuses to start a build on a data directory written at
// a level more than one below the build's: an upgrade must go through a
// build of each level in turn (the path every release is tested on).
// A fresh data directory takes any level, and so does one a build of this
// level or later created (created), whose cluster's level has not risen
// yet (a new cluster whose first leader could not raise it at once, or one
// with a member of an older build).
func checkUpgradePath(recorded, created, build uint32, hasState bool) error {
	if !hasState || recorded+1 >= build || created >= build {
		return nil
	}
	return fmt.Errorf("this build speaks cluster level %d, and the data directory's cluster is at level %d: upgrades go one level at a time; upgrade every member to a build of level %d first (the README's \"Upgrading\")",
		build, recorded, recorded+1)
}

// keyCreatedLevel records in raft.db the level of the build that created
// the data directory (absent: a build before this record).
var keyCreatedLevel = []byte("holdfast.created.level")

// createdLevel is the level of the build that created the data directory,
// recorded now if the directory is new (hasState false); 0 if a build that
// kept no record created it.
func createdLevel(stable raft.StableStore, hasState bool) (uint32, error) {
	if !hasState {
		if err := stable.SetUint64(keyCreatedLevel, uint64(fsm.BuildLevel)); err != nil {
			return 0, fmt.Errorf("record the level of the build creating the data directory: %w", err)
		}
		return fsm.BuildLevel, nil
	}
	v, err := stable.GetUint64(keyCreatedLevel)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return 0, fmt.Errorf("read the level of the build that created the data directory: %w", err)
	}
	return uint32(min(v, uint64(fsm.BuildLevel))), nil
}

// checkLevelRecord refuses a data directory whose recorded active level is
// above what this build speaks. Called before Raft starts.
func checkLevelRecord(stable raft.StableStore) (uint32, error) {
	v, err := stable.GetUint64(keyClusterLevel)
	if err != nil && !errors.Is(err, raftboltdb.ErrKeyNotFound) {
		return 0, fmt.Errorf("read the recorded cluster level: %w", err)
	}
	if v > uint64(fsm.BuildLevel) {
		return 0, levelTooHigh(v)
	}
	return uint32(v), nil
}

// tendLevel runs once a second: it records a risen level in raft.db and
// takes a snapshot (in the new level's format, which builds below it
// cannot read), stops the node if the cluster went past this build, and,
// on a ready leader, raises the level once every member speaks the next.
func (n *Node) tendLevel() {
	active := n.fsm.Level()
	if active > fsm.BuildLevel {
		n.storage.halt(fmt.Errorf("the cluster is at level %d, above the level %d this build speaks", active, fsm.BuildLevel))
		return
	}
	n.followSnapshotInterval(active)
	n.levels.mu.Lock()
	rose := active > n.levels.recorded
	n.levels.mu.Unlock()
	if rose {
		if err := n.marks.need(active); err != nil {
			n.log.Warn("could not mark the log with the cluster level", "level", active, "error", err)
		}
		if err := n.store.SetUint64(keyClusterLevel, uint64(active)); err != nil {
			n.log.Warn("could not record the cluster level", "level", active, "error", err)
		} else {
			n.levels.mu.Lock()
			n.levels.recorded = active
			n.levels.mu.Unlock()
			n.log.Info("the cluster level rose; taking a snapshot in its format", "level", active)
			if err := n.raft.Snapshot().Error(); err != nil {
				n.log.Warn("snapshot after the cluster level rose", "error", err)
			}
		}
	}
	if n.IsLeader() && n.lead.isReady() && active < fsm.BuildLevel {
		n.raiseLevel(active)
	}
}

// followSnapshotInterval gives Raft the snapshot interval of the active
// level when it differs from the one Raft uses (a node that started below
// CheckpointLevel, or one whose store was behind its snapshot and read its
// level from it).
func (n *Node) followSnapshotInterval(active uint32) {
	rc := n.raft.ReloadableConfig()
	want := n.snapshotInterval(active)
	if rc.SnapshotInterval == want {
		return
	}
	rc.SnapshotInterval = want
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("could not change the snapshot interval", "level", active, "interval", want, "error", err)
		return
	}
	n.log.Info("snapshot interval follows the cluster level", "level", active, "interval", want)
}

// raiseLevel commits the highest level every member of the configuration
// speaks, once the configuration has settled and every member has reported
// recently. Members that report no level (builds before levels) count as
// level 0.
func (n *Node) raiseLevel(active uint32) {
	if !n.memberLevel.TryLock() {
		return // a voter is being added: the configuration is about to change
	}
	defer n.memberLevel.Unlock()
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	now := time.Now()
	target := n.speaks()
	if !plantedLevelGate {
		servers := f.Configuration().Servers
		if !n.levels.settled(servers, now, n.cfg.LevelSettle) {
			return
		}
		var missing string
		if target, missing = n.levels.lowestReported(servers, n.cfg.NodeID, target, now); missing != "" {
			return
		}
	}
	n.proposeLevel(context.Background(), active, target, "raised the cluster level: every member speaks it")
}

// startAtBootLevel runs before the first leader of a cluster this node
// has just formed reports ready, or, for a cluster that starts from a
// backup, once the backup is installed (restore): it raises the level at
// once to the lowest its bootstrap members reported speaking, so a new
// cluster serves everything its builds speak from the moment it is ready.
// It acts only while the configuration is still the bootstrap's, whose
// every member answered this node's status request before it was
// bootstrapped (or is this node alone), and only once each other member
// has reported again within reportFresh (waiting at most bootReportWait
// for it); a member that has not reported is never counted as speaking
// anything. Otherwise the level is left to tendLevel, which raises it once
// the configuration has settled. The settling time is not needed here: it
// lets a member that is briefly out of the configuration (wiped and
// joining again) still count, and a configuration unchanged since the
// bootstrap has nobody out of it.
func (n *Node) startAtBootLevel(ctx context.Context) {
	plan := n.levels.takeBoot()
	if plan == nil || n.fsm.Level() >= plan.level {
		return
	}
	deadline := time.Now().Add(bootReportWait)
	for {
		missing, done := n.bootLevelOnce(ctx, plan)
		if done {
			return
		}
		if time.Now().After(deadline) || !n.sleepCtx(ctx, 100*time.Millisecond) {
			if ctx.Err() == nil {
				n.log.Warn("no fresh report of its build from a bootstrap member; the level rises once the configuration has settled",
					"member", missing, "waited", bootReportWait)
			}
			return
		}
	}
}

// bootLevelOnce is one attempt of startAtBootLevel: done once the level
// is raised or cannot be by the plan, else the member whose fresh report
// is still missing.
func (n *Node) bootLevelOnce(ctx context.Context, plan *bootPlan) (missing string, done bool) {
	n.memberLevel.Lock()
	defer n.memberLevel.Unlock()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		n.log.Warn("could not read the configuration to start the new cluster at its level", "error", err)
		return "", true
	}
	kept, err := bootConfigurationKept(n.logs, n.snaps)
	if err != nil {
		n.log.Warn("could not read the log to start the new cluster at its level", "error", err)
		return "", true
	}
	if !kept || !plan.holds(f.Configuration()) {
		n.log.Info("the configuration changed since this node formed the cluster; the level rises once it has settled")
		return "", true
	}
	target, missing := n.levels.lowestReported(f.Configuration().Servers, n.cfg.NodeID, plan.level, time.Now())
	if missing != "" {
		return missing, false
	}
	n.proposeLevel(ctx, n.fsm.Level(), target, "the new cluster starts at the level every bootstrap member speaks")
	return "", true
}

// proposeLevel commits a SetLevel to target if it is above active, and
// logs why with the outcome.
func (n *Node) proposeLevel(ctx context.Context, active, target uint32, why string) {
	if target <= active {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := n.Propose(ctx, &fsm.SetLevel{Now: n.Now(), Level: target}); err != nil {
		n.log.Warn("could not raise the cluster level", "level", target, "error", err)
		return
	}
	n.log.Info(why, "from", active, "to", target)
}

// speaks is the highest level this node's build speaks, as it reports it
// and counts it for itself.
func (n *Node) speaks() uint32 {
	if n.cfg.testLevel != nil {
		return *n.cfg.testLevel
	}
	return fsm.BuildLevel
}

// checkLevel refuses commands whose entries need a higher level than the
// cluster's. A SetLevel is checked by raiseLevel against the members.
func (n *Node) checkLevel(cmds []fsm.Command) error {
	if plantedLevelGate {
		return nil
	}
	active := n.fsm.Level()
	for _, c := range cmds {
		if _, ok := c.(*fsm.SetLevel); ok {
			continue
		}
		if need := fsm.RequiredLevel(c); need > active {
			return &LevelError{Need: need, Active: active}
		}
	}
	return nil
}

// awaitLevel waits, bounded by ctx, until the cluster's level is at least
// level.
func (n *Node) awaitLevel(ctx context.Context, level uint32) error {
	for n.fsm.Level() < level {
		if !n.sleepCtx(ctx, 50*time.Millisecond) {
			return fmt.Errorf("the cluster level is still %d, %d is needed: %w", n.fsm.Level(), level, ctx.Err())
		}
	}
	return nil
}

// joinerCanFollow refuses to add a node whose build is below the cluster's
// active level: it could not read the entries and snapshots it would be
// sent. The joiner's level is asked of the joiner itself (a build before
// the level reports none: level 0), so the join request stays as older
// builds send it.
func (n *Node) joinerCanFollow(ctx context.Context, req JoinRequest) error {
	active := n.fsm.Level()
	if active == 0 || plantedLevelGate {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	st, err := n.PeerStatus(sctx, n.httpDialAddr(req.NodeID, req.HTTPAddr))
	if err != nil {
		return &MemberError{"http_addr", fmt.Sprintf("must answer the leader's status request so it can learn the joining build's cluster level (the cluster is at level %d): %v", active, err)}
	}
	if st.Level < active {
		return &MemberError{"node_id", fmt.Sprintf("runs a build that speaks cluster level %d, but the cluster is at level %d: it could not read what the cluster writes; upgrade it first (the README's \"Upgrading\")", st.Level, active)}
	}
	return nil
}
