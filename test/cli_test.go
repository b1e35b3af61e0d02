//go:build unix

package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// cliEnv runs the holdfast binary's client commands against one cluster.
type cliEnv struct {
	t     *testing.T
	addrs string   // HOLDFAST_ADDR for every command
	env   []string // extra environment
	dir   string
	// secrets are values no command may write to stderr, shared by the
	// copies for subtests.
	secrets *[]string
}

// with is a copy of c that reports to t (a subtest).
func (c *cliEnv) with(t *testing.T) *cliEnv {
	v := *c
	v.t = t
	return &v
}

// ran is one finished command.
type ran struct {
	code           int
	stdout, stderr string
}

func (r ran) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout: " + r.stdout + "\nstderr: " + r.stderr
}

func newCLIEnv(t *testing.T, nodes ...*harness.Node) *cliEnv {
	return &cliEnv{t: t, addrs: harness.JoinList(nodes...), dir: t.TempDir(), secrets: new([]string)}
}

// command builds `holdfast args...` with the env's environment plus extra.
func (c *cliEnv) command(ctx context.Context, extra []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, env.Binary, args...)
	cmd.Env = append(append(append(os.Environ(), "HOLDFAST_ADDR="+c.addrs), c.env...), extra...)
	cmd.Dir = c.dir
	return cmd
}

// run runs a command to its end (bounded) and checks stderr for secrets.
func (c *cliEnv) run(extra []string, args ...string) ran {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := c.command(ctx, extra, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := ran{stdout: strings.TrimSpace(out.String()), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		c.t.Fatalf("holdfast %s: %v", strings.Join(args, " "), err)
	}
	c.checkStderr(args, r.stderr)
	return r
}

func (c *cliEnv) checkStderr(args []string, stderr string) {
	c.t.Helper()
	for _, s := range *c.secrets {
		if s != "" && strings.Contains(stderr, s) {
			c.t.Errorf("holdfast %s wrote a secret to stderr: %s", strings.Join(args, " "), stderr)
		}
	}
}

// want runs a command and fails the test unless it exits with code.
func (c *cliEnv) want(code int, extra []string, args ...string) ran {
	c.t.Helper()
	r := c.run(extra, args...)
	if r.code != code {
		c.t.Fatalf("holdfast %s: want exit %d, got %s", strings.Join(args, " "), code, r)
	}
	return r
}

// secret records a value as secret and returns it.
func (c *cliEnv) secret(v string) string {
	c.t.Helper()
	if v == "" {
		c.t.Fatal("empty secret")
	}
	*c.secrets = append(*c.secrets, v)
	return v
}

// file writes content to a file in the env's directory and returns "@path".
func (c *cliEnv) file(name, content string) string {
	c.t.Helper()
	p := filepath.Join(c.dir, name)
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return "@" + p
}

// fakeNode is an HTTP server that gives every request the same answer
// and counts them.
type fakeNode struct {
	addr string // host:port
	hits atomic.Int64
}

// answering starts a fakeNode answering status with body (and
// Retry-After: 1) until the test ends.
func answering(t *testing.T, status int, body string) *fakeNode {
	t.Helper()
	f := &fakeNode{}
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		f.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	f.addr = s.Listener.Addr().String()
	return f
}

func jsonOf(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("not a JSON object: %q: %v", s, err)
	}
	return m
}

