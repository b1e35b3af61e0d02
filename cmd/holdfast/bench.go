package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/internal/client"
)

// benchResult is what one load run measured.
type benchResult struct {
	workload  string
	clients   int
	cycles    int
	errors    int
	elapsed   time.Duration
	latencies []time.Duration
	log       []cycleRecord // every successful cycle, for --latency-log
}

// cycleRecord is one successful cycle: which client ran it, when its
// measured request started (since the run began) and how long it took.
type cycleRecord struct {
	client int
	start  time.Duration
	took   time.Duration
}

// writeLog writes every successful cycle to path as CSV lines of client,
// start and latency (microseconds), in order of start.
func (r benchResult) writeLog(path string) error {
	recs := slices.Clone(r.log)
	slices.SortFunc(recs, func(a, b cycleRecord) int { return cmp.Compare(a.start, b.start) })
	var b []byte
	for _, c := range recs {
		b = fmt.Appendf(b, "%d,%d,%d\n", c.client, c.start.Microseconds(), c.took.Microseconds())
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write the latency log: %w", err)
	}
	return nil
}

func (r benchResult) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(p * float64(len(r.latencies)-1))
	return r.latencies[i]
}

func (r benchResult) String() string {
	rate := float64(r.cycles) / r.elapsed.Seconds()
	s := fmt.Sprintf("workload=%s clients=%d cycles=%d errors=%d elapsed=%.1fs cycles_per_sec=%.0f p50=%s p90=%s p99=%s max=%s",
		r.workload, r.clients, r.cycles, r.errors, r.elapsed.Seconds(), rate,
		r.percentile(.5).Round(10*time.Microsecond), r.percentile(.9).Round(10*time.Microsecond),
		r.percentile(.99).Round(10*time.Microsecond), r.percentile(1).Round(10*time.Microsecond))
	switch r.workload {
	case "hot-key":
		s += fmt.Sprintf(" handovers_per_sec=%.0f", rate) // each cycle is one hand-over
	case "claim-wake":
		s += " latency=enqueue_answer_to_waiting_claim_answer"
	}
	return s
}

