package cluster

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/raftlog"
)

// TestLevelGateHoldsNewFormats: until the cluster's level includes a
// format, a proposal that needs it is refused (nothing written); the level
// of a cluster of one rises once its configuration has settled.
func TestLevelGateHoldsNewFormats(t *testing.T) {
	cfg := testConfig(t, "solo", t.TempDir(), true)
	cfg.LevelSettle = time.Hour
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

// TestLevelRisesAndIsRecorded: a cluster of one raises its level to the
// build's, records it in raft.db and serves level 1 entries; a build that
// finds its data directory's cluster above its own level refuses to start,
// naming both.
func TestLevelRisesAndIsRecorded(t *testing.T) {
	cfg := testConfig(t, "solo", t.TempDir(), true)
	cfg.LevelSettle = 100 * time.Millisecond
	n := open(t, cfg)
	waitReadyLeader(t, n)
	waitFor(t, "the level to rise", 10*time.Second, func() bool { return n.fsm.Level() == fsm.BuildLevel })
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
