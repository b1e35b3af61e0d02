//go:build unix

package test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestStateMemoryScript runs the README's memory measurement on a small
// state, so the command that reproduces its numbers keeps working: every
// number it prints must be there, and the leases it made must all be held
// before and after the restart (the script checks that and fails otherwise).
func TestStateMemoryScript(t *testing.T) {
	t.Parallel()
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprint("nodes=", nodes), func(t *testing.T) {
			t.Parallel()
			stateMemoryScript(t, nodes)
		})
	}
}

func stateMemoryScript(t *testing.T, nodes int) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var ports []string // from the harness, so no test of this binary meets them
	for range 2 * nodes {
		addr, err := env.Ports.Addr()
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, strings.TrimPrefix(addr, "127.0.0.1:"))
	}
	args := []string{"scale/state-memory.sh", "--nodes", fmt.Sprint(nodes), "--leases", "2000", "--clients", "8", "--ports", strings.Join(ports, ",")}
	// One node is filled as the capacity figures are: completed leases with
	// results, jobs, and the queue load after the restart.
	fill := `leases=2000 leases_held=2000 result_bytes=0 jobs=0 payload_bytes=1024\n`
	if nodes == 1 {
		args = append(args, "--result-bytes", "512", "--jobs", "300", "--payload-bytes", "1024", "--queue-load", "2", "--pin")
		fill = `leases=2000 leases_held=0 result_bytes=512 jobs=300 payload_bytes=1024\n`
	}
	out, err := exec.CommandContext(ctx, "bash", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("state-memory.sh: %v\n%s", err, out)
	}
	perNode := `[1-9]\d*` + strings.Repeat(`,[1-9]\d*`, nodes-1) // one number per node
	wants := []string{
		fill,
		`rss_after_fill_mib=` + perNode + ` peak_rss_mib=` + perNode + `\n`,
		`disk_bytes=` + perNode + ` raw_record_bytes=[1-9]\d*\n`,
		diskParts("disk"),
		`snapshot_save_seconds=\d+\.\d\d snapshot_bytes=[1-9]\d*\n`,
		`backup sent: index=\d+ bytes=[1-9]\d* snapshot_seconds=\S+ total_seconds=\S+\n`,
		`disk_after_snapshot_bytes=` + perNode + `\n`,
		diskParts("disk_after_snapshot"),
		`restart_to_ready_seconds=\d+\.\d\d\n`,
		`restart_to_current_seconds=\d+\.\d\d\n`,
		`rss_after_restart_mib=` + perNode + `\n`,
		`heap_after_restart_mib=\d+\.\d` + strings.Repeat(`,\d+\.\d`, nodes-1) + ` peak_rss_since_restart_mib=` + perNode + `\n`,
	}
	if nodes == 1 {
		wants = append(wants, `rss_after_queue_load_mib=`+perNode+` peak_rss_since_restart_mib=`+perNode+`\n`)
	}
	if nodes == 3 {
		wants = append(wants,
			`wiped_follower=n[0-2] wiped_follower_ready_seconds=\d+\.\d\d\n`,
			`wiped_follower_from=(snapshot|log) wiped_follower_current_seconds=\d+\.\d\d wiped_follower_mb_per_s=\d+\.\d\n`,
			`rss_after_rejoin_mib=`+perNode+`\n`)
	}
	for _, want := range wants {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("state-memory.sh printed no line matching %q:\n%s", want, out)
		}
	}
}

// diskParts matches the line that breaks the first node's disk down.
func diskParts(prefix string) string {
	return prefix + `_store_bytes=[1-9]\d* ` + prefix + `_snapshot_only_bytes=\d+ ` + prefix + `_raft_log_bytes=[1-9]\d* ` + prefix + `_other_bytes=[1-9]\d*\n`
}