func bench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("holdfast bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, benchUsage)
		fs.PrintDefaults()
	}
	o := addConnFlags(fs)
	workload := fs.String("workload", "lease", "lease (acquire+release cycles), queue (enqueue+claim+ack cycles), enqueue (enqueues of 256-byte jobs: the latency is the enqueue's, not the queue creation's every 100), lease-fill (acquires of new keys held for a day, or completed with a result with --result-bytes: fills the state), "+
		"hot-key (every client on one key with blocking acquires: hand-overs per second) or claim-wake (per client a waiting claim and an enqueue: the delay from the enqueue's answer to the claim's)")
	clients := fs.Int("clients", 64, "concurrent clients")
	duration := fs.Duration("duration", 10*time.Second, "how long to run at most")
	count := fs.Int("count", 0, "stop after this many successful cycles in all (0: run for the whole duration)")
	resultBytes := fs.Int("result-bytes", 0, "lease-fill: complete each lease with a JSON result of this many bytes (0: keep it held)")
	payloadBytes := fs.Int("payload-bytes", enqueueBytes, "enqueue: the JSON bytes of each job's payload")
	latencyLog := fs.String("latency-log", "", "also write every successful cycle to this file as CSV: client, start (µs since the run began), latency (µs); test/perf/dips.py reads it")
	profileDir := fs.String("cpu-profile-dir", "", "also write a CPU profile of every node, taken over the middle third of the run, to DIR/<address>.pprof (needs the cluster key in HOLDFAST_CLUSTER_KEY, or loopback)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *clients < 1 || *duration <= 0 || *count < 0 {
		fmt.Fprintln(stderr, "bench: need at least one client, a positive duration and a count of at least 0")
		return 2
	}
	sizes := benchSizes{result: *resultBytes, payload: *payloadBytes}
	if err := sizes.check(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	o.maxConns = *clients * 2
	cl, err := o.client()
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	defer cl.CloseIdle()
	hc, nodes := cl.HTTP(), cl.Addrs()
	before, err := proposalCounts(hc, nodes)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	profiles := startProfiles(hc, nodes, *profileDir, *duration)
	res, err := runBench(cl, *workload, *clients, *duration, *count, sizes)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if *latencyLog != "" {
		if err := res.writeLog(*latencyLog); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
	}
	if err := profiles(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	after, err := proposalCounts(hc, nodes)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s proposals:%s\n", res, after.minus(before))
	return 0
}

// runBench runs one workload with a fixed number of closed-loop clients.
// At the end of d, or once count cycles succeeded (count > 0), no client
// starts another cycle, but every request already sent is let finish: the
// load tool never abandons a request, so the service's count of proposals
// given up mid-flight means what it says.
func runBench(cl *client.Client, workload string, clients int, d time.Duration, count int, sizes benchSizes) (benchResult, error) {
	var cycle func(ctx context.Context, c *client.Client, w *benchWorker) error
	switch workload {
	case "lease":
		cycle = leaseCycle
	case "lease-fill":
		cycle = leaseFill
	case "queue":
		cycle = queueCycle
	case "enqueue":
		cycle = enqueueOnly
	case "hot-key":
		hot, err := newHotKey(cl)
		if err != nil {
			return benchResult{}, err
		}
		cycle = hot.cycle
	case "claim-wake":
		cycle = claimWake
	default:
		return benchResult{}, fmt.Errorf("unknown workload %q", workload)
	}
	var (
		mu   sync.Mutex
		res  = benchResult{workload: workload, clients: clients}
		wg   sync.WaitGroup
		left atomic.Int64 // cycles still to start when count > 0
	)
	left.Store(int64(count))
	more := func() bool { return count == 0 || left.Add(-1) >= 0 }
	start := time.Now()
	end := start.Add(d)
	for i := 0; i < clients; i++ {
		c := cl.Rotate(i) // clients spread over the nodes
		w := &benchWorker{id: i, sizes: sizes}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var log []cycleRecord
			errs := 0
			for time.Now().Before(end) && more() {
				t := time.Now()
				w.sample, w.sampleAt = -1, time.Time{}
				if err := cycle(context.Background(), c, w); err != nil {
					errs++
					left.Add(1) // a failed cycle does not count towards count
					continue
				}
				took, at := time.Since(t), t
				if w.sample >= 0 {
					took = w.sample // what the workload measures itself
					if !w.sampleAt.IsZero() {
						at = w.sampleAt
					}
				}
				lat = append(lat, took)
				log = append(log, cycleRecord{client: w.id, start: at.Sub(start), took: took})
			}
			mu.Lock()
			res.latencies = append(res.latencies, lat...)
			res.log = append(res.log, log...)
			res.errors += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.cycles = len(res.latencies)
	slices.Sort(res.latencies)
	if res.cycles == 0 {
		return res, errors.New("no cycle completed")
	}
	return res, nil
}

// benchWorker is one client's state across cycles.
type benchWorker struct {
	id    int
	sizes benchSizes
	n     int
	ns    string
	queue *queueCreated
	used  int
	// sample, when a cycle sets it (>= 0), is the latency it measured,
	// recorded instead of the cycle's duration; sampleAt, when set, is
	// when that measured request started.
	sample   time.Duration
	sampleAt time.Time
}

// namespace gives the worker its lease namespace, created on first use.
func (w *benchWorker) namespace(ctx context.Context, c *client.Client) error {
	if w.ns != "" {
		return nil
	}
	var ans struct {
		Namespace string `json:"namespace"`
	}
	if err := callJSON(ctx, c, http.MethodPost, "/lease/namespace", "", map[string]any{}, &ans); err != nil {
		return err
	}
	w.ns = ans.Namespace
	return nil
}

func leaseCycle(ctx context.Context, c *client.Client, w *benchWorker) error {
	if err := w.namespace(ctx, c); err != nil {
		return err
	}
	w.n++
	key := fmt.Sprintf("bench:%d:%d", w.id, w.n%50)
	var held struct {
		OwnerToken string `json:"owner_token"`
	}
	if err := callJSON(ctx, c, http.MethodPost, "/lease", "", map[string]any{"namespace": w.ns, "key": key, "ttl_seconds": 30}, &held); err != nil {
		return err
	}
	err := callJSON(ctx, c, http.MethodPost, "/lease/release", "", map[string]any{"namespace": w.ns, "key": key, "owner_token": held.OwnerToken}, nil)
	return err
}

// leaseFill acquires a key no cycle used before and keeps it for a day
// (the longest ttl by default), so every cycle adds one held lease.
func leaseFill(ctx context.Context, c *client.Client, w *benchWorker) error {
	if err := w.namespace(ctx, c); err != nil {
		return err
	}
	w.n++
	key := fmt.Sprintf("fill:%d:%d", w.id, w.n)
	var held struct {
		OwnerToken string `json:"owner_token"`
	}
	if err := callJSON(ctx, c, http.MethodPost, "/lease", "", map[string]any{"namespace": w.ns, "key": key, "ttl_seconds": 86400}, &held); err != nil || w.sizes.result == 0 {
		return err
	}
	return callJSON(ctx, c, http.MethodPost, "/lease/complete", "", map[string]any{"namespace": w.ns, "key": key, "owner_token": held.OwnerToken,
		"result": strings.Repeat("r", w.sizes.result-len(`""`))}, nil)
}

// nextJob returns the worker's queue for its next job, creating a queue
// per 100 jobs (the job limit), and counts the job.
func (w *benchWorker) nextJob(ctx context.Context, c *client.Client) (*queueCreated, error) {
	if w.queue == nil || w.used >= 100 {
		var q queueCreated
		if err := callJSON(ctx, c, http.MethodPost, "/queue", "", map[string]any{}, &q); err != nil {
			return nil, err
		}
		w.queue, w.used = &q, 0
	}
	w.used++
	w.n++
	return w.queue, nil
}

func queueCycle(ctx context.Context, c *client.Client, w *benchWorker) error {
	q, err := w.nextJob(ctx, c)
	if err != nil {
		return err
	}
	if err := callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/jobs", q.WriteToken,
		map[string]any{"job_key": fmt.Sprintf("job-%d", w.n), "payload": map[string]int{"n": w.n}}, nil); err != nil {
		return err
	}
	var ans jobAnswer
	if err := callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/claim", q.WorkerToken, map[string]int{"visibility_timeout": 60}, &ans); err != nil {
		return err
	}
	if ans.Job == nil {
		return errors.New("claim found no job")
	}
	return callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/jobs/"+ans.Job.JobID+"/ack", q.WorkerToken, map[string]string{"receipt": ans.Job.Receipt}, nil)
}

