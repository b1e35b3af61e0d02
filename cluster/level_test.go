package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/raftlog"
)

// TestLevelGateHoldsNewFormats: until the cluster's level includes a
// format, a proposal that needs it is refused (nothing written). The node
// stands for a build of level 0, so its cluster of one stays at level 0.
func TestLevelGateHoldsNewFormats(t *testing.T) {
	cfg := testConfig(t, "solo", t.TempDir(), true)
	cfg.testLevel = olderBuild(0)
	n := open(t, cfg)
	waitReadyLeader(t, n)
	_, err := n.Propose(context.Background(), &fsm.FenceFloor{Now: n.Now(), Floor: 100})
	var le *LevelError
	if !errors.As(err, &le) || le.Need != 1 || le.Active != 0 || !strings.Contains(err.Error(), "cluster level 1") {
		t.Fatalf("a level 1 entry at level 0: %v", err)
	}
	if n.fsm.FencingCounter() != 0 || n.fsm.Level() != 0 {
		t.Fatalf("the refused entry changed the state: counter %d, level %d", n.fsm.FencingCounter(), n.fsm.Level())
	}
	if _, err := acquire(context.Background(), n, "k", "A"); err != nil {
		t.Fatalf("a level 0 write at level 0: %v", err)
	}
}

// TestSingleNodeStartsAtItsBuildLevel: a node that bootstraps alone starts
// its cluster at the level its build speaks before it reports ready, with
// no settling time (LevelSettle is an hour).
func TestSingleNodeStartsAtItsBuildLevel(t *testing.T) {
	for _, c := range []struct {
		name   string
		speaks *uint32
		want   uint32
	}{
		{"this build", nil, fsm.BuildLevel},
		{"a build of the previous level", olderBuild(fsm.BuildLevel - 1), fsm.BuildLevel - 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(t, "solo", t.TempDir(), true)
			cfg.LevelSettle, cfg.testLevel = time.Hour, c.speaks
			n := open(t, cfg)
			waitFor(t, "the node ready", 15*time.Second, func() bool {
				ready, _ := n.Ready()
				if got := n.fsm.Level(); ready && got != c.want {
					t.Fatalf("ready at level %d, want %d", got, c.want)
				}
				return ready
			})
		})
	}
}

