package main

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/statestore"
	"github.com/holdfast/holdfast/test/scale/measure"
)

type config struct {
	dir                  string
	leases, jobs         int
	resultBytes, payload int
	batch, jobsPerQueue  int
	lookups              int
}

func main() {
	var c config
	flag.StringVar(&c.dir, "dir", "", "data directory (default: a new temporary one, removed at the end)")
	flag.IntVar(&c.leases, "leases", 1_000_000, "completed leases to apply")
	flag.IntVar(&c.jobs, "jobs", 200_000, "jobs to enqueue")
	flag.IntVar(&c.resultBytes, "result", 512, "encoded JSON bytes of each lease's result")
	flag.IntVar(&c.payload, "payload", 1024, "encoded JSON bytes of each job's payload")
	flag.IntVar(&c.batch, "batch", 64, "log entries per apply batch")
	flag.IntVar(&c.jobsPerQueue, "jobs-per-queue", 1000, "jobs of each queue")
	flag.IntVar(&c.lookups, "lookups", 200_000, "acquires of done keys after the reopen")
	flag.Parse()
	if err := run(c); err != nil {
		fmt.Fprintln(os.Stderr, "statefill:", err)
		os.Exit(1)
	}
}

// node is a state machine on its store, with the key filter loop a node
// runs beside it.
type node struct {
	st    *statestore.Store
	f     *fsm.FSM
	stop  chan struct{}
	done  chan struct{}
	index uint64
	now   int64
	logs  []*raft.Log
	cmds  int
	fails int
}

func open(dir string) (*node, error) {
	st, err := statestore.Open(dir, statestore.Options{})
	if err != nil {
		return nil, err
	}
	f, err := fsm.Open(cluster.StateStore(st))
	if err != nil {
		_ = st.Close()
		return nil, err
	}
	n := &node{st: st, f: f, stop: make(chan struct{}), done: make(chan struct{}), index: st.Applied(), now: 1788602400000}
	go n.filterLoop()
	return n, nil
}

