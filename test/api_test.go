//go:build unix

package test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// apiScenario is one flow of the spec, run against each target.
type apiScenario struct {
	name string
	run  func(t *testing.T, e *apiEnv, n *harness.Node)
}

var apiScenarios = []apiScenario{
	{"lease/namespace", leaseNamespaceMint},
	{"lease/spec-flow", leaseSpecFlow},
	{"lease/release", leaseReleaseFlow},
	{"lease/expiry", leaseExpiryFlow},
	{"lease/redaction-and-result-size", leaseRedaction},
	{"lease/key-without-namespace", leaseKeyWithoutNamespace},
	{"lease/concurrent-acquire", leaseConcurrentAcquire},
	{"lease/bad-requests", leaseBadRequests},
	{"lease/strict-decoding", decodeLease},
	{"lease/request-ids", leaseRequestIDs},
	{"lease/blocking-acquire", leaseBlockingAcquire},
	{"lease/slots", leaseSlots},
	{"lease/checkpoints", leaseCheckpoints},
	{"queue/spec-flow", queueSpecFlow},
	{"queue/dedup-and-payload-size", queueDedup},
	{"queue/job-key-rule", queueJobKeys},
	{"queue/receipts", queueReceipts},
	{"queue/attempts-by-release", queueAttemptsByRelease},
	{"queue/delayed-release-and-retry", queueDelayAndRetry},
	{"queue/request-ids", queueRequestIDs},
	{"queue/long-poll-claim", queueLongPoll},
	{"queue/await-outcome", queueAwaitOutcome},
	{"wait/abandoned", waitAbandoned},
	{"queue/roles", queueRoles},
	{"queue/not-found", queueNotFound},
	{"queue/job-limit", queueJobLimit},
	{"queue/concurrent-dedup", queueConcurrentDedup},
	{"queue/bad-requests", queueBadRequests},
	{"queue/strict-decoding", decodeQueue},
	{"settings/strict-decoding", decodeSettings},
	{"mcp/strict-arguments", decodeMCP},
}

// TestAPI runs every example of the spec and every error row of the
// README's table against a follower and against the leader of one
// three-node cluster, then the example worker and the metrics, and finally
// stops the nodes and searches their data directories and logs for every
// raw secret the suite used (DESIGN.md, invariant 4).
func TestAPI(t *testing.T) {
	t.Parallel()
	e := formAPICluster(t, harness.Options{
		LogLevel: "debug", // request logging on: the log search must cover it
		// Snapshot often, so snapshot files exist for the disk search.
		Args: []string{"--snapshot-threshold", "32", "--snapshot-interval", "200ms"},
	})
	// Every request comes from 127.0.0.1: lift the per-address queue quota
	// (the quota itself is tested on its own cluster).
	e.putKey(t, e.follower, harness.Settings{"queues_per_client": 10000})
	first, err := e.leader.Status()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("flows", func(t *testing.T) {
		for _, sc := range apiScenarios {
			t.Run(sc.name, func(t *testing.T) {
				t.Parallel()
				for _, tg := range e.targets() {
					t.Run("via-"+tg.name, func(t *testing.T) {
						t.Parallel()
						sc.run(t, e, tg.node)
					})
				}
			})
		}
	})
	t.Run("example-worker", func(t *testing.T) {
		// Against every node: the third one sees API traffic too.
		other := apiTarget{"other-follower", harness.Except(e.c.Nodes(), e.leader, e.follower)[0]}
		for _, tg := range append(e.targets(), other) {
			t.Run("via-"+tg.name, func(t *testing.T) { exampleWorker(t, e, tg.node) })
		}
	})
	t.Run("metrics", func(t *testing.T) { apiMetrics(t, e) })

	// The targets kept their roles, so "via-leader" did reach the leader
	// directly (if an election moved it, the results still hold, but the
	// follower/leader split is blurred: say so).
	if last, err := e.leader.Status(); err != nil || last.State != "leader" || last.Term != first.Term {
		t.Logf("leadership changed during the suite: %s led term %d, now %+v (%v)", e.leader.ID, first.Term, last.State, err)
	}

	t.Run("no-secret-on-disk-or-in-logs", func(t *testing.T) { noSecretsAtRest(t, e) })
}