// TestLevelRisesAndIsRecorded: a cluster of one whose node is upgraded
// from a build of level 0 (an existing cluster, which no boot plan raises)
// raises its level to the new build's once its configuration has settled,
// records it in raft.db and serves level 1 entries; a build that finds its
// data directory's cluster above its own level refuses to start, naming
// both.
func TestLevelRisesAndIsRecorded(t *testing.T) {
	cfg := testConfig(t, "solo", t.TempDir(), true)
	cfg.LevelSettle = 100 * time.Millisecond
	old := cfg
	old.testLevel = olderBuild(0)
	n := open(t, old)
	waitReadyLeader(t, n)
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if l := n.fsm.Level(); l != 0 {
		t.Fatalf("a build of level 0 left its cluster at level %d", l)
	}
	if got := n.raft.ReloadableConfig().SnapshotInterval; got != 120*time.Second {
		t.Fatalf("snapshot interval at level 0: %v, want 120s (a snapshot encodes the whole state)", got)
	}
	n = open(t, cfg)
	waitReadyLeader(t, n)
	waitFor(t, "the level to rise", 10*time.Second, func() bool { return n.fsm.Level() == fsm.BuildLevel })
	waitFor(t, "the snapshot interval to follow the level", 5*time.Second, func() bool {
		return n.raft.ReloadableConfig().SnapshotInterval == 30*time.Second
	})
	if st := n.Status(); st.ActiveLevel != fsm.BuildLevel || st.Level != fsm.BuildLevel || st.Nodes[0].Level != fsm.BuildLevel {
		t.Fatalf("status %+v", st)
	}
	if _, err := n.Propose(context.Background(), &fsm.FenceFloor{Now: n.Now(), Floor: 100}); err != nil {
		t.Fatalf("a level 1 entry at level 1: %v", err)
	}
	waitFor(t, "the level to be recorded", 10*time.Second, func() bool {
		v, err := n.store.GetUint64(keyClusterLevel)
		return err == nil && v == uint64(fsm.BuildLevel)
	})
	if l, err := raftlog.MarkedLevel(cfg.logPath()); err != nil || l != fsm.BuildLevel {
		t.Fatalf("the log's level mark: %d %v, want %d", l, err, fsm.BuildLevel)
	}
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The node comes back at its level.
	n2 := open(t, cfg)
	waitReadyLeader(t, n2)
	if n2.fsm.Level() != fsm.BuildLevel || n2.fsm.FencingCounter() != 100 {
		t.Fatalf("after a restart: level %d, counter %d", n2.fsm.Level(), n2.fsm.FencingCounter())
	}
	if got := n2.raft.ReloadableConfig().SnapshotInterval; got != 30*time.Second {
		t.Fatalf("snapshot interval after a restart at level %d: %v, want 30s", fsm.BuildLevel, got)
	}
	if err := n2.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}

	// As if the cluster had risen past this build.
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: cfg.boltPath(), MsgpackUseNewTimeFormat: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.SetUint64(keyClusterLevel, uint64(fsm.BuildLevel)+1); err != nil {
		t.Fatal(err)
	}
	_ = bolt.Close()
	n3, err := Open(cfg)
	if err == nil {
		_ = n3.Kill()
		t.Fatal("a build below its cluster's level started")
	}
	if want := []string{fmt.Sprintf("speaks cluster level %d", fsm.BuildLevel), fmt.Sprintf("at level %d", fsm.BuildLevel+1)}; !strings.Contains(err.Error(), want[0]) || !strings.Contains(err.Error(), want[1]) {
		t.Fatalf("start: %v, want both levels named", err)
	}

	// A log marked above this build's level is refused the same way, even
	// with raft.db at this build's level.
	bolt, err = raftboltdb.New(raftboltdb.Options{Path: cfg.boltPath(), MsgpackUseNewTimeFormat: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := bolt.SetUint64(keyClusterLevel, uint64(fsm.BuildLevel)); err != nil {
		t.Fatal(err)
	}
	_ = bolt.Close()
	if err := raftlog.MarkLevel(cfg.logPath(), fsm.BuildLevel+1); err != nil {
		t.Fatal(err)
	}
	if n4, err := Open(cfg); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("at level %d", fsm.BuildLevel+1)) {
		if n4 != nil {
			_ = n4.Kill()
		}
		t.Fatalf("start on a log marked level %d: %v, want a refusal naming both levels", fsm.BuildLevel+1, err)
	}
}

// TestLevelLogMarksBeforeStoring: the log is marked with an entry's level
// before the entry is stored, and an entry this build cannot read is never
// stored.
func TestLevelLogMarksBeforeStoring(t *testing.T) {
	dir := t.TempDir()
	mem := raft.NewInmemStore()
	l := &levelLog{LogStore: mem, marks: &levelMarks{dir: dir}}
	entry := func(i uint64, c fsm.Command) *raft.Log {
		return &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fsm.Encode(c)}
	}
	if err := l.StoreLogs([]*raft.Log{entry(1, &fsm.Sweep{})}); err != nil {
		t.Fatal(err)
	}
	if m, _ := raftlog.MarkedLevel(dir); m != 0 {
		t.Fatalf("marked %d after a level 0 entry", m)
	}
	if err := l.StoreLog(entry(2, &fsm.SetLevel{Level: 1})); err != nil {
		t.Fatal(err)
	}
	if m, _ := raftlog.MarkedLevel(dir); m != 1 {
		t.Fatalf("marked %d after a level 1 entry, want 1", m)
	}
	newer := &raft.Log{Index: 3, Term: 1, Type: raft.LogCommand, Data: []byte{250, 1}}
	if err := l.StoreLogs([]*raft.Log{newer}); !errors.Is(err, ErrLevel) {
		t.Fatalf("an entry of a newer build: %v, want ErrLevel", err)
	}
	if last, _ := mem.LastIndex(); last != 2 {
		t.Fatalf("last index %d, want 2: the unreadable entry was stored", last)
	}
}

