package test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/test/harness"
)

// levelStatus is the part of GET /cluster/status about cluster levels.
type levelStatus struct {
	Level        uint32 `json:"level"`
	BuildVersion string `json:"build_version"`
	ActiveLevel  uint32 `json:"active_level"`
	Nodes        []struct {
		ID           string `json:"id"`
		Level        uint32 `json:"level"`
		BuildVersion string `json:"build_version"`
	} `json:"nodes"`
}

// TestClusterLevelRises: in a cluster whose members all run this build,
// the active level is the build's (a cluster formed with --bootstrap-expect
// starts at it); every node reports its build's level and version, and
// each member's as it last heard them, and the CLI shows the same.
func TestClusterLevelRises(t *testing.T) {
	c := env.NewCluster(t, 3, harness.Options{})
	c.StartBootstrap()
	c.WaitAllReady()
	deadline := time.Now().Add(40 * time.Second)
	for {
		var problems []string
		for _, n := range c.Nodes() {
			var st levelStatus
			if _, err := n.GetJSON("/cluster/status", &st); err != nil {
				problems = append(problems, err.Error())
				continue
			}
			if st.ActiveLevel != fsm.BuildLevel || st.Level != fsm.BuildLevel || st.BuildVersion == "" || len(st.Nodes) != 3 {
				problems = append(problems, fmt.Sprintf("%s: %+v", n.ID, st))
				continue
			}
			for _, m := range st.Nodes {
				if m.Level != fsm.BuildLevel || m.BuildVersion != st.BuildVersion {
					problems = append(problems, fmt.Sprintf("%s sees %s at level %d, build %q", n.ID, m.ID, m.Level, m.BuildVersion))
				}
			}
		}
		if len(problems) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster level did not rise: %v", problems)
		}
		time.Sleep(200 * time.Millisecond)
	}
	out := newCLIEnv(t, c.Nodes()...).want(0, nil, "cluster", "status").stdout
	st := jsonOf(t, out)
	if st["active_level"] != float64(fsm.BuildLevel) || st["level"] != float64(fsm.BuildLevel) {
		t.Fatalf("holdfast cluster status: %s", out)
	}
}

// TestNewClusterLevelServesSlotsOnceReady: a cluster formed with
// --bootstrap-expect by members of one build starts at that build's level,
// so every node, as soon as its /readyz answers 200, serves what the level
// adds (a slots acquire and a checkpoint) instead of refusing it with 503
// until the level rises.
func TestNewClusterLevelServesSlotsOnceReady(t *testing.T) {
	c := env.NewCluster(t, 3, harness.Options{})
	c.StartBootstrap()
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := levelFeaturesOnceReady(n); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}

// TestNewSingleNodeServesSlotsOnceReady: a node started alone, as the
// README's set-up starts one (serve without --join or --bootstrap-expect),
// starts its cluster at its build's level, so as soon as its /readyz
// answers 200 it serves a slots acquire and a checkpoint.
func TestNewSingleNodeServesSlotsOnceReady(t *testing.T) {
	c := env.NewCluster(t, 1, harness.Options{})
	n := c.Node(0)
	c.Start(n)
	if err := levelFeaturesOnceReady(n); err != nil {
		t.Fatal(err)
	}
}

// TestRestoredNodeServesSlotsOnceReady: a node restoring a backup saved at
// a level below its build's (by a cluster of an older build) starts the new
// cluster at its build's level once the backup is installed, so as soon as
// its /readyz answers 200 it serves a slots acquire and a checkpoint, and
// holds the backup's state.
func TestRestoredNodeServesSlotsOnceReady(t *testing.T) {
	for level := range fsm.BuildLevel {
		t.Run(fmt.Sprintf("a backup at level %d", level), func(t *testing.T) {
			const maxJobs = 777
			file := levelBackup(t, level, maxJobs)
			c := env.NewCluster(t, 1, harness.Options{})
			n := c.Node(0)
			c.Start(n, "--restore", file)
			if err := levelFeaturesOnceReady(n); err != nil {
				t.Fatal(err)
			}
			var a harness.SettingsAnswer
			if _, err := n.GetJSON("/cluster/settings", &a); err != nil || a.Settings["queue_max_jobs"] != maxJobs {
				t.Fatalf("settings after the restore: %v %v, want the backup's queue_max_jobs %d", a.Settings, err, maxJobs)
			}
			var st levelStatus
			if _, err := n.GetJSON("/cluster/status", &st); err != nil || st.ActiveLevel != fsm.BuildLevel {
				t.Fatalf("status after the restore: %+v %v, want active level %d", st, err, fsm.BuildLevel)
			}
		})
	}
}

// levelBackup writes a backup file (holdfast-backup/1) of a state at level
// whose queue_max_jobs setting is maxJobs, as a cluster of a build of that
// level saves it, and returns its path.
func levelBackup(t *testing.T, level uint32, maxJobs int64) string {
	t.Helper()
	state := fsm.New()
	now := time.Now().UnixMilli()
	if level > 0 {
		state.ApplyCommand(&fsm.SetLevel{Now: now, Level: level})
	}
	state.ApplyCommand(&fsm.SetSettings{Now: now, Patch: fsm.SettingsPatch{QueueMaxJobs: &maxJobs}})
	snap := state.SnapshotBytes()
	sum := sha256.Sum256(snap)
	header, err := json.Marshal(map[string]any{"format": "holdfast-backup/1", "index": 40, "term": 3, "size": len(snap),
		"sha256": hex.EncodeToString(sum[:]), "node_id": "old", "created_at": time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), fmt.Sprintf("level-%d.backup", level))
	if err := os.WriteFile(file, append(append(header, '\n'), snap...), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// levelFeaturesOnceReady polls n's /readyz until it answers 200 and, at
// once, acquires a key of two slots and checkpoints a single-slot lease
// through n.
func levelFeaturesOnceReady(n *harness.Node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := harness.Poll(ctx, 20*time.Millisecond, func() error {
		r, err := n.Get("/readyz")
		if err != nil {
			return err
		}
		if r.Status != http.StatusOK {
			return fmt.Errorf("readyz: %s", r)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s never ready: %w", n.ID, err)
	}
	post := func(what, path string, body map[string]any, want int) (map[string]any, error) {
		r, err := n.PostJSON(apiPrefix+path, body, "")
		if err != nil {
			return nil, fmt.Errorf("%s via %s right after /readyz 200: %w", what, n.ID, err)
		}
		var m map[string]any
		if r.Status != want || r.Decode(&m) != nil {
			return nil, fmt.Errorf("%s via %s right after /readyz 200: %s, want %d", what, n.ID, r, want)
		}
		return m, nil
	}
	ns, err := post("create a namespace", "/lease/namespace", map[string]any{}, http.StatusOK)
	if err != nil {
		return err
	}
	lease := func(key string, extra map[string]any) map[string]any {
		b := map[string]any{"namespace": ns["namespace"], "key": key, "ttl_seconds": 60}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	if _, err := post("an acquire with slots 2", "/lease", lease("crawl", map[string]any{"slots": 2}), http.StatusCreated); err != nil {
		return err
	}
	g, err := post("an acquire", "/lease", lease("resume", nil), http.StatusCreated)
	if err != nil {
		return err
	}
	owner, _ := g["owner_token"].(string)
	if owner == "" {
		return errors.New("an acquire via " + n.ID + " answered no owner token")
	}
	cp := map[string]any{"namespace": ns["namespace"], "key": "resume", "owner_token": owner, "checkpoint": map[string]any{"step": 1}}
	_, err = post("a checkpoint", "/lease/checkpoint", cp, http.StatusOK)
	return err
}