// exampleWorker runs `holdfast example-worker --addr <node>` and checks its
// exit code and every line it prints.
func exampleWorker(t *testing.T, e *apiEnv, n *harness.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.Binary, "example-worker", "--addr", n.HTTPAddr, "--timeout", "45s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	err := cmd.Run()
	if err != nil {
		t.Fatalf("example-worker --addr %s: %v\nstdout:\n%s\nstderr:\n%s", n.HTTPAddr, err, stdout.String(), stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("example-worker wrote to stderr: %s", stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	pats := []string{
		`^created queue ([0-9a-f]{32}) \(its three tokens stay in this process\)$`,
		`^enqueued job ([0-9a-f]{32}) with key example:report-42$`,
		`^claimed job ([0-9a-f]{32}) \(attempt 1\)$`,
		`^handled job ([0-9a-f]{32}): object with 3 fields, \d+ bytes, sha256 [0-9a-f]{16} \(no field executed, no URL followed\)$`,
		`^acknowledged job ([0-9a-f]{32})$`,
		`^job ([0-9a-f]{32}) is completed; queue counts: completed=1 total=1$`,
	}
	if len(lines) != len(pats) {
		t.Fatalf("example-worker printed %d lines, want %d:\n%s", len(lines), len(pats), stdout.String())
	}
	var job string
	for i, p := range pats {
		m := regexp.MustCompile(p).FindStringSubmatch(lines[i])
		if m == nil {
			t.Errorf("example-worker line %d %q does not match %s", i+1, lines[i], p)
			continue
		}
		if i == 0 {
			continue
		}
		if job == "" {
			job = m[1]
		} else if m[1] != job {
			t.Errorf("example-worker line %d names job %s, earlier lines %s", i+1, m[1], job)
		}
	}
	if regexp.MustCompile(`[0-9a-f]{64}`).Match(stdout.Bytes()) {
		t.Errorf("example-worker printed a token or receipt:\n%s", stdout.String())
	}
}

// apiMetrics checks GET /metrics on the leader and a follower after the
// suite's traffic: request counts by route template, proposals, leases and
// jobs, and no raw token, id or namespace anywhere.
func apiMetrics(t *testing.T, e *apiEnv) {
	secrets := e.secrets.snapshot()
	for k, v := range e.ids.snapshot() {
		secrets[k] = v
	}
	for _, tg := range e.targets() {
		n := tg.node
		r, err := n.Get("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), "text/plain") {
			t.Fatalf("GET /metrics on %s: %s (Content-Type %q)", n.ID, r, r.Header.Get("Content-Type"))
		}
		text := string(r.Body)
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			`holdfast_http_requests_total\{method="POST",route="/services/v1/queue/:queue_id/claim",status="200"\} [1-9]\d*`,
			`holdfast_http_requests_total\{method="POST",route="/services/v1/queue/:queue_id/jobs/:job_id/:action",status="409"\} [1-9]\d*`,
			`holdfast_http_requests_total\{method="GET",route="/services/v1/queue/:queue_id/jobs/:job_id",status="200"\} [1-9]\d*`,
			`holdfast_http_requests_total\{method="POST",route="/services/v1/lease",status="201"\} [1-9]\d*`,
			`holdfast_http_requests_total\{method="POST",route="/services/v1/lease/acquire",status="409"\} [1-9]\d*`,
			`holdfast_http_request_duration_seconds_bucket\{method="POST",route="/services/v1/queue",le="[^"]+"\} \d+`,
			`holdfast_leases_held \d+`,
			`holdfast_leases [1-9]\d*`,
			`holdfast_queues [1-9]\d*`,
			`holdfast_max_leases 5e\+07`,
			`holdfast_max_queues 500000`,
			`holdfast_jobs\{status="completed"\} [1-9]\d*`,
			`holdfast_jobs\{status="pending"\} [1-9]\d*`,
			`holdfast_jobs\{status="failed"\} [1-9]\d*`,
			`holdfast_raft_state\{state="` + st.State + `"\} 1`,
			`holdfast_raft_term [1-9]\d*`,
			`holdfast_raft_commit_index [1-9]\d*`,
			`holdfast_raft_applied_index [1-9]\d*`,
			`holdfast_ready 1`,
			`holdfast_proposals_total\{outcome="applied"\} \d+`,
			`holdfast_sweeps_total \d+`,
			`holdfast_swept_total\{kind="claims_returned"\} \d+`,
		} {
			if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(text) {
				t.Errorf("GET /metrics on %s (%s) has no line matching %s", n.ID, tg.name, want)
			}
		}
		if st.State == "leader" && !regexp.MustCompile(`(?m)^holdfast_proposals_total\{outcome="applied"\} [1-9]\d*$`).MatchString(text) {
			t.Errorf("GET /metrics on the leader %s: no applied proposals counted", n.ID)
		}
		// Waiting requests wait on the leader; the flows made hand-overs there.
		for _, want := range []string{`holdfast_waiting_requests\{kind="claim"\} \d+`, `holdfast_waiting_requests\{kind="acquire"\} \d+`, `holdfast_handovers_total \d+`} {
			if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(text) {
				t.Errorf("GET /metrics on %s (%s) has no line matching %s", n.ID, tg.name, want)
			}
		}
		if st.State == "leader" && !regexp.MustCompile(`(?m)^holdfast_handovers_total [1-9]\d*$`).MatchString(text) {
			t.Errorf("GET /metrics on the leader %s: no hand-overs counted, though the flows waited", n.ID)
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "holdfast_http_") {
				if m := regexp.MustCompile(`route="([^"]*)"`).FindStringSubmatch(line); m != nil && m[1] != "unmatched" && !strings.HasPrefix(m[1], "/") {
					t.Errorf("metrics on %s: route label %q is not a route template", n.ID, m[1])
				}
			}
		}
		found := 0
		for v, kind := range secrets {
			if strings.Contains(text, v) {
				found++
				if found <= 5 {
					t.Errorf("GET /metrics on %s contains a raw %s %q", n.ID, kind, v)
				}
			}
		}
		if found > 5 {
			t.Errorf("... and %d more raw values in the metrics of %s", found-5, n.ID)
		}
		if len(secrets) < 50 {
			t.Errorf("only %d secrets and ids recorded: the search is not meaningful", len(secrets))
		}
	}
}

// noSecretsAtRest stops every node and searches every file under every
// data directory and every node log for every raw secret the suite used.
func noSecretsAtRest(t *testing.T, e *apiEnv) {
	secrets := e.secrets.snapshot()
	stored := e.stored.snapshot()
	kinds := map[string]int{}
	for _, k := range secrets {
		kinds[k]++
	}
	t.Logf("searching for %d raw secrets by kind: %v", len(secrets), kinds)
	for _, k := range []string{"namespace", "key", "fingerprint", "owner_token", "receipt", "write_token", "worker_token", "read_token", "redacted result value"} {
		if kinds[k] == 0 {
			t.Errorf("no %s was recorded: the search would not cover that kind", k)
		}
	}
	if len(stored) == 0 {
		t.Fatalf("no stored-by-design value recorded: the search would prove nothing")
	}

	for _, n := range e.c.Nodes() {
		if code := e.c.Stop(n); code != 0 {
			t.Errorf("%s exited with code %d on SIGTERM", n.ID, code)
		}
	}

	type file struct {
		node, path string
		data       []byte
	}
	var files []file
	for _, n := range e.c.Nodes() {
		err := filepath.WalkDir(n.DataDir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files = append(files, file{n.ID, p, b})
			return nil
		})
		if err != nil {
			t.Fatalf("walk %s: %v", n.DataDir, err)
		}
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, file{n.ID, n.LogPath, b})

		// The log was written at debug level, with request logging on.
		if !regexp.MustCompile(`(?m)\[DEBUG\] +[a-z.]*http: request: method=POST route=/services/v1/queue/:queue_id/claim status=200`).Match(b) {
			t.Errorf("the log of %s has no debug request line for claims: the search of logs would not cover request logging", n.ID)
		}
	}

	// Every node has its stable store, its Raft log segments, a snapshot
	// and its node id; the values stored raw by design are found in each
	// node's log and some snapshot, so the search demonstrably reads what
	// it searches.
	for _, n := range e.c.Nodes() {
		var bolt, segs, snaps []file
		nodeID := true // the kept id, when the file is there, must be this node's
		for _, f := range files {
			if f.node != n.ID {
				continue
			}
			rel, _ := filepath.Rel(n.DataDir, f.path)
			switch {
			case rel == "raft.db":
				bolt = append(bolt, f)
			case strings.HasPrefix(rel, "raft-log"+string(filepath.Separator)) && strings.HasSuffix(rel, ".seg"):
				segs = append(segs, f)
			case strings.HasPrefix(rel, "snapshots"+string(filepath.Separator)):
				// state.bin, or a checkpoint's files beside its marker
				snaps = append(snaps, f)
			case rel == "node-id":
				nodeID = string(bytes.TrimSpace(f.data)) == n.ID
			}
		}
		if len(bolt) != 1 || len(segs) == 0 || len(snaps) == 0 || !nodeID {
			t.Errorf("%s: want raft.db, raft-log/*.seg, at least one snapshot's files under snapshots/ and no other node-id than %q; found %d bolt files, %d log segments, %d snapshots, node-id ok %v",
				n.ID, n.ID, len(bolt), len(segs), len(snaps), nodeID)
			continue
		}
		var raftLog []byte
		for _, f := range segs {
			raftLog = append(raftLog, f.data...)
		}
		for v, kind := range stored {
			if !bytes.Contains(raftLog, []byte(v)) {
				t.Errorf("%s: the %s %q, stored raw by design, is not in the Raft log under %s: the search does not see the data", n.ID, kind, v, filepath.Join(n.DataDir, "raft-log"))
			}
			inSnap := false
			for _, s := range snaps {
				inSnap = inSnap || bytes.Contains(s.data, []byte(v))
			}
			if !inSnap {
				t.Errorf("%s: the %s %q is in no snapshot", n.ID, kind, v)
			}
		}
	}

	// Report leaks by kind: how many, and a few with where they were found.
	leaks := map[string][]string{}
	nLeaks := 0
	for v, kind := range secrets {
		for _, f := range files {
			if i := bytes.Index(f.data, []byte(v)); i >= 0 {
				nLeaks++
				ctx := f.data[max(0, i-60):min(len(f.data), i+len(v)+60)]
				leaks[kind] = append(leaks[kind], fmt.Sprintf("%q in %s at byte %d: …%q…", v, f.path, i, ctx))
			}
		}
	}
	var leakKinds []string
	for k := range leaks {
		leakKinds = append(leakKinds, k)
	}
	sort.Strings(leakKinds)
	for _, k := range leakKinds {
		l := leaks[k]
		sort.Strings(l)
		t.Errorf("%d raw %s occurrences on disk or in logs, e.g.:\n  %s", len(l), k, strings.Join(l[:min(3, len(l))], "\n  "))
	}
	var total int
	for _, f := range files {
		total += len(f.data)
	}
	t.Logf("searched %d files (%s) for %d secrets; %d leaks", len(files), strconv.Itoa(total>>10)+" KiB", len(secrets), nLeaks)
}
