//go:build unix

package fault

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// TestRestartedClusterHonoursReplicatedSettings restarts a whole cluster
// that has lowered visibility_min_seconds and immediately sends valid claims
// (visibility 2 s) to every node. A leader elected after a restart has not
// re-applied the log until its barrier commits; it must not judge requests
// against the defaults meanwhile (a 400 tells the client to fix a request
// that is valid). Found by the queue workload under the kill nemesis; this
// reproduces it on purpose. It runs with the full suite.
func TestRestartedClusterHonoursReplicatedSettings(t *testing.T) {
	s := skipUnlessSuite(t)
	if !s.cfg.full {
		t.Skip("runs with the full suite (" + BudgetEnv + " or " + MatrixEnv + "=full)")
	}
	env, err := s.envFor("")
	if err != nil {
		t.Fatal(err)
	}
	// Default snapshot settings: no snapshot is taken, so a restarted node's
	// state is empty until it re-applies its log.
	c := env.NewCluster(t, 3, harness.Options{Args: []string{"--rate-limit", "0"}})
	c.StartBootstrap()
	leader := c.WaitLeader()
	c.WaitAllReady()
	client := NewClient(5 * time.Second)
	defer client.Close()
	ctx := context.Background()
	if a := client.Do(ctx, leader.HTTPAddr, http.MethodPut, "/cluster/settings", map[string]int64{"visibility_min_seconds": 1}, ""); a.Status != http.StatusOK {
		t.Fatalf("lower visibility_min_seconds: HTTP %d %s %v", a.Status, a.Raw, a.Err)
	}
	q := client.Do(ctx, leader.HTTPAddr, http.MethodPost, apiPrefix+"/queue", map[string]any{}, "")
	if q.Status != http.StatusCreated {
		t.Fatalf("create a queue: HTTP %d %s %v", q.Status, q.Raw, q.Err)
	}
	claimPath := apiPrefix + "/queue/" + q.Body.QueueID + "/claim"
	// A log long enough that re-applying it takes a while: the window
	// between gaining leadership and being ready.
	if a := client.Do(ctx, leader.HTTPAddr, http.MethodPut, "/cluster/settings", map[string]int64{"queue_max_jobs": 5000}, ""); a.Status != http.StatusOK {
		t.Fatalf("raise queue_max_jobs: HTTP %d %s %v", a.Status, a.Raw, a.Err)
	}
	var fill sync.WaitGroup
	for w := 0; w < 8; w++ {
		fill.Add(1)
		go func() {
			defer fill.Done()
			for i := 0; i < 150; i++ {
				body := map[string]any{"job_key": fmt.Sprintf("fill-%d-%d", w, i), "payload": map[string]int{"i": i}}
				client.Do(ctx, leader.HTTPAddr, http.MethodPost, apiPrefix+"/queue/"+q.Body.QueueID+"/jobs", body, q.Body.WriteToken)
			}
		}()
	}
	fill.Wait()

	var bad atomic.Int64
	var mu sync.Mutex
	var examples []string
	for round := 1; round <= 5; round++ {
		for _, n := range c.Nodes() {
			c.Kill(n)
		}
		for _, n := range c.Nodes() {
			c.Start(n)
		}
		// Claim through every node until the cluster serves again.
		deadline := time.Now().Add(30 * time.Second)
		var served atomic.Int64
		var wg sync.WaitGroup
		for i, n := range append(append(c.Nodes(), c.Nodes()...), c.Nodes()...) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) && served.Load() < 50 {
					a := client.Do(ctx, n.HTTPAddr, http.MethodPost, claimPath, map[string]any{"visibility_timeout": visibility}, q.Body.WorkerToken)
					switch {
					case a.Status == http.StatusOK:
						served.Add(1)
					case a.Status == http.StatusBadRequest:
						bad.Add(1)
						mu.Lock()
						if len(examples) < 3 {
							examples = append(examples, fmt.Sprintf("round %d, client %d via %s at %s: HTTP 400 %s", round, i, n.ID, time.Now().UTC().Format("15:04:05.000"), a.Raw))
						}
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		if served.Load() == 0 {
			t.Fatalf("round %d: the restarted cluster served no claim in 30s", round)
		}
		c.WaitLeader()
	}
	if n := bad.Load(); n > 0 {
		t.Errorf("%d valid claims (visibility_timeout %d, visibility_min_seconds 1) were refused with 400 right after a restart, "+
			"judged against the default settings by a leader that had not yet re-applied its log:\n  %s",
			n, visibility, strings.Join(examples, "\n  "))
	}
}