// filterLoop builds the key filter whenever the state machine wants one.
func (n *node) filterLoop() {
	defer close(n.done)
	stopped := func() bool {
		select {
		case <-n.stop:
			return true
		default:
			return false
		}
	}
	for !stopped() {
		if n.f.KeyFilterWanted() {
			if err := n.f.BuildKeyFilter(stopped); err != nil && !errors.Is(err, fsm.ErrBuildStopped) {
				fmt.Fprintln(os.Stderr, "statefill: key filter:", err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (n *node) close() error {
	close(n.stop)
	<-n.done
	return n.st.Close()
}

// add queues a command; every batch entries, they are applied.
func (n *node) add(c fsm.Command, batch int, ok func(any) bool) {
	n.index++
	n.logs = append(n.logs, &raft.Log{Index: n.index, Term: 1, Type: raft.LogCommand, Data: fsm.Encode(c)})
	n.cmds++
	if len(n.logs) >= batch {
		n.flush(ok)
	}
}

func (n *node) flush(ok func(any) bool) {
	if len(n.logs) == 0 {
		return
	}
	for _, r := range n.f.ApplyBatch(n.logs) {
		if !ok(r) {
			n.fails++
		}
	}
	n.logs = n.logs[:0]
	n.now++
}

// progress prints the fill's rate and memory every few seconds.
type progress struct {
	start, last time.Time
	peak        int64
}

func (p *progress) tick(what string, done, of int, force bool) {
	if !force && time.Since(p.last) < 5*time.Second {
		return
	}
	p.last = time.Now()
	rss := measure.Memory("VmRSS")
	p.peak = max(p.peak, rss)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("%s %d/%d  %.0f/s  rss %d MiB (peak %d)  heap %d MiB\n", what, done, of,
		float64(done)/time.Since(p.start).Seconds(), rss>>20, p.peak>>20, ms.HeapInuse>>20)
}

func hashOf(kind string, i int) (h secret.Hash) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	return sha256.Sum256(append([]byte(kind), b[:]...))
}

func idOf(kind string, i int) (id secret.ID) {
	h := hashOf(kind, i)
	copy(id[:], h[:])
	return id
}

func jsonString(n int) []byte {
	return []byte(`"` + strings.Repeat("x", max(n-2, 0)) + `"`)
}

func run(c config) error {
	dir := c.dir
	if dir == "" {
		d, err := os.MkdirTemp("", "statefill-")
		if err != nil {
			return fmt.Errorf("temporary directory: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	dir = filepath.Join(dir, "state")
	n, err := open(dir)
	if err != nil {
		return err
	}
	queues := (c.jobs + c.jobsPerQueue - 1) / c.jobsPerQueue
	big := func(v int) *int64 { x := int64(v); return &x }
	n.add(&fsm.SetSettings{Now: n.now, Patch: fsm.SettingsPatch{
		MaxLeases: big(c.leases + 1_000_000), MaxQueues: big(queues + 1000), QueuesPerClient: big(queues + 1000),
		QueueMaxJobs: big(c.jobsPerQueue), MaxResultBytes: big(max(c.resultBytes, 1024)), MaxPayloadBytes: big(max(c.payload, 1024)),
	}}, 1, func(any) bool { return true })

	result, payload := jsonString(c.resultBytes), jsonString(c.payload)
	owner, fp := hashOf("owner", 0), hashOf("fingerprint", 0)
	leaseOK := func(r any) bool {
		l, ok := r.(*fsm.LeaseResult)
		return ok && (l.Outcome == fsm.LeaseGranted || l.Outcome == fsm.LeaseCompleted)
	}
	p := &progress{start: time.Now(), last: time.Now()}
	for i := range c.leases {
		k := hashOf("lease", i)
		n.add(&fsm.LeaseAcquire{Now: n.now, Lease: k, Fingerprint: fp, Owner: owner, TTLSeconds: 600}, c.batch, leaseOK)
		n.add(&fsm.LeaseComplete{Now: n.now, Lease: k, Owner: owner, Result: result}, c.batch, leaseOK)
		p.tick("leases", i+1, c.leases, false)
	}
	n.flush(leaseOK)
	p.tick("leases", c.leases, c.leases, true)
	leaseTime := time.Since(p.start)

	queueOK := func(r any) bool {
		q, ok := r.(*fsm.QueueResult)
		return ok && (q.Outcome == fsm.QueueCreated || q.Outcome == fsm.JobCreated)
	}
	p.start = time.Now()
	tok := hashOf("token", 0)
	for i := range c.jobs {
		q := idOf("queue", i/c.jobsPerQueue)
		if i%c.jobsPerQueue == 0 {
			n.add(&fsm.QueueCreate{Now: n.now, Queue: q, WriteToken: tok, WorkerToken: tok, ReadToken: tok, Client: hashOf("client", i/c.jobsPerQueue%100)}, c.batch, queueOK)
		}
		n.add(&fsm.JobEnqueue{Now: n.now, Queue: q, Token: tok, Job: idOf("job", i), Key: fmt.Sprint("job-", i), Payload: payload}, c.batch, queueOK)
		p.tick("jobs", i+1, c.jobs, false)
	}
	n.flush(queueOK)
	p.tick("jobs", c.jobs, c.jobs, true)
	jobTime := time.Since(p.start)
	if n.fails > 0 {
		return fmt.Errorf("%d of %d commands were refused", n.fails, n.cmds)
	}
	fmt.Printf("fill: %d leases in %.1f s (%.0f/s), %d jobs in %.1f s (%.0f/s); peak rss %d MiB\n",
		c.leases, leaseTime.Seconds(), float64(c.leases)/leaseTime.Seconds(),
		c.jobs, jobTime.Seconds(), float64(c.jobs)/jobTime.Seconds(), measure.Memory("VmHWM")>>20)

	start := time.Now()
	if err := n.close(); err != nil {
		return err
	}
	fmt.Printf("close (flush): %.2f s\n", time.Since(start).Seconds())
	disk, err := measure.DiskBytes(dir, map[uint64]bool{})
	if err != nil {
		return err
	}
	// Raw: each lease's key and result, each job's id, key and payload.
	raw := int64(c.leases)*int64(32+len(result)) + int64(c.jobs)*int64(16+len("job-0000000")+len(payload))
	fmt.Printf("disk: %d MiB for %d MiB of raw record bytes (%.2fx)\n", disk>>20, raw>>20, float64(disk)/float64(raw))

	start = time.Now()
	n, err = open(dir)
	if err != nil {
		return err
	}
	opened := time.Since(start)
	for !n.f.KeyFilterBuilt() {
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("reopen: state open in %.2f s, key filter built %.2f s after the start; rss %d MiB\n",
		opened.Seconds(), time.Since(start).Seconds(), measure.Memory("VmRSS")>>20)

	p.start = time.Now()
	done := func(r any) bool { l, ok := r.(*fsm.LeaseResult); return ok && l.Outcome == fsm.LeaseCompleted }
	for i := range c.lookups {
		k := hashOf("lease", int(uint64(i)*2654435761%uint64(max(c.leases, 1))))
		n.add(&fsm.LeaseAcquire{Now: n.now, Lease: k, Fingerprint: fp, Owner: hashOf("owner", 1), TTLSeconds: 600}, c.batch, done)
	}
	n.flush(done)
	el := time.Since(p.start)
	fmt.Printf("acquires of done keys: %d in %.1f s (%.0f/s), %d not answered with the result; rss %d MiB, peak %d MiB\n",
		c.lookups, el.Seconds(), float64(c.lookups)/el.Seconds(), n.fails, measure.Memory("VmRSS")>>20, measure.Memory("VmHWM")>>20)
	return n.close()
}