func TestCLI(t *testing.T) {
	c := env.NewCluster(t, 3, harness.Options{})
	c.StartBootstrap()
	c.WaitAllReady()
	cli := newCLIEnv(t, c.Nodes()...)

	t.Run("version", func(t *testing.T) {
		cli := cli.with(t)
		for _, arg := range []string{"version", "--version"} {
			r := cli.want(0, nil, arg)
			if !regexp.MustCompile(`^holdfast \S+ commit \S+ go1\.\d+`).MatchString(r.stdout) {
				t.Errorf("holdfast %s printed %q", arg, r.stdout)
			}
		}
	})
	t.Run("usage", func(t *testing.T) {
		cli := cli.with(t)
		cli.want(2, nil, "lease")
		cli.want(2, nil, "lease", "frobnicate")
		cli.want(2, nil, "lease", "acquire", "--ttl", "x")
		cli.want(2, []string{"HOLDFAST_KEY="}, "lease", "acquire")
		cli.want(2, nil, "queue", "enqueue", "--queue", "q", "--token", "t", "--key", "k", "--payload", "{not json")
		cli.want(2, nil, "cluster", "settings", "--set", "queue_max_jobs=many")
		cli.want(2, nil, "exec", "--key", "k")
		cli.want(2, nil, "work", "--queue", "q", "--token", "t")
		cli.want(0, nil, "lease", "-h")
		// An address no request can be built for: nothing was sent.
		cli.want(2, []string{"HOLDFAST_ADDR=127.0.0.1:abc"}, "lease", "namespace")
		cli.want(2, nil, "lease", "complete", "--key", "k", "--owner-token", "t")
		cli.want(2, nil, "queue", "create", "--env", "--field", "queue_id")
		cli.want(0, nil, "lease", "namespace", "--timeout", "30")
		if r := cli.want(0, []string{"HOLDFAST_SHOW_STATUS=0"}, "lease", "namespace", "--field", "ok"); strings.Contains(r.stderr, "HTTP 200") {
			t.Errorf("HOLDFAST_SHOW_STATUS=0 printed the status: %s", r)
		}
	})
	t.Run("lease", func(t *testing.T) { cliLease(t, cli.with(t)) })
	t.Run("queue", func(t *testing.T) { cliQueue(t, cli.with(t)) })
	t.Run("cluster", func(t *testing.T) {
		cli := cli.with(t)
		// Not on a terminal, the status is the node's JSON, as with --json.
		for _, args := range [][]string{{"cluster", "status"}, {"cluster", "status", "--json"}} {
			r := cli.want(0, nil, args...)
			if st := jsonOf(t, r.stdout); st["node_id"] == nil || st["leader_id"] == "" {
				t.Errorf("%s: %s", strings.Join(args, " "), r.stdout)
			}
		}
		r := cli.want(0, nil, "cluster", "settings", "--field", "settings.queue_max_jobs")
		if r.stdout != "100" {
			t.Errorf("queue_max_jobs = %q, want 100", r.stdout)
		}
		cli.want(0, nil, "cluster", "settings", "--set", "queue_max_jobs=100")
		r = cli.want(1, nil, "cluster", "join", "--node-id", "n9", "--raft-addr", "no-port", "--http-addr", "127.0.0.1:1")
		if jsonOf(t, r.stdout)["field"] != "raft_addr" {
			t.Errorf("a join with a bad Raft address: %s", r)
		}
		if r = cli.want(1, nil, "cluster", "remove", "--node-id", "no-such-node"); !strings.Contains(r.stderr, "HTTP 404") {
			t.Errorf("removing an unknown member: %s", r)
		}
		r = cli.want(1, nil, "cluster", "settings", "--set", "queue_max_jobs=0")
		if !strings.Contains(r.stderr, "HTTP 400") || jsonOf(t, r.stdout)["field"] != "queue_max_jobs" {
			t.Errorf("a bad setting: %s", r)
		}
		r = cli.want(1, nil, "cluster", "settings", "--set", "visibility_default_seconds=10")
		if jsonOf(t, r.stdout)["field"] != "visibility_default_seconds" {
			t.Errorf("a default outside its range: %s", r)
		}
	})
	t.Run("failover", func(t *testing.T) {
		cli := cli.with(t)
		refused, err := env.Ports.Addr() // nothing listens there
		if err != nil {
			t.Fatal(err)
		}
		r := cli.want(0, []string{"HOLDFAST_ADDR=" + refused + "," + c.Node(1).HTTPAddr}, "lease", "namespace", "--field", "namespace")
		cli.secret(r.stdout)
		if !strings.HasPrefix(r.stdout, "ns_") {
			t.Errorf("namespace through the second address: %s", r)
		}
		cli.want(1, []string{"HOLDFAST_ADDR=" + refused}, "lease", "namespace", "--timeout", "1s")

		// A node that cannot write its storage changed nothing: the call
		// moves on. A 507 for a cluster limit is the answer.
		full := answering(t, http.StatusInsufficientStorage, `{"ok":false,"error":"node n9 cannot write its raft-log (no space left on device): nothing was changed","outcome":"not_applied","node_id":"n9","storage":"raft-log","retry_after_seconds":1}`)
		r = cli.want(0, []string{"HOLDFAST_ADDR=" + full.addr + "," + c.Node(1).HTTPAddr}, "lease", "namespace", "--field", "namespace")
		cli.secret(r.stdout)
		if full.hits.Load() != 1 || !strings.HasPrefix(r.stdout, "ns_") {
			t.Errorf("after a 507 storage (%d requests to it): %s", full.hits.Load(), r)
		}
		limit := answering(t, http.StatusInsufficientStorage, `{"ok":false,"error":"the cluster holds its maximum of 10 live queues","setting":"max_queues","limit":10}`)
		r = cli.want(1, []string{"HOLDFAST_ADDR=" + limit.addr + "," + c.Node(1).HTTPAddr}, "lease", "namespace")
		if !strings.Contains(r.stderr, "HTTP 507") || jsonOf(t, r.stdout)["setting"] != "max_queues" {
			t.Errorf("a 507 for a limit was not the answer: %s", r)
		}
	})
	t.Run("exec", func(t *testing.T) { cliExec(t, cli.with(t)) })
	t.Run("slots", func(t *testing.T) {
		awaitLevel(t, c.Node(0), 2)
		cliSlots(t, cli.with(t))
	})
	t.Run("resume-from-checkpoint", func(t *testing.T) {
		awaitLevel(t, c.Node(0), 2)
		cliResume(t, cli.with(t))
	})
	t.Run("work", func(t *testing.T) { cliWork(t, cli.with(t)) })
	t.Run("queue-create-env", func(t *testing.T) {
		cli := cli.with(t)
		r := cli.want(0, nil, "queue", "create", "--env")
		// The lines a shell evals, then used by a command that reads them.
		out, err := exec.Command("sh", "-c", r.stdout+"\n"+`echo "$HOLDFAST_QUEUE $HOLDFAST_WRITE_TOKEN $HOLDFAST_WORKER_TOKEN $HOLDFAST_READ_TOKEN"`).Output()
		vals := strings.Fields(string(out))
		if err != nil || len(vals) != 4 || len(vals[0]) != 32 || len(vals[1]) != 64 || len(vals[3]) != 64 {
			t.Fatalf("queue create --env printed %q; evaluated: %q, %v", r.stdout, out, err)
		}
		e := []string{"HOLDFAST_QUEUE=" + vals[0], "HOLDFAST_READ_TOKEN=" + cli.secret(vals[3])}
		if got := cli.want(0, e, "queue", "get", "--field", "counts.total").stdout; got != "0" {
			t.Errorf("the new queue's total: %q", got)
		}
		// A refusal prints nothing a shell would evaluate.
		def := cli.want(0, nil, "cluster", "settings", "--field", "settings.queues_per_client").stdout
		cli.want(0, nil, "cluster", "settings", "--set", "queues_per_client=1")
		defer cli.want(0, nil, "cluster", "settings", "--set", "queues_per_client="+def)
		if r := cli.want(3, nil, "queue", "create", "--env"); r.stdout != "" || !strings.Contains(r.stderr, "HTTP 429") {
			t.Errorf("a refused queue create --env: %s", r)
		}
	})
}

