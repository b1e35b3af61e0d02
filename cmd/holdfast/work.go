package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/internal/secret"
)

const workUsage = `Usage: holdfast work --queue QUEUE_ID [flags] -- CMD [ARGS...]

Claims jobs (the worker token comes from --token or HOLDFAST_WORKER_TOKEN) and runs CMD once
per job: the payload on its stdin, HOLDFAST_JOB_ID, HOLDFAST_JOB_KEY, HOLDFAST_ATTEMPT and
HOLDFAST_QUEUE_ID in its environment. The claim is renewed every third of its visibility
window while CMD runs; exit 0 acks the job, any other status releases it for another attempt
after a delay that doubles with each attempt (--retry-delay, 5s by default: 5s, 10s, 20s, ...,
at most 15 minutes and never past the queue's deadline; 0 releases at once).
If the claim is lost, CMD gets SIGTERM (SIGKILL after --grace) and the job is left to be
delivered again. Each claim waits on the server up to --wait seconds for a job (a long poll);
with --wait 0 an empty queue is polled with a growing pause up to --idle-max.
SIGTERM or SIGINT stops claiming and lets running jobs finish for up to --grace (a second
signal: at once); jobs still running then are stopped and released.

Flags:
`

// workRun is one run of holdfast work.
type workRun struct {
	cl         *client.Client
	queue      string
	token      string
	visibility int
	waitSecs   int
	maxJobs    int64
	grace      time.Duration
	idleMax    time.Duration
	retryDelay time.Duration
	argv       []string
	stdout     io.Writer
	stderr     io.Writer

	started  atomic.Int64    // claims made, for --max-jobs
	stopping chan struct{}   // closed: claim no more
	claims   context.Context // ends when stopping closes: a waiting claim stops
	noClaims context.CancelFunc
	stopOnce sync.Once
	hard     chan struct{} // closed: stop running jobs now
	hardOnce sync.Once
	fatal    atomic.Bool
	logMu    sync.Mutex
}

