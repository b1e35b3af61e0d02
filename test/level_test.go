package test

import (
	"fmt"
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
// the leader raises the active level to the build's once the configuration
// has settled; every node reports its build's level and version, and each
// member's as it last heard them, and the CLI shows the same.
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
