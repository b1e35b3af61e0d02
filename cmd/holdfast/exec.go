package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/internal/secret"
)

const execUsage = `Usage: holdfast exec --namespace NS --key KEY [flags] -- CMD [ARGS...]

Acquires the lease KEY (waiting up to --wait while another owner holds it: the server passes
the lease to the longest waiter when it is released or expires), runs CMD with
HOLDFAST_FENCING_TOKEN and HOLDFAST_LEASE_EXPIRES_AT in its environment and renews the lease
every third of its TTL. If the lease is lost (a renewal answers lost, or the lease would expire
before a renewal succeeds) CMD gets SIGTERM, then SIGKILL after --grace, and exec exits 5.
When CMD exits 0 the lease is completed with a result; otherwise it is released and exec exits
with CMD's status. A key already completed with the same fingerprint prints the stored result
and exits 0 without running CMD. Signals sent to exec are passed on to CMD's process group.
CMD also gets HOLDFAST_CHECKPOINT, naming a file that holds the key's last checkpoint (empty
when it has none), and HOLDFAST_OWNER_TOKEN, HOLDFAST_NAMESPACE, HOLDFAST_KEY and HOLDFAST_ADDR,
so that "holdfast lease checkpoint --checkpoint JSON" run by CMD stores its progress: the next
run of the key, here or on another host, after a crash, finds it in HOLDFAST_CHECKPOINT.
With --slots N the key has N slots: up to N runs of CMD hold it at once, across every host that
starts one, each with its own fencing token; a run that exits 0 releases its slot (results
belong to single-slot keys), so --result stdout is not allowed with it.

Flags:
`

// maxAcquireWait is the longest wait_seconds an acquire may ask for.
const maxAcquireWait = 60 * time.Second

// execLease is what exec needs from a grant or a renewal.
type execLease struct {
	OwnerToken     string          `json:"owner_token"`
	FencingToken   int64           `json:"fencing_token"`
	TTLSeconds     int64           `json:"ttl_seconds"`
	LeaseExpiresAt string          `json:"lease_expires_at"`
	Checkpoint     json.RawMessage `json:"checkpoint"`
}

// execRun is one run of holdfast exec.
type execRun struct {
	cl          *client.Client
	base        map[string]any // namespace and key
	fingerprint string
	slots       int
	ttl         time.Duration
	wait, grace time.Duration
	result      string
	// conn is what CMD needs to call the cluster as exec does (the
	// addresses and TLS files), as environment variables.
	conn   []string
	stdout io.Writer
	stderr io.Writer
}

func execCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("exec", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, execUsage)
		fs.PrintDefaults()
	}
	o := addConnFlags(fs)
	ns := secretFlag(fs, "namespace", "HOLDFAST_NAMESPACE", "the namespace")
	key := secretFlag(fs, "key", "HOLDFAST_KEY", "the lease key (a secret itself when there is no namespace)")
	r := &execRun{stdout: stdout, stderr: stderr}
	fs.StringVar(&r.fingerprint, "fingerprint", "", "what this run is for: a key completed with the same fingerprint is not run again")
	ttl := secondsFlag(fs, "ttl", 30, "lease TTL; renewed every third of it")
	durationVar(fs, &r.wait, "wait", 0, "how long to wait while another owner holds the lease (0: exit 3 at once)")
	durationVar(fs, &r.grace, "grace", 10*time.Second, "after SIGTERM on a lost lease, SIGKILL after this long")
	fs.IntVar(&r.slots, "slots", 1, "run at most this many copies of CMD at once across every host, 1 to 1000 (the key's first acquire fixes it)")
	fs.StringVar(&r.result, "result", "exit", `what a successful run stores: "exit" ({"exit_code":0}) or "stdout" (CMD's stdout, when it is JSON within the result limit)`)
	quietUsage(fs, args)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	argv := fs.Args()
	switch {
	case len(argv) == 0:
		return usageError(stderr, "exec", errors.New("no command given (put it after --)"))
	case *ttl < 3:
		return usageError(stderr, "exec", errors.New("--ttl must be at least 3 seconds (renewal runs every third of it)"))
	case r.result != "exit" && r.result != "stdout":
		return usageError(stderr, "exec", errors.New(`--result must be "exit" or "stdout"`))
	case r.slots < 1 || r.slots > 1000:
		return usageError(stderr, "exec", errors.New("--slots must be from 1 to 1000"))
	case r.slots > 1 && r.result == "stdout":
		return usageError(stderr, "exec", errors.New("--result stdout needs a single-slot key: results belong to single-slot leases"))
	}
	r.ttl = time.Duration(*ttl) * time.Second
	var err error
	if r.base, err = leaseTarget(ns, key); err != nil {
		return usageError(stderr, "exec", err)
	}
	if r.cl, err = o.client(); err != nil {
		return usageError(stderr, "exec", err)
	}
	r.conn = []string{"HOLDFAST_ADDR=" + o.addr}
	for _, v := range [][2]string{{"HOLDFAST_CA_FILE", o.caFile}, {"HOLDFAST_CLIENT_CERT_FILE", o.certFile}, {"HOLDFAST_CLIENT_KEY_FILE", o.keyFile}} {
		if v[1] != "" {
			r.conn = append(r.conn, v[0]+"="+v[1])
		}
	}
	defer r.cl.CloseIdle()
	return r.run(argv)
}