func cliLease(t *testing.T, cli *cliEnv) {
	r := cli.want(0, nil, "lease", "namespace", "--status", "--field", "namespace")
	ns := cli.secret(r.stdout)
	if !regexp.MustCompile(`^HTTP 20[01] `).MatchString(r.stderr) {
		t.Errorf("--status printed %q to stderr", r.stderr)
	}
	e := []string{"HOLDFAST_NAMESPACE=" + ns}
	r = cli.want(0, append(e, "HOLDFAST_SHOW_STATUS=1"), "lease", "acquire", "--key", "report:1", "--fingerprint", "f1", "--ttl", "60")
	if !strings.HasPrefix(r.stderr, "HTTP 201 Created") {
		t.Errorf("HOLDFAST_SHOW_STATUS=1 printed %q to stderr", r.stderr)
	}
	a := jsonOf(t, r.stdout)
	owner := cli.secret(a["owner_token"].(string))
	if a["status"] != "held" || a["fencing_token"] == nil {
		t.Fatalf("acquire answered %s", r.stdout)
	}
	// Held by someone else: 3, the answer still on stdout for jq.
	r = cli.want(3, e, "lease", "acquire", "--key", "report:1", "--fingerprint", "f1")
	if jsonOf(t, r.stdout)["status"] != "held" || !strings.Contains(r.stderr, "HTTP 409") {
		t.Errorf("second acquire: %s", r)
	}
	// The owner token from a file, then from the environment.
	cli.want(0, e, "lease", "renew", "--key", "report:1", "--owner-token", cli.file("owner", owner), "--ttl", "90")
	r = cli.want(0, append(e, "HOLDFAST_OWNER_TOKEN="+owner), "lease", "complete", "--key", "report:1", "--result", `{"receipt_id":4817}`, "--field", "status")
	if r.stdout != "completed" {
		t.Errorf("complete --field status printed %q", r.stdout)
	}
	r = cli.want(0, e, "lease", "acquire", "--key", "report:1", "--fingerprint", "f1", "--field", "result.receipt_id")
	if r.stdout != "4817" {
		t.Errorf("the stored result through --field: %q", r.stdout)
	}
	cli.want(4, e, "lease", "acquire", "--key", "report:1", "--fingerprint", "other")
	cli.want(5, e, "lease", "release", "--key", "report:1", "--owner-token", owner)
	cli.want(1, []string{"HOLDFAST_NAMESPACE=not-a-namespace"}, "lease", "acquire", "--key", "k")

	// The same request id again, while its grant holds: the same grant.
	rid := cli.secret(strings.Repeat("0123456789abcdef", 2))
	first := jsonOf(t, cli.want(0, append(e, "HOLDFAST_REQUEST_ID="+rid), "lease", "acquire", "--key", "report:2").stdout)
	again := jsonOf(t, cli.want(0, e, "lease", "acquire", "--key", "report:2", "--request-id", cli.file("rid", rid)).stdout)
	if first["owner_token"] != again["owner_token"] || first["fencing_token"] != again["fencing_token"] {
		t.Errorf("acquire with the same request id: %v, then %v", first, again)
	}
	cli.secret(first["owner_token"].(string))
	cli.want(3, e, "lease", "acquire", "--key", "report:2", "--request-id", strings.Repeat("f", 32))
	start := time.Now()
	cli.want(3, e, "lease", "acquire", "--key", "report:2", "--wait", "1") // waited, still held
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Errorf("acquire --wait 1 answered after %v", el)
	}
	cli.want(1, e, "lease", "acquire", "--key", "report:2", "--request-id", "short")
}