// claimed is a job as a claim answers it.
type claimed struct {
	JobID    string          `json:"job_id"`
	JobKey   string          `json:"job_key"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	Receipt  string          `json:"receipt"`
}

func workCommand(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("work", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, workUsage)
		fs.PrintDefaults()
	}
	o := addConnFlags(fs)
	w := &workRun{stdout: stdout, stderr: stderr, stopping: make(chan struct{}), hard: make(chan struct{})}
	fs.StringVar(&w.queue, "queue", envOr("HOLDFAST_QUEUE", ""), "queue id (HOLDFAST_QUEUE)")
	token := secretFlag(fs, "token", workerRole.env(), "the queue's worker token")
	conc := fs.Int("concurrency", 1, "jobs run at the same time")
	secondsVar(fs, &w.visibility, "visibility", 60, "visibility_timeout of each claim")
	secondsVar(fs, &w.waitSecs, "wait", 20, "wait_seconds of each claim: how long it waits on the server for a job, 0 to 20")
	fs.Int64Var(&w.maxJobs, "max-jobs", 0, "exit after this many jobs (0: run until a signal)")
	durationVar(fs, &w.grace, "grace", 30*time.Second, "on SIGTERM, how long running jobs may finish")
	durationVar(fs, &w.idleMax, "idle-max", 5*time.Second, "longest pause between claims while the queue is empty")
	durationVar(fs, &w.retryDelay, "retry-delay", 5*time.Second, "a failed attempt's job is claimable again after this long, doubled for each attempt after the first (0: at once)")
	quietUsage(fs, args)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	w.argv = fs.Args()
	var err error
	switch {
	case len(w.argv) == 0:
		err = errors.New("no command given (put it after --)")
	case w.queue == "":
		err = errors.New("--queue (or HOLDFAST_QUEUE) is required")
	case *conc < 1 || *conc > 256:
		err = errors.New("--concurrency must be 1 to 256")
	case w.maxJobs < 0 || w.idleMax < 100*time.Millisecond:
		err = errors.New("--max-jobs must be 0 or more and --idle-max at least 100ms")
	case w.waitSecs < 0 || w.waitSecs > 20:
		err = errors.New("--wait must be 0 to 20 seconds")
	case w.retryDelay%time.Second != 0:
		err = errors.New("--retry-delay must be whole seconds")
	}
	if err == nil {
		w.token, err = token.need("token")
	}
	if err == nil {
		w.cl, err = o.client()
	}
	if err != nil {
		return usageError(stderr, "work", err)
	}
	defer w.cl.CloseIdle()
	w.claims, w.noClaims = context.WithCancel(context.Background())
	defer w.noClaims()
	return w.run(*conc)
}

func (w *workRun) run(conc int) int {
	sigs, stopSigs := notifySignals()
	defer stopSigs()
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop()
		}()
	}
	finished := make(chan struct{})
	go func() {
		wg.Wait()
		close(finished)
	}()
	var graceEnd <-chan time.Time
	for {
		select {
		case <-finished:
			if w.fatal.Load() {
				return exitFailed
			}
			return exitOK
		case s := <-sigs:
			select {
			case <-w.stopping:
				w.logf("%v again: stopping running jobs now", s)
				w.hardOnce.Do(func() { close(w.hard) })
			default:
				w.logf("%v: no more claims; running jobs may finish within %v", s, w.grace)
				w.stop()
				graceEnd = time.After(w.grace)
			}
		case <-graceEnd:
			w.logf("grace period over: stopping running jobs")
			w.hardOnce.Do(func() { close(w.hard) })
		}
	}
}

func (w *workRun) stop() {
	w.stopOnce.Do(func() {
		close(w.stopping)
		w.noClaims()
	})
}

func (w *workRun) logf(format string, args ...any) {
	w.logMu.Lock()
	defer w.logMu.Unlock()
	fmt.Fprintf(w.stderr, "holdfast work: "+format+"\n", args...)
}

func (w *workRun) path(rest string) string {
	return client.APIPrefix + "/queue/" + url.PathEscape(w.queue) + rest
}

// loop claims and runs jobs until told to stop.
func (w *workRun) loop() {
	const minPause = 100 * time.Millisecond
	pause := minPause
	for {
		select {
		case <-w.stopping:
			return
		default:
		}
		if w.maxJobs > 0 && w.started.Add(1) > w.maxJobs {
			w.stop()
			return
		}
		job, retry, waited := w.claim()
		if job == nil {
			if w.maxJobs > 0 {
				w.started.Add(-1)
			}
			if !retry {
				w.fatal.Store(true)
				w.stop()
				return
			}
			if waited {
				pause = minPause
				continue // the server waited for a job: ask again at once
			}
			// An empty queue or a failed claim: wait, longer each time, with
			// jitter so that many workers do not poll in step.
			wait := pause/2 + rand.N(pause/2+1)
			pause = min(pause*2, w.idleMax)
			t := time.NewTimer(wait)
			select {
			case <-w.stopping:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		pause = minPause
		w.handle(job)
	}
}

// claim asks for a job: nil with retry when there is none now or the call
// failed for a while, nil without retry when it can never succeed; waited
// says the server held the claim for its wait before answering job: null.
func (w *workRun) claim() (job *claimed, retry, waited bool) {
	// A request id of its own makes the claim safe to repeat: a claim whose
	// answer was lost is answered again instead of hiding its job.
	rid, err := secret.NewRequestID()
	if err != nil {
		w.logf("claim: %v", err)
		return nil, true, false
	}
	wait := time.Duration(w.waitSecs) * time.Second
	resp, err := w.cl.Do(w.claims, client.Request{
		Method: http.MethodPost, Path: w.path("/claim"), Token: w.token, Body: claimBody(w.visibility, rid, w.waitSecs),
		Repeatable: true, Wait: wait,
	})
	if err != nil {
		if w.claims.Err() == nil {
			w.logf("claim: %v", err)
		}
		return nil, true, false
	}
	if !resp.OK() {
		w.logf("claim: HTTP %d: %s", resp.Status, resp.ErrorMessage())
		return nil, exitFor(resp) == exitLater, false
	}
	var a struct {
		Job *claimed `json:"job"`
	}
	if json.Unmarshal(resp.Body, &a) != nil {
		w.logf("claim: an answer that is not a claim")
		return nil, true, false
	}
	if a.Job != nil && (a.Job.JobID == "" || a.Job.Receipt == "") {
		w.logf("claim: a job without an id or receipt")
		return nil, true, false
	}
	return a.Job, true, wait > 0
}

// handle runs the command for one job and settles it.
func (w *workRun) handle(job *claimed) {
	payload := job.Payload
	if payload == nil {
		payload = json.RawMessage("null")
	}
	ch, err := startChild(w.argv, []string{
		"HOLDFAST_JOB_ID=" + job.JobID,
		"HOLDFAST_JOB_KEY=" + job.JobKey,
		"HOLDFAST_ATTEMPT=" + strconv.Itoa(job.Attempts),
		"HOLDFAST_QUEUE_ID=" + w.queue,
	}, bytes.NewReader(payload), w.stdout, w.stderr)
	if err != nil {
		w.logf("job %s: %v", job.JobID, err)
		w.settle(job, "release", "could not start", w.backoff(job.Attempts))
		return
	}
	lost := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	vis := time.Duration(w.visibility) * time.Second
	go func() {
		b, _ := marshalBody(map[string]any{"receipt": job.Receipt, "visibility_timeout": w.visibility})
		why := keepAlive(ctx, vis, vis, func(ctx context.Context) renewal {
			resp, err := w.cl.Do(ctx, client.Request{Method: http.MethodPost, Path: w.path("/jobs/" + url.PathEscape(job.JobID) + "/renew"), Token: w.token, Body: b})
			if err != nil {
				return renewal{}
			}
			return renewal{ok: resp.OK(), lost: exitFor(resp) == exitLost, ttl: vis}
		})
		if why != "" {
			lost <- why
		}
	}()
	select {
	case <-ch.done:
	case why := <-lost:
		w.logf("job %s: the claim %s: stopping the command; the job will be delivered again", job.JobID, why)
		ch.stop(w.grace)
		return
	case <-w.hard:
		ch.stop(5 * time.Second)
		w.settle(job, "release", "stopped by the shutdown", 0)
		return
	}
	cancel()
	if ch.code == 0 {
		w.settle(job, "ack", "exit 0", 0)
		return
	}
	w.settle(job, "release", "exit "+strconv.Itoa(ch.code), w.backoff(job.Attempts))
}

// maxRetryDelay is the longest delay_seconds a release may ask for.
const maxRetryDelay = 900 * time.Second

// backoff is the delay before the next attempt of a job whose attempt
// (counted from 1) failed: --retry-delay, doubled for each attempt after
// the first, at most maxRetryDelay (the server also keeps it within the
// queue's deadline).
func (w *workRun) backoff(attempt int) time.Duration {
	d := w.retryDelay
	for i := 1; i < attempt && d < maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, maxRetryDelay)
}

// releasedAsFailed says whether a release answer shows the job failed: it
// had no attempts left.
func releasedAsFailed(body []byte) bool {
	status, _ := lookupField(body, "job.status")
	return status == "failed"
}

// settle acks or releases (after delay) a job and logs the outcome.
func (w *workRun) settle(job *claimed, action, why string, delay time.Duration) {
	body := map[string]any{"receipt": job.Receipt}
	if delay > 0 {
		body["delay_seconds"] = int64(delay / time.Second)
	}
	b, _ := marshalBody(body)
	resp, err := w.cl.Do(context.Background(), client.Request{
		Method: http.MethodPost, Path: w.path("/jobs/" + url.PathEscape(job.JobID) + "/" + action),
		Token: w.token, Body: b, Repeatable: action == "ack",
	})
	switch {
	case err != nil:
		w.logf("job %s (key %s, attempt %d): %s, %s failed: %v", job.JobID, job.JobKey, job.Attempts, why, action, err)
	case !resp.OK():
		w.logf("job %s (key %s, attempt %d): %s, %s refused: HTTP %d: %s", job.JobID, job.JobKey, job.Attempts, why, action, resp.Status, resp.ErrorMessage())
	default:
		past := map[string]string{"ack": "acked", "release": "released"}[action]
		switch {
		case action == "release" && releasedAsFailed(resp.Body):
			past += " and failed: it has no attempts left (holdfast queue retry moves it back)"
		case delay > 0:
			past += fmt.Sprintf(" (claimable again in %v)", delay)
		}
		w.logf("job %s (key %s, attempt %d): %s, %s", job.JobID, job.JobKey, job.Attempts, why, past)
	}
}
