//go:build unix

package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// TestLeaderFailover SIGKILLs the leader of a three-node cluster running
// holdfast's default Raft timing again and again, and measures each time how
// long it takes until a write through a survivor is acknowledged: the
// failover a client sees. It reports the distribution (a FAILOVER-RESULT
// line); it fails only if a survivor accepts no write for 15 s, which no
// correct cluster does. HOLDFAST_FAILOVER_KILLS sets the number of kills
// (default 20); HOLDFAST_FAILOVER_RAFT_TIMEOUT (e.g. 1s) runs the nodes with
// that heartbeat and election timeout instead of the defaults.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	kills := 20
	if v, err := strconv.Atoi(os.Getenv("HOLDFAST_FAILOVER_KILLS")); err == nil && v > 0 {
		kills = v
	}
	// No timing flags: the nodes run with holdfast's defaults, unless asked.
	opts := harness.Options{NoRaftTiming: true}
	if v := os.Getenv("HOLDFAST_FAILOVER_RAFT_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("HOLDFAST_FAILOVER_RAFT_TIMEOUT=%q: want a positive duration such as 1s", v)
		}
		opts.Args = []string{"--raft-heartbeat-timeout", d.String(), "--raft-election-timeout", d.String()}
	}
	c := env.NewCluster(t, 3, opts)
	c.StartBootstrap()
	c.WaitLeader()
	c.WaitAllReady()
	ns := mintNamespace(t, c.Node(0))
	var took []time.Duration
	for i := range kills {
		leader := c.WaitLeader()
		c.WaitAllReady()
		survivor := harness.Except(c.Nodes(), leader)[i%2]
		c.Kill(leader)
		killed := time.Now()
		for n := 0; ; n++ {
			if time.Since(killed) > 15*time.Second {
				t.Fatalf("kill %d: no write through %s acknowledged within 15 s of killing %s", i+1, survivor.ID, leader.ID)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			r, err := survivor.Do(ctx, harness.Request{Method: http.MethodPost, Path: "/services/v1/lease",
				JSON: map[string]any{"namespace": ns, "key": fmt.Sprintf("failover-%d-%d", i, n), "ttl_seconds": 60}})
			cancel()
			if err == nil && r.Status == http.StatusCreated {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		took = append(took, time.Since(killed))
		c.Start(leader)
		restarted := time.Now()
		c.WaitAllReady()
		// Each kill starts from a settled cluster: the restarted node's clock
		// guard has compared clocks (it samples once a second).
		for time.Since(restarted) < 2*time.Second {
			time.Sleep(50 * time.Millisecond)
		}
	}
	slices.Sort(took)
	pct := func(p float64) time.Duration { return took[int(p*float64(len(took)-1))] }
	line := fmt.Sprintf("FAILOVER-RESULT kills=%d p50=%v p90=%v p99=%v max=%v", kills,
		pct(.5).Round(time.Millisecond), pct(.9).Round(time.Millisecond), pct(.99).Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond))
	t.Log(line)
	fmt.Println(line)
}

// TestBenchCountsNoAbandonedProposals runs the load tool through every
// node of a healthy cluster: it stops without abandoning a request, so the
// service counts no proposal given up mid-flight (busy) or with an unknown
// outcome, and the tool saw no error.
func TestBenchCountsNoAbandonedProposals(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{Args: []string{"--rate-limit", "0"}})
	put(t, leader, harness.Settings{"queues_per_client": 100000}, "")
	latencyLog := filepath.Join(t.TempDir(), "enqueue.csv")
	for _, wl := range []string{"queue", "lease", "enqueue"} {
		args := []string{"bench", "--addr", harness.JoinList(c.Nodes()...), "--workload", wl, "--clients", "16", "--duration", "3s"}
		if wl == "enqueue" {
			args = append(args, "--latency-log", latencyLog)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		out, err := exec.CommandContext(ctx, env.Binary, args...).CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("bench --workload %s: %v\n%s", wl, err, out)
		}
		s := string(out)
		for _, want := range []string{" errors=0 ", " busy=0", " outcome_unknown=0", " not_leader=0"} {
			if !strings.Contains(s, want) {
				t.Fatalf("bench --workload %s: output lacks %q:\n%s", wl, want, s)
			}
		}
		if m := regexp.MustCompile(` applied=(\d+)`).FindStringSubmatch(s); m == nil || m[1] == "0" {
			t.Fatalf("bench --workload %s: no applied proposals counted:\n%s", wl, s)
		}
		if wl == "enqueue" {
			checkLatencyLog(t, latencyLog, s)
		}
	}
}

// checkLatencyLog checks a bench run's --latency-log: one line per cycle
// the run counted, each a client, a start within the run and a latency,
// in order of start.
func checkLatencyLog(t *testing.T, path, out string) {
	t.Helper()
	m := regexp.MustCompile(` cycles=(\d+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("bench output lacks cycles=:\n%s", out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if strconv.Itoa(len(lines)) != m[1] {
		t.Fatalf("latency log has %d lines, the run counted %s cycles", len(lines), m[1])
	}
	last := int64(-1)
	for _, l := range lines {
		f := strings.Split(l, ",")
		if len(f) != 3 {
			t.Fatalf("latency log line %q: want client,start,latency", l)
		}
		client, _ := strconv.Atoi(f[0])
		start, err1 := strconv.ParseInt(f[1], 10, 64)
		took, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil || client < 0 || client >= 16 || start < last || start > 4e6 || took <= 0 {
			t.Fatalf("latency log line %q: a client of 16, a start in order within the 3 s run, a latency above 0", l)
		}
		last = start
	}
}