// TestUpgradePathGoesOneLevelAtATime: a build starts on a data directory of
// its own level or the one before, on a fresh one, or on one a build of its
// level created before the cluster's level rose; skipping a level is
// refused naming the levels.
func TestUpgradePathGoesOneLevelAtATime(t *testing.T) {
	for _, c := range []struct {
		recorded, created, build uint32
		state, ok                bool
	}{
		{0, 0, 1, true, true}, {1, 0, 1, true, true}, {1, 0, 2, true, true}, {2, 0, 2, true, true},
		{0, 0, 2, false, true}, {0, 0, 2, true, false}, {1, 0, 3, true, false},
		{0, 2, 2, true, true}, {0, 1, 2, true, false}, {0, 3, 2, true, true},
	} {
		err := checkUpgradePath(c.recorded, c.created, c.build, c.state)
		if (err == nil) != c.ok {
			t.Errorf("data at level %d (state %v, created at %d), build of level %d: %v, want ok %v", c.recorded, c.state, c.created, c.build, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), fmt.Sprintf("level %d first", c.recorded+1)) {
			t.Errorf("refusal %q does not name the level to go through", err)
		}
	}
}

// formByBootstrapExpect starts three nodes that form one cluster with
// BootstrapExpect 3, each answering its status on an HTTP listener of its
// own as the server package does. A non-zero levels[i] is the level node i
// says its build speaks: a member of an older build. The configuration
// never settles within a test (LevelSettle is an hour), so only a new
// cluster's own start can raise the level.
func formByBootstrapExpect(t *testing.T, levels [3]uint32) []*Node {
	t.Helper()
	var addrs []string
	var lns []net.Listener
	for range levels {
		ln := listenHTTP(t)
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	var nodes []*Node
	for i, ln := range lns {
		c := testConfig(t, fmt.Sprintf("n%d", i), t.TempDir(), true)
		c.HTTPAdvertise, c.BootstrapExpect, c.LevelSettle = addrs[i], 3, time.Hour
		if levels[i] != 0 {
			c.testLevel = olderBuild(levels[i])
		}
		c.Join = slices.Delete(slices.Clone(addrs), i, i+1)
		n := open(t, c)
		nodes = append(nodes, n)
		serveStatus(t, ln, n)
	}
	return nodes
}

// TestBootstrapExpectStartsAtTheLowestLevel: a cluster formed with
// bootstrap-expect starts at the lowest level its members' builds speak
// before its leader reports ready, and every follower that reports ready
// has applied it: at once, with no settling time.
func TestBootstrapExpectStartsAtTheLowestLevel(t *testing.T) {
	for _, c := range []struct {
		name   string
		levels [3]uint32
		want   uint32
	}{
		{"every member of this build", [3]uint32{}, fsm.BuildLevel},
		{"a member of the previous level", [3]uint32{0, fsm.BuildLevel - 1, 0}, fsm.BuildLevel - 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			nodes := formByBootstrapExpect(t, c.levels)
			var seen [3]bool
			waitFor(t, "every node ready", 20*time.Second, func() bool {
				all := true
				for i, n := range nodes {
					if ready, _ := n.Ready(); !ready {
						all = false
						continue
					}
					if got := n.fsm.Level(); !seen[i] && got != c.want {
						t.Fatalf("%s is ready at level %d, want %d", n.ID(), got, c.want)
					}
					seen[i] = true
				}
				return all
			})
			for _, n := range nodes {
				if st := n.Status(); st.ActiveLevel != c.want {
					t.Errorf("%s reports active level %d, want %d", n.ID(), st.ActiveLevel, c.want)
				}
			}
		})
	}
}