func cliQueue(t *testing.T, cli *cliEnv) {
	r := cli.want(0, nil, "queue", "create")
	q := jsonOf(t, r.stdout)
	id := q["queue_id"].(string)
	w, k, rd := cli.secret(q["write_token"].(string)), cli.secret(q["worker_token"].(string)), cli.secret(q["read_token"].(string))
	e := []string{"HOLDFAST_QUEUE=" + id, "HOLDFAST_WRITE_TOKEN=" + w, "HOLDFAST_WORKER_TOKEN=" + k, "HOLDFAST_READ_TOKEN=" + rd}

	r = cli.want(0, e, "queue", "enqueue", "--key", "report:42", "--payload", `{"report_id":42}`, "--field", "job_id")
	job := r.stdout
	if r = cli.want(0, e, "queue", "enqueue", "--key", "report:42", "--payload", `{"report_id":42}`, "--field", "deduplicated"); r.stdout != "true" {
		t.Errorf("repeated enqueue: deduplicated=%q", r.stdout)
	}
	cli.want(4, e, "queue", "enqueue", "--key", "report:42", "--payload", `{"report_id":43}`)
	r = cli.want(0, e, "queue", "claim", "--visibility", "30")
	cl := jsonOf(t, r.stdout)["job"].(map[string]any)
	receipt := cli.secret(cl["receipt"].(string))
	if cl["job_id"] != job {
		t.Fatalf("claimed %v, enqueued %s", cl["job_id"], job)
	}
	cli.want(3, e, "queue", "claim") // empty: try later
	// Empty is "try later" whatever field is asked for; nothing is printed.
	if r := cli.want(3, e, "queue", "claim", "--field", "job.receipt"); r.stdout != "" {
		t.Errorf("an empty claim's job.receipt printed %q", r.stdout)
	}
	cli.want(2, e, "queue", "enqueue", "--key", "no-payload")
	cli.want(2, e, "queue", "enqueue", "--payload", "1")
	start := time.Now()
	cli.want(3, e, "queue", "claim", "--wait", "1") // waited, still empty
	if el := time.Since(start); el < 900*time.Millisecond {
		t.Errorf("claim --wait 1 answered after %v", el)
	}
	cli.want(1, e, "queue", "claim", "--wait", "21")
	// Claims with a request id: the same one again answers the same claim.
	r = cli.want(0, e, "queue", "enqueue", "--key", "report:44", "--payload", `44`, "--field", "job_id")
	job3 := r.stdout
	qrid := cli.secret(strings.Repeat("fedcba9876543210", 2))
	c1 := jsonOf(t, cli.want(0, append(e, "HOLDFAST_REQUEST_ID="+qrid), "queue", "claim").stdout)["job"].(map[string]any)
	c2 := jsonOf(t, cli.want(0, e, "queue", "claim", "--request-id", qrid).stdout)["job"].(map[string]any)
	if c1["job_id"] != job3 || c1["receipt"] != c2["receipt"] || c2["job_id"] != job3 {
		t.Errorf("claims with the same request id: %v, then %v", c1, c2)
	}
	cli.secret(c1["receipt"].(string))
	cli.want(0, e, "queue", "ack", "--job", job3, "--receipt", c1["receipt"].(string))
	cli.want(0, e, "queue", "renew", "--job", job, "--receipt", cli.file("receipt", receipt), "--visibility", "60")
	cli.want(0, append(e, "HOLDFAST_RECEIPT="+receipt), "queue", "ack", "--job", job)
	cli.want(0, e, "queue", "ack", "--job", job, "--receipt", receipt) // repeatable
	cli.want(5, e, "queue", "release", "--job", job, "--receipt", receipt)
	if r = cli.want(0, e, "queue", "get", "--field", "counts.completed"); r.stdout != "2" {
		t.Errorf("completed count %q", r.stdout)
	}
	if r = cli.want(0, e, "queue", "job", "--job", job, "--field", "job.status"); r.stdout != "completed" {
		t.Errorf("job status %q", r.stdout)
	}
	// The write token cannot claim: 403, exit 1.
	cli.want(1, e, "queue", "claim", "--token", w)
	// Retry of a job that is not failed: 409 job_status, exit 4; without
	// --job nothing is sent.
	if r = cli.want(4, e, "queue", "retry", "--job", job, "--status"); !strings.Contains(r.stdout, `"job_status":"completed"`) {
		t.Errorf("retry of a completed job: %q", r.stdout)
	}
	cli.want(2, e, "queue", "retry")

	// A release with --delay keeps the job from claims; five releases
	// fail it, and retry gives it its attempts back.
	r = cli.want(0, e, "queue", "enqueue", "--key", "report:43", "--payload", `43`, "--field", "job_id")
	job2 := r.stdout
	for attempt := 1; attempt <= 5; attempt++ {
		cl := jsonOf(t, cli.want(0, e, "queue", "claim", "--visibility", "30").stdout)["job"].(map[string]any)
		rc := cli.secret(cl["receipt"].(string))
		delay := "0"
		if attempt == 1 {
			delay = "1"
		}
		r = cli.want(0, e, "queue", "release", "--job", job2, "--receipt", rc, "--delay", delay)
		rel := jsonOf(t, r.stdout)["job"].(map[string]any)
		if _, has := rel["available_at_timestamp"]; has != (attempt == 1) {
			t.Errorf("release %d with --delay %s: %v", attempt, delay, rel)
		}
		if attempt == 1 {
			cli.want(3, e, "queue", "claim") // within the delay: nothing to claim
			time.Sleep(2 * time.Second)
		}
	}
	if r = cli.want(0, e, "queue", "job", "--job", job2, "--field", "job.status"); r.stdout != "failed" {
		t.Errorf("status after five releases %q", r.stdout)
	}
	cli.want(1, e, "queue", "retry", "--job", job2, "--token", k) // the worker token may not
	if r = cli.want(0, e, "queue", "retry", "--job", job2, "--field", "job.attempts"); r.stdout != "0" {
		t.Errorf("attempts after retry %q", r.stdout)
	}
	cli.want(2, e, "queue", "release", "--job", job2, "--receipt", receipt, "--delay", "x")
}