// body is the lease's namespace and key plus extra fields.
func (r *execRun) body(extra map[string]any) ([]byte, error) {
	m := make(map[string]any, len(r.base)+len(extra))
	for k, v := range r.base {
		m[k] = v
	}
	for k, v := range extra {
		m[k] = v
	}
	return marshalBody(m)
}

// post sends one lease call; wait is the server-side wait it asks for.
func (r *execRun) post(ctx context.Context, verb string, extra map[string]any, repeatable bool, wait time.Duration) (*client.Response, error) {
	b, err := r.body(extra)
	if err != nil {
		return nil, err
	}
	path := client.APIPrefix + "/lease"
	if verb != "acquire" {
		path += "/" + verb
	}
	return r.cl.Do(ctx, client.Request{Method: http.MethodPost, Path: path, Body: b, Repeatable: repeatable, Wait: wait})
}

// acquireOnce sends one acquire that waits on the server for up to wait
// while the lease is held; a signal cancels it.
func (r *execRun) acquireOnce(extra map[string]any, wait time.Duration, sigs <-chan os.Signal) (*client.Response, os.Signal, error) {
	if wait > 0 {
		extra["wait_seconds"] = int64(wait / time.Second)
	} else {
		delete(extra, "wait_seconds")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type answer struct {
		resp *client.Response
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := r.post(ctx, "acquire", extra, true, wait)
		done <- answer{resp, err}
	}()
	select {
	case a := <-done:
		return a.resp, nil, a.err
	case s := <-sigs:
		cancel()
		<-done
		return nil, s, nil
	}
}

func (r *execRun) run(argv []string) int {
	sigs, stopSigs := notifySignals()
	defer stopSigs()
	lease, code, done := r.acquire(sigs)
	if done {
		return code
	}
	var captured bytes.Buffer
	out := r.stdout
	if r.result == "stdout" {
		out = io.MultiWriter(r.stdout, &limitedBuffer{buf: &captured, max: 1 << 20})
	}
	env, cleanup, err := r.childEnv(lease)
	if err != nil {
		fmt.Fprintf(r.stderr, "holdfast exec: %v\n", err)
		r.release(lease.OwnerToken)
		return exitFailed
	}
	defer cleanup()
	ch, err := startChild(argv, env, os.Stdin, out, r.stderr)
	if err != nil {
		fmt.Fprintf(r.stderr, "holdfast exec: %v\n", err)
		r.release(lease.OwnerToken)
		return exitFailed
	}
	lost := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go r.keep(ctx, lease, lost)
	for {
		select {
		case s := <-sigs:
			ch.signal(s.(syscall.Signal))
		case why := <-lost:
			fmt.Fprintf(r.stderr, "holdfast exec: %s: stopping the command\n", why)
			ch.stop(r.grace)
			cancel()
			r.release(lease.OwnerToken)
			return exitLost
		case <-ch.done:
			cancel()
			if ch.code != 0 || r.slots > 1 {
				r.release(lease.OwnerToken)
				return ch.code
			}
			return r.complete(lease.OwnerToken, captured.Bytes())
		}
	}
}

// childEnv is CMD's environment beyond exec's own: the fencing token and
// expiry, HOLDFAST_CHECKPOINT naming a file (mode 0600, removed by
// cleanup) that holds the key's last checkpoint (empty when it has none),
// and what `holdfast lease checkpoint` needs to store a new one: the
// addresses and TLS files, the namespace, the key and the owner token.
func (r *execRun) childEnv(lease execLease) (env []string, cleanup func(), err error) {
	f, err := os.CreateTemp("", "holdfast-checkpoint-*.json")
	if err != nil {
		return nil, nil, fmt.Errorf("create the checkpoint file: %w", err)
	}
	cleanup = func() { _ = os.Remove(f.Name()) }
	if lease.Checkpoint != nil {
		_, err = f.Write(append(bytes.TrimSpace(lease.Checkpoint), '\n'))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return nil, nil, fmt.Errorf("write the checkpoint file: %w", err)
	}
	env = append([]string{
		"HOLDFAST_FENCING_TOKEN=" + strconv.FormatInt(lease.FencingToken, 10),
		"HOLDFAST_LEASE_EXPIRES_AT=" + lease.LeaseExpiresAt,
		"HOLDFAST_CHECKPOINT=" + f.Name(),
		"HOLDFAST_OWNER_TOKEN=" + lease.OwnerToken,
	}, r.conn...)
	for _, v := range [][2]string{{"namespace", "HOLDFAST_NAMESPACE"}, {"key", "HOLDFAST_KEY"}} {
		if s, ok := r.base[v[0]].(string); ok {
			env = append(env, v[1]+"="+s)
		}
	}
	return env, cleanup, nil
}

// acquire gets the lease, waiting while it is held. done says that exec
// ends here with code: the key was completed, a refusal, or the wait ended.
func (r *execRun) acquire(sigs <-chan os.Signal) (execLease, int, bool) {
	deadline := time.Now().Add(r.wait)
	extra := map[string]any{"ttl_seconds": int64(r.ttl / time.Second)}
	if r.fingerprint != "" {
		extra["fingerprint"] = r.fingerprint
	}
	if r.slots > 1 {
		extra["slots"] = r.slots
	}
	// One request id for the run: an acquire whose answer was lost is
	// answered its grant again, so it is safe to repeat.
	rid, err := secret.NewRequestID()
	if err != nil {
		fmt.Fprintf(r.stderr, "holdfast exec: %v\n", err)
		return execLease{}, exitFailed, true
	}
	extra["request_id"] = rid
	for {
		// The server holds the acquire while the lease is held (a blocking
		// acquire, first come first served), for what --wait leaves.
		wait := max(min(time.Until(deadline).Truncate(time.Second), maxAcquireWait), 0)
		resp, sig, err := r.acquireOnce(extra, wait, sigs)
		if sig != nil {
			fmt.Fprintf(r.stderr, "holdfast exec: %v while waiting for the lease\n", sig)
			return execLease{}, 128 + int(sig.(syscall.Signal)), true
		}
		if err != nil {
			return execLease{}, errExit(r.stderr, "exec", err), true
		}
		switch {
		case resp.Status == http.StatusCreated:
			var l execLease
			if json.Unmarshal(resp.Body, &l) != nil || l.OwnerToken == "" {
				fmt.Fprintln(r.stderr, "holdfast exec: the grant has no owner token")
				return execLease{}, exitFailed, true
			}
			return l, 0, false
		case resp.Status == http.StatusOK:
			// Completed with this fingerprint: the stored result, no run.
			v, _ := lookupField(resp.Body, "result")
			fmt.Fprintln(r.stdout, v)
			fmt.Fprintln(r.stderr, "holdfast exec: did not run the command: this key was already completed (with this fingerprint); printed the stored result")
			return execLease{}, exitOK, true
		case exitFor(resp) != exitLater:
			return execLease{}, printAnswer(io.Discard, r.stderr, "exec", "", false, resp), true
		}
		// Held after the server's wait, rate limited or no leader: ask
		// again while --wait allows; after a refusal, once its Retry-After
		// has passed.
		left := time.Until(deadline)
		if left <= 0 {
			return execLease{}, printAnswer(io.Discard, r.stderr, "exec", "", false, resp), true
		}
		if wait > 0 && resp.Status == http.StatusConflict {
			continue
		}
		pause := min(max(resp.RetryAfter(), 200*time.Millisecond), left)
		t := time.NewTimer(pause)
		select {
		case s := <-sigs:
			t.Stop()
			fmt.Fprintf(r.stderr, "holdfast exec: %v while waiting for the lease\n", s)
			return execLease{}, 128 + int(s.(syscall.Signal)), true
		case <-t.C:
		}
	}
}

// keep renews the lease until ctx ends, reporting on lost when it is lost.
func (r *execRun) keep(ctx context.Context, lease execLease, lost chan<- string) {
	extra := map[string]any{"owner_token": lease.OwnerToken, "ttl_seconds": int64(r.ttl / time.Second)}
	first := min(r.ttl, time.Duration(lease.TTLSeconds)*time.Second)
	why := keepAlive(ctx, r.ttl, first, func(ctx context.Context) renewal {
		resp, err := r.post(ctx, "renew", extra, false, 0)
		switch {
		case err != nil:
			return renewal{}
		case resp.OK():
			var l execLease
			_ = json.Unmarshal(resp.Body, &l)
			return renewal{ok: true, ttl: min(r.ttl, time.Duration(l.TTLSeconds)*time.Second)}
		}
		return renewal{lost: exitFor(resp) == exitLost}
	})
	if why != "" {
		lost <- "the lease " + why
	}
}

// release gives the lease up, best effort: it ends by its TTL otherwise.
func (r *execRun) release(owner string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := r.post(ctx, "release", map[string]any{"owner_token": owner}, false, 0)
	if err != nil || !resp.OK() {
		fmt.Fprintln(r.stderr, "holdfast exec: the lease was not released; it ends with its TTL")
	}
}

// complete stores the run's result.
func (r *execRun) complete(owner string, stdout []byte) int {
	result := json.RawMessage(`{"exit_code":0}`)
	if r.result == "stdout" {
		if out := bytes.TrimSpace(stdout); json.Valid(out) {
			result = out
		} else {
			fmt.Fprintln(r.stderr, `holdfast exec: the command's stdout is not one JSON value: storing {"exit_code":0}`)
		}
	}
	resp, err := r.post(context.Background(), "complete", map[string]any{"owner_token": owner, "result": result}, false, 0)
	if err == nil && resp.Status == http.StatusRequestEntityTooLarge && r.result == "stdout" {
		fmt.Fprintln(r.stderr, `holdfast exec: the command's stdout is over the result limit: storing {"exit_code":0}`)
		resp, err = r.post(context.Background(), "complete", map[string]any{"owner_token": owner, "result": json.RawMessage(`{"exit_code":0}`)}, false, 0)
	}
	if err != nil {
		return errExit(r.stderr, "exec", err)
	}
	if !resp.OK() {
		fmt.Fprintln(r.stderr, "holdfast exec: the command succeeded but its result was not stored")
		return printAnswer(io.Discard, r.stderr, "exec", "", false, resp)
	}
	return exitOK
}

// limitedBuffer keeps the first max bytes written to it and accepts the rest.
type limitedBuffer struct {
	buf *bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