// enqueueBytes is the JSON size of an enqueue's payload by default, the
// job size of ../shared/bench's queue load.
const enqueueBytes = 256

// padFrame is an enqueue payload without its padding, at its longest
// counter: the padding makes the payload about the size asked for.
const padFrame = `{"n":1234567,"pad":""}`

// benchSizes are the sizes of what the fill workloads store.
type benchSizes struct {
	result  int // JSON bytes of lease-fill's results; 0 leaves leases held
	payload int // JSON bytes of enqueue's payloads
}

func (s benchSizes) check() error {
	if s.result != 0 && (s.result < len(`""`) || s.result > 32*1024) {
		return fmt.Errorf("--result-bytes is 0 or 2 to 32768, not %d", s.result)
	}
	if s.payload < len(padFrame) || s.payload > 16*1024 {
		return fmt.Errorf("--payload-bytes is %d to 16384, not %d", len(padFrame), s.payload)
	}
	return nil
}

// enqueueOnly enqueues one job; its latency is the enqueue's alone, not the
// queue creation that every hundredth cycle starts with.
func enqueueOnly(ctx context.Context, c *client.Client, w *benchWorker) error {
	q, err := w.nextJob(ctx, c)
	if err != nil {
		return err
	}
	w.sampleAt = time.Now()
	err = callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/jobs", q.WriteToken,
		map[string]any{"job_key": fmt.Sprintf("job-%d", w.n), "payload": map[string]any{"n": w.n, "pad": strings.Repeat("x", w.sizes.payload-len(padFrame))}}, nil)
	w.sample = time.Since(w.sampleAt)
	return err
}

// benchUsage documents the settings a queue run needs.
const benchUsage = `holdfast bench: closed-loop load against a cluster, reporting cycles per second and latency percentiles.

The queue workload creates a queue per 100 jobs: raise queues_per_client first, e.g.
  curl -X PUT -H 'Content-Type: application/json' -d '{"queues_per_client":1000000}' http://NODE/cluster/settings
and start the nodes with --rate-limit 0 (or a limit above the load).

Flags:
`