// waitFile waits (bounded) for a file a command writes and returns its content.
func waitFile(t *testing.T, path string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			return strings.TrimSpace(string(b))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within %v", path, within)
	return ""
}

// alive says whether a process exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func cliExec(t *testing.T, cli *cliEnv) {
	ns := cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)
	e := []string{"HOLDFAST_NAMESPACE=" + ns}
	runs := filepath.Join(cli.dir, "runs")
	started := filepath.Join(cli.dir, "started")
	script := `echo "$HOLDFAST_FENCING_TOKEN $HOLDFAST_LEASE_EXPIRES_AT" >> ` + runs + `; echo go > ` + started + `; sleep 2`

	t.Run("once-while-another-waits", func(t *testing.T) {
		cli := cli.with(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		first := cli.command(ctx, e, "exec", "--key", "nightly", "--fingerprint", "2026-12-01", "--ttl", "6", "--", "sh", "-c", script)
		var firstOut bytes.Buffer
		first.Stdout, first.Stderr = &firstOut, &firstOut
		if err := first.Start(); err != nil {
			t.Fatal(err)
		}
		waitFile(t, started, 20*time.Second)
		// The second waits for the first, then finds the key completed and
		// prints the stored result without running the command.
		r := cli.want(0, e, "exec", "--key", "nightly", "--fingerprint", "2026-12-01", "--wait", "30s", "--", "sh", "-c", script)
		if err := first.Wait(); err != nil {
			t.Fatalf("first exec: %v\n%s", err, firstOut.String())
		}
		if r.stdout != `{"exit_code":0}` {
			t.Errorf("the waiting exec printed %q, want the stored result", r.stdout)
		}
		if !strings.Contains(r.stderr, "did not run the command") {
			t.Errorf("the waiting exec did not say on stderr that it did not run the command: %q", r.stderr)
		}
		lines := strings.Split(waitFile(t, runs, time.Second), "\n")
		if len(lines) != 1 || !regexp.MustCompile(`^\d+ \d{4}-\d\d-\d\dT`).MatchString(lines[0]) {
			t.Errorf("the command ran %d times: %q", len(lines), lines)
		}
		// Completed: a third exec does not run the command either.
		cli.want(0, e, "exec", "--key", "nightly", "--fingerprint", "2026-12-01", "--", "sh", "-c", "echo ran >> "+runs)
		if got := waitFile(t, runs, time.Second); strings.Count(got, "\n") != 0 {
			t.Errorf("a completed key ran its command: %q", got)
		}
	})
	t.Run("renews-while-running", func(t *testing.T) {
		cli := cli.with(t)
		// A 3 s lease, a 5 s command: only renewals keep it (without them
		// exec would stop the command at 3 s and exit 5).
		cli.want(0, e, "exec", "--key", "renewing", "--ttl", "3", "--", "sleep", "5")
	})
	t.Run("failure-releases", func(t *testing.T) {
		cli := cli.with(t)
		cli.want(7, e, "exec", "--key", "failing", "--", "sh", "-c", "exit 7")
		// Released: the next acquire is granted at once.
		cli.want(0, e, "lease", "acquire", "--key", "failing")
	})
	t.Run("result-stdout", func(t *testing.T) {
		cli := cli.with(t)
		r := cli.want(0, e, "exec", "--key", "report", "--fingerprint", "x", "--result", "stdout", "--", "sh", "-c", `echo '{"rows":12}'`)
		if r.stdout != `{"rows":12}` {
			t.Errorf("exec passed stdout on as %q", r.stdout)
		}
		if r = cli.want(0, e, "exec", "--key", "report", "--fingerprint", "x", "--", "false"); r.stdout != `{"rows":12}` {
			t.Errorf("the stored stdout result: %q", r.stdout)
		}
	})
	t.Run("signal-reaches-command", func(t *testing.T) {
		cli := cli.with(t)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ready := filepath.Join(cli.dir, "trap-ready")
		cmd := cli.command(ctx, e, "exec", "--key", "signalled", "--", "sh", "-c", `trap 'exit 42' TERM; echo up > `+ready+`; while :; do sleep 0.1; done`)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFile(t, ready, 20*time.Second)
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 42 {
			t.Fatalf("exec after SIGTERM: %v, want the command's exit 42", err)
		}
		cli.want(0, e, "lease", "acquire", "--key", "signalled") // released
	})
}