// TestBootPlanNeedsEveryMemberAndTheBootstrapConfiguration: a new
// cluster's level is taken only from fresh reports of every other member
// (the lowest), and only while the log holds no configuration change after
// the bootstrap's (nor, past a snapshot, after the snapshot's, which must be
// the bootstrap's).
func TestBootPlanNeedsEveryMemberAndTheBootstrapConfiguration(t *testing.T) {
	now := time.Now()
	servers := []raft.Server{{ID: "a", Address: "a:1"}, {ID: "b", Address: "b:1"}, {ID: "c", Address: "c:1"}}
	var l levels
	if _, missing := l.lowestReported(servers, "a", 2, now); missing != "b" {
		t.Fatalf("no reports: missing %q, want b", missing)
	}
	l.report("b", 2, "v2", now)
	l.report("c", 1, "v1", now.Add(-reportFresh-time.Second))
	if _, missing := l.lowestReported(servers, "a", 2, now); missing != "c" {
		t.Fatalf("a stale report of c: missing %q, want c", missing)
	}
	l.report("c", 1, "v1", now)
	if got, missing := l.lowestReported(servers, "a", 2, now); missing != "" || got != 1 {
		t.Fatalf("reports of 2 and 1: level %d, missing %q; want 1", got, missing)
	}
	l.report("b", 0, "", now) // a build before levels reports none
	if got, missing := l.lowestReported(servers, "a", 2, now); missing != "" || got != 0 {
		t.Fatalf("a member of a build before levels: level %d, missing %q; want 0", got, missing)
	}

	plan := &bootPlan{servers: servers, level: 2}
	if !plan.holds(raft.Configuration{Servers: slices.Clone(servers)}) || plan.holds(raft.Configuration{Servers: servers[:2]}) {
		t.Fatal("holds: the bootstrap configuration and only it")
	}
	entry := func(i uint64, typ raft.LogType) *raft.Log { return &raft.Log{Index: i, Term: 1, Type: typ} }
	type snapshot struct{ index, configIndex uint64 }
	for _, c := range []struct {
		name string
		snap *snapshot
		log  []*raft.Log
		kept bool
	}{
		{"the bootstrap, a noop and a command", nil, []*raft.Log{entry(1, raft.LogConfiguration), entry(2, raft.LogNoop), entry(3, raft.LogCommand)}, true},
		{"a member added", nil, []*raft.Log{entry(1, raft.LogConfiguration), entry(2, raft.LogNoop), entry(3, raft.LogConfiguration)}, false},
		{"compacted past the bootstrap", nil, []*raft.Log{entry(2, raft.LogNoop), entry(3, raft.LogCommand)}, false},
		{"no bootstrap configuration", nil, []*raft.Log{entry(1, raft.LogNoop)}, false},
		{"an empty log", nil, nil, false},
		{"a restore's snapshot of the bootstrap configuration, past a gap", &snapshot{10, 1}, []*raft.Log{entry(11, raft.LogNoop), entry(12, raft.LogCommand)}, true},
		{"a snapshot of the bootstrap configuration, nothing after it", &snapshot{10, 1}, nil, true},
		{"a restore's snapshot, then a member added", &snapshot{10, 1}, []*raft.Log{entry(11, raft.LogNoop), entry(12, raft.LogConfiguration)}, false},
		{"a snapshot of a later configuration", &snapshot{10, 4}, []*raft.Log{entry(11, raft.LogNoop)}, false},
		{"a snapshot, the log compacted past it", &snapshot{10, 1}, []*raft.Log{entry(12, raft.LogNoop)}, false},
	} {
		store := raft.NewInmemStore()
		if err := store.StoreLogs(c.log); err != nil {
			t.Fatal(err)
		}
		snaps := raft.NewInmemSnapshotStore()
		if c.snap != nil {
			sink, err := snaps.Create(raft.SnapshotVersionMax, c.snap.index, 1, raft.Configuration{}, c.snap.configIndex, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if kept, err := bootConfigurationKept(store, snaps); err != nil || kept != c.kept {
			t.Errorf("%s: kept %v, %v; want %v", c.name, kept, err, c.kept)
		}
	}
}