// TestCLIExecLostLease stops the cluster under a running exec: the command is
// stopped once the lease would have expired, and exec exits 5.
func TestCLIExecLostLease(t *testing.T) {
	c := env.NewCluster(t, 1, harness.Options{})
	c.StartBootstrap()
	c.WaitAllReady()
	cli := newCLIEnv(t, c.Nodes()...)
	ns := cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)
	pidPath := filepath.Join(cli.dir, "pid")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := cli.command(ctx, []string{"HOLDFAST_NAMESPACE=" + ns}, "exec", "--key", "long", "--ttl", "3", "--grace", "1s", "--timeout", "2s", "--",
		"sh", "-c", `echo $$ > `+pidPath+`; exec sleep 50`)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(waitFile(t, pidPath, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	c.Stop(c.Node(0))
	stopped := time.Now()
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Fatalf("exec with its cluster stopped: %v, want exit 5\n%s", err, out.String())
	}
	if d := time.Since(stopped); d > 15*time.Second {
		t.Errorf("exec noticed the lost lease %v after the cluster stopped (TTL 3 s)", d)
	}
	if alive(pid) {
		t.Errorf("the command (pid %d) still runs after its lease was lost", pid)
	}
	if !strings.Contains(out.String(), "expired before a renewal succeeded") {
		t.Errorf("exec's message: %s", out.String())
	}
}

// queueEnv creates a queue and returns the environment that names it and
// its tokens.
func (c *cliEnv) queueEnv() []string {
	c.t.Helper()
	q := jsonOf(c.t, c.want(0, nil, "queue", "create").stdout)
	return []string{"HOLDFAST_QUEUE=" + q["queue_id"].(string),
		"HOLDFAST_WRITE_TOKEN=" + c.secret(q["write_token"].(string)),
		"HOLDFAST_WORKER_TOKEN=" + c.secret(q["worker_token"].(string)),
		"HOLDFAST_READ_TOKEN=" + c.secret(q["read_token"].(string))}
}

func cliWork(t *testing.T, cli *cliEnv) {
	e := cli.queueEnv()
	seen := filepath.Join(cli.dir, "seen")
	// The command sees the payload on stdin and the job in its environment;
	// a payload saying ok:true succeeds, anything else fails.
	script := `p=$(cat); echo "$HOLDFAST_JOB_KEY $HOLDFAST_ATTEMPT $HOLDFAST_JOB_ID $p" >> ` + seen + `; case "$p" in *true*) exit 0;; *) exit 1;; esac`

	t.Run("ack-and-release", func(t *testing.T) {
		cli := cli.with(t)
		good := cli.want(0, e, "queue", "enqueue", "--key", "good", "--payload", `{"ok":true}`, "--field", "job_id").stdout
		bad := cli.want(0, e, "queue", "enqueue", "--key", "bad", "--payload", `{"ok":false}`, "--field", "job_id").stdout
		r := cli.want(0, e, "work", "--max-jobs", "3", "--idle-max", "200ms", "--retry-delay", "1", "--", "sh", "-c", script)
		if st := cli.want(0, e, "queue", "job", "--job", good, "--field", "job.status").stdout; st != "completed" {
			t.Errorf("the job whose command exited 0 is %s\n%s", st, r.stderr)
		}
		j := jsonOf(t, cli.want(0, e, "queue", "job", "--job", bad).stdout)["job"].(map[string]any)
		if j["status"] != "pending" || j["attempts"] != float64(2) {
			t.Errorf("the failing job after two attempts: %v\n%s", j, r.stderr)
		}
		// Failed attempts come back after a doubling delay: 1 s, then 2 s.
		if _, ok := j["available_at_timestamp"]; !ok || !strings.Contains(r.stderr, "claimable again in 1s") || !strings.Contains(r.stderr, "claimable again in 2s") {
			t.Errorf("the failing job was not released with a growing delay: %v\n%s", j, r.stderr)
		}
		got := waitFile(t, seen, time.Second)
		for _, want := range []string{"good 1 " + good + ` {"ok":true}`, "bad 1 " + bad + ` {"ok":false}`, "bad 2 " + bad} {
			if !strings.Contains(got, want) {
				t.Errorf("the commands saw %q, missing %q", got, want)
			}
		}
		if !strings.Contains(r.stderr, "acked") || !strings.Contains(r.stderr, "released") {
			t.Errorf("work's log: %s", r.stderr)
		}
	})
	t.Run("renews-while-running", func(t *testing.T) {
		cli := cli.with(t)
		// A 3 s window (the replicated minimum lowered for the test), a 5 s
		// command: only renewals keep the claim, so the ack succeeds.
		cli.want(0, nil, "cluster", "settings", "--set", "visibility_min_seconds=1")
		defer cli.want(0, nil, "cluster", "settings", "--set", "visibility_min_seconds=30")
		e := cli.queueEnv()
		job := cli.want(0, e, "queue", "enqueue", "--key", "long", "--payload", `{"ok":true}`, "--field", "job_id").stdout
		r := cli.want(0, e, "work", "--visibility", "3", "--max-jobs", "1", "--", "sh", "-c", "cat > /dev/null; sleep 5")
		j := jsonOf(t, cli.want(0, e, "queue", "job", "--job", job).stdout)["job"].(map[string]any)
		if j["status"] != "completed" || j["attempts"] != float64(1) {
			t.Errorf("the 5 s job with a 3 s window: %v\n%s", j, r.stderr)
		}
	})
	t.Run("drains-on-sigterm", func(t *testing.T) {
		cli := cli.with(t)
		e := cli.queueEnv()
		job := cli.want(0, e, "queue", "enqueue", "--key", "slow", "--payload", `{"ok":true}`, "--field", "job_id").stdout
		started, done := filepath.Join(cli.dir, "slow-started"), filepath.Join(cli.dir, "slow-done")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := cli.command(ctx, e, "work", "--concurrency", "2", "--idle-max", "200ms", "--", "sh", "-c",
			`cat > /dev/null; echo up > `+started+`; sleep 2; echo ok > `+done)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFile(t, started, 20*time.Second)
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("work after SIGTERM: %v\n%s", err, out.String())
		}
		if _, err := os.Stat(done); err != nil {
			t.Errorf("work exited before its running job finished\n%s", out.String())
		}
		if st := cli.want(0, e, "queue", "job", "--job", job, "--field", "job.status").stdout; st != "completed" {
			t.Errorf("the drained job is %s\n%s", st, out.String())
		}
	})
}

// TestCLITLS runs client commands against a cluster that serves HTTPS and
// requires client certificates: with the CA and a client certificate they
// work (addresses without a scheme use https), without the certificate the
// node refuses the connection.
func TestCLITLS(t *testing.T) {
	c := env.NewCluster(t, 3, harness.Options{TLS: true, TLSClientAuth: true})
	c.StartBootstrap()
	c.WaitAllReady()
	cert, err := c.PKI().Client("cli")
	if err != nil {
		t.Fatal(err)
	}
	cli := newCLIEnv(t, c.Nodes()...)
	cli.env = []string{"HOLDFAST_CA_FILE=" + c.PKI().CAFile(), "HOLDFAST_CLIENT_CERT_FILE=" + cert.Cert, "HOLDFAST_CLIENT_KEY_FILE=" + cert.Key}
	ns := cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)
	if r := cli.want(0, []string{"HOLDFAST_NAMESPACE=" + ns}, "lease", "acquire", "--key", "tls", "--field", "status"); r.stdout != "held" {
		t.Errorf("acquire over TLS: %s", r)
	}
	cli.want(0, nil, "example-worker")
	cli.want(1, []string{"HOLDFAST_CLIENT_CERT_FILE=", "HOLDFAST_CLIENT_KEY_FILE="}, "cluster", "status", "--timeout", "2s")
	cli.want(2, []string{"HOLDFAST_CLIENT_KEY_FILE="}, "cluster", "status")
	// The former names still work, with a warning naming the new ones.
	old := []string{"HOLDFAST_CLIENT_CERT_FILE=", "HOLDFAST_CLIENT_KEY_FILE=", "HOLDFAST_CERT_FILE=" + cert.Cert}
	r := cli.want(0, old, "cluster", "status", "--key-file", cert.Key)
	if !strings.Contains(r.stderr, "HOLDFAST_CERT_FILE is now HOLDFAST_CLIENT_CERT_FILE") || !strings.Contains(r.stderr, "--key-file is now --client-key-file") {
		t.Errorf("the former names gave no warning: %q", r.stderr)
	}
}

// TestCLITryLater: a 429 (the queue quota) and a 503 (no leader) both exit
// 3, the 429 saying how many seconds to wait. Without a leader the CLI's
// timeout reaches the node (X-Holdfast-Timeout), which stops waiting for a
// leader in time to answer "nothing was changed" before the CLI gives up.
func TestCLITryLater(t *testing.T) {
	c := env.NewCluster(t, 3, harness.Options{})
	c.StartBootstrap()
	c.WaitAllReady()
	leader := c.WaitLeader()
	cli := newCLIEnv(t, leader)
	cli.want(0, nil, "cluster", "settings", "--set", "queues_per_client=1")
	cli.want(0, nil, "queue", "create", "--env")
	r := cli.want(3, nil, "queue", "create")
	if !strings.Contains(r.stderr, "HTTP 429") || !regexp.MustCompile(`retry in \d+ seconds`).MatchString(r.stderr) {
		t.Errorf("the second queue over a quota of one: %s", r)
	}
	for _, v := range []string{"0", "-5", "1.5", "soon", "3600001"} {
		status, body := timeoutHeaderAcquire(t, c, leader, v, 5*time.Second)
		if status != http.StatusBadRequest || !strings.Contains(body, `"field":"X-Holdfast-Timeout"`) {
			t.Errorf("X-Holdfast-Timeout: %s: HTTP %d %s, want a 400 naming the header", v, status, body)
		}
	}
	ns := cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)
	for _, n := range harness.Except(c.Nodes(), leader) {
		c.Stop(n)
	}
	c.Eventually("the leader without a quorum steps down", func() error {
		st, err := leader.Status()
		if err != nil {
			return err
		}
		if st.State == "leader" || st.LeaderID != "" {
			return fmt.Errorf("state %s, leader %q", st.State, st.LeaderID)
		}
		return nil
	})
	// The node waits for a leader for up to 3 s, as long as the CLI's
	// timeout: it answers first all the same.
	r = cli.want(3, []string{"HOLDFAST_NAMESPACE=" + ns}, "lease", "acquire", "--key", "k", "--timeout", "3s")
	if !strings.Contains(r.stderr, "HTTP 503") || !strings.Contains(r.stderr, "nothing was changed") {
		t.Errorf("an acquire without a leader: %s", r)
	}
	// A caller's shorter timeout shortens the wait; the answer says
	// nothing was applied.
	status, body := timeoutHeaderAcquire(t, c, leader, "1500", 1500*time.Millisecond)
	if status != http.StatusServiceUnavailable || !strings.Contains(body, `"outcome":"not_applied"`) {
		t.Errorf("an acquire without a leader, X-Holdfast-Timeout 1500: HTTP %d %s", status, body)
	}
}

// timeoutHeaderAcquire sends an acquire with X-Holdfast-Timeout v to n,
// waiting for its answer at most wait, and returns the status and body.
func timeoutHeaderAcquire(t *testing.T, c *harness.Cluster, n *harness.Node, v string, wait time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL("/services/v1/lease"),
		strings.NewReader(`{"key":"tXq9Lm2ZpR7vKc4WnB8yHd3Fj6GsA1eU0oIwQ5rT","ttl_seconds":10}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Holdfast-Timeout", v)
	resp, err := c.Client().Do(req)
	if err != nil {
		t.Fatalf("acquire with X-Holdfast-Timeout %s: %v", v, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	return resp.StatusCode, string(b)
}

// cliSlots: lease acquire --slots grants up to N owners; exec --slots N
// runs at most N copies at once, and a successful run releases its slot.
func cliSlots(t *testing.T, cli *cliEnv) {
	ns := cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)
	e := []string{"HOLDFAST_NAMESPACE=" + ns}
	for i := range 2 {
		r := cli.want(0, e, "lease", "acquire", "--key", "pair", "--slots", "2", "--ttl", "60")
		if j := jsonOf(t, r.stdout); j["slots"] != float64(2) || j["held"] != float64(i+1) {
			t.Errorf("acquire %d of a 2-slot key: %s", i+1, r.stdout)
		}
	}
	cli.want(3, e, "lease", "acquire", "--key", "pair", "--slots", "2")
	if r := cli.want(4, e, "lease", "acquire", "--key", "pair"); !strings.Contains(r.stderr+r.stdout, "slots") {
		t.Errorf("a single-slot acquire of a 2-slot key: %s", r)
	}
	cli.want(2, e, "exec", "--key", "x", "--slots", "0", "--", "true")
	cli.want(2, e, "exec", "--key", "x", "--slots", "2", "--result", "stdout", "--", "true")

	// Two long runs hold both slots; a third is refused at once; after them
	// a run succeeds and leaves its slot free.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var runs []*exec.Cmd
	for i := range 2 {
		started := filepath.Join(cli.dir, fmt.Sprintf("slot-%d", i))
		cmd := cli.command(ctx, e, "exec", "--key", "crawl", "--slots", "2", "--", "sh", "-c", "echo $HOLDFAST_FENCING_TOKEN > "+started+"; sleep 3")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, cmd)
		waitFile(t, started, 20*time.Second)
	}
	cli.want(3, e, "exec", "--key", "crawl", "--slots", "2", "--", "true")
	for _, cmd := range runs {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("a slot's run: %v", err)
		}
	}
	for range 3 {
		cli.want(0, e, "exec", "--key", "crawl", "--slots", "2", "--", "true")
	}
}

// cliResume: the README's resumable job. Each run of exec finds the last
// checkpoint in HOLDFAST_CHECKPOINT and stores its own with holdfast lease
// checkpoint; a run that fails part-way leaves its progress to the next.
func cliResume(t *testing.T, cli *cliEnv) {
	ns := cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)
	e := []string{"HOLDFAST_NAMESPACE=" + ns, "PATH=" + filepath.Dir(env.Binary) + ":" + os.Getenv("PATH")}
	seen := filepath.Join(cli.dir, "seen")
	// Steps 1 to 3; the first run dies after step 2.
	script := `bin=$1; last=$(cat "$HOLDFAST_CHECKPOINT"); echo "start:${last:-none}" >> ` + seen + `
step=$(printf '%s' "$last" | sed -n 's/.*"step":\([0-9]*\).*/\1/p'); step=${step:-0}
while [ "$step" -lt 3 ]; do
  step=$((step+1))
  "$bin" lease checkpoint --checkpoint "{\"step\":$step}" >/dev/null || exit 9
  if [ "$step" = 2 ] && [ ! -e ` + seen + `.crashed ]; then touch ` + seen + `.crashed; exit 7; fi
done`
	cli.want(7, e, "exec", "--key", "job-42", "--", "sh", "-c", script, "sh", env.Binary)
	cli.want(0, e, "exec", "--key", "job-42", "--", "sh", "-c", script, "sh", env.Binary)
	if got := waitFile(t, seen, time.Second); got != "start:none\nstart:{\"step\":2}" {
		t.Errorf("the runs started from %q, want none and then step 2", got)
	}
	// Completed: the result replaced the checkpoint.
	r := cli.want(0, e, "lease", "acquire", "--key", "job-42")
	if j := jsonOf(t, r.stdout); j["status"] != "completed" || j["checkpoint"] != nil {
		t.Errorf("after the second run: %s", r.stdout)
	}
}
