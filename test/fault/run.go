//go:build unix

package fault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/holdfast/holdfast/test/faultfs"
	"github.com/holdfast/holdfast/test/harness"
)

// Workloads.
const (
	WorkloadLease   = "lease"
	WorkloadFenced  = "fenced"
	WorkloadNoFence = "fenced-nocheck"
	WorkloadQueue   = "queue"
	// WorkloadLeaseQueue runs the lease and the queue workloads at once.
	WorkloadLeaseQueue = "lease+queue"
	// WorkloadSlotsCheckpoint runs clients of multi-slot keys beside
	// clients that store and read checkpoints of single-slot keys.
	WorkloadSlotsCheckpoint = "slots+checkpoint"
)

// workload is what a scenario runs against the cluster: clients that
// record a history, final reads after healing, and the checks.
type workload interface {
	setup(context.Context) error
	start(context.Context, *sync.WaitGroup)
	final(context.Context) error
	check(*Result)
}

// bothWorkloads runs several workloads side by side on one history; each
// checker reads only its own operations.
type bothWorkloads []workload

func (b bothWorkloads) setup(ctx context.Context) error {
	for _, w := range b {
		if err := w.setup(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (b bothWorkloads) start(ctx context.Context, wg *sync.WaitGroup) {
	for _, w := range b {
		w.start(ctx, wg)
	}
}

func (b bothWorkloads) final(ctx context.Context) error {
	for _, w := range b {
		if err := w.final(ctx); err != nil {
			return err
		}
	}
	return nil
}

// check runs each checker on a result of its own and adds them up; the
// linearizability verdict is the worst of them.
func (b bothWorkloads) check(res *Result) {
	for _, w := range b {
		part := &Result{Lin: VerdictNA}
		w.check(part)
		res.Lost += part.Lost
		res.Unexpected += part.Unexpected
		res.Fencing += part.Fencing
		res.Violations += part.Violations
		res.Details = append(res.Details, part.Details...)
		if verdictRank(part.Lin) > verdictRank(res.Lin) {
			res.Lin = part.Lin
		}
	}
}

// verdictRank orders verdicts from the best to the worst.
func verdictRank(v string) int {
	return slices.Index([]string{VerdictNA, VerdictOK, VerdictUnknown, VerdictInvalid}, v)
}

// Nemeses.
const (
	NemesisNone       = "none"
	NemesisKill       = "kill"
	NemesisPause      = "pause"
	NemesisPartition  = "partition"
	NemesisClock      = "clock"
	NemesisClockCrash = "clock-crash"
	NemesisMembership = "membership"
	NemesisStorage    = "storage"
	NemesisMix        = "mix"
)

// Scenario is one run: a workload under a nemesis on a cluster.
type Scenario struct {
	Name     string
	Workload string
	Nemesis  string
	Nodes    int
	// Duration is how long clients run; the nemesis stops injecting a few
	// seconds earlier so recovery after the last heal is measured.
	Duration time.Duration
	// Tag is the build tag of a planted bug ("" for the real service).
	Tag string
	// ExpectViolation inverts the verdict: the run passes only if the
	// checkers report at least one violation (planted bugs, and the
	// fenced workload with the store's fence check disabled).
	ExpectViolation bool
	// Expect names the checks that should catch the planted bug, for the
	// report.
	Expect string
	// Args are extra node flags; they come after the suite's and win.
	Args []string
	// TLS gives the nodes certificates of a CA made for the run: every
	// link between nodes is mutual TLS (the fault proxies pass it through
	// unchanged) and the clients speak HTTPS.
	TLS bool
	// Keys is how many keys the lease workload's workers share per epoch
	// (0: the nodes plus two); fewer keys, more waiters on each.
	Keys int
	// Turn is where the disk-eio nemesis starts its turn through the
	// calls it fails, so the scenarios between them fail every one.
	Turn int
}

// estimate is the time the scenario is expected to take, for the budget.
func (sc Scenario) estimate(built bool) time.Duration {
	// Forming, draining, the final reads and the checks take a few seconds
	// on an idle machine; the margin covers a busy one.
	d := sc.Duration + 15*time.Second
	if sc.Nodes > 3 {
		d += 10 * time.Second
	}
	if !built {
		d += 60 * time.Second
	}
	return d
}

// Per-run constants.
const (
	// leaseTTL is the lease length the workloads ask for.
	leaseTTL = 2 * time.Second
	// visibility is the claim window of the queue workload, in seconds.
	visibility = 2
	// clientTimeout bounds one client request.
	clientTimeout = 5 * time.Second
	// nemesisTail is how long clients keep running after the last heal.
	nemesisTail = 6 * time.Second
	// checkTimeout bounds porcupine.
	checkTimeout = 90 * time.Second
)

// commonArgs are given to every node: no per-client rate limit (the
// workloads come from one address), frequent sweeps, and frequent
// snapshots with short trailing logs so restarts restore from snapshots
// and lagging followers get snapshots installed.
func commonArgs() []string {
	return []string{
		"--rate-limit", "0",
		"--sweep-interval", "250ms",
		"--snapshot-threshold", "128",
		"--snapshot-interval", "1s",
		"--trailing-logs", "64",
	}
}

// run is the state of one scenario while it runs.
type run struct {
	t      *testing.T
	sc     Scenario
	seed   uint64
	dir    string
	c      *harness.Cluster
	net    *Net
	rec    *Recorder
	client *Client
	ops    *Client // short-timeout client for status polls and ops calls
	slots  []*harness.Node
	// targets are the nodes clients talk to (the initial members).
	targets []*harness.Node
	spare   *harness.Node
	// disks are the nodes' data directories served through faultfs, by
	// node id (the disk nemeses only).
	disks map[string]*faultfs.FS
	// baseline is the older build the upgrade scenarios start on.
	baseline string

	maxAttempts int
	start       time.Time

	mu          sync.Mutex
	members     map[string]bool
	problems    []string
	notes       []string
	answers     int
	answerNotes []string
	converged   bool
	divergence  string
}

func (r *run) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(r.seed, stream))
}

// problem records a violation found outside the checkers (nemesis
// assertions, convergence, final reads).
func (r *run) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.problems = append(r.problems, msg)
	r.mu.Unlock()
	r.rec.Note("problem", msg)
}

// note records what a nemesis saw, for the report; it is not a violation.
func (r *run) note(msg string) {
	r.mu.Lock()
	r.notes = append(r.notes, msg)
	r.mu.Unlock()
	r.rec.Note("note", msg)
}

// unexpectedAnswer records an answer no correct service gives to the
// workload's requests (for example a 400 or 500).
func (r *run) unexpectedAnswer(f string, a Answer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers++
	if len(r.answerNotes) < 5 {
		r.answerNotes = append(r.answerNotes, fmt.Sprintf("%s: HTTP %d %.300s %v", f, a.Status, a.Raw, a.Err))
	}
}

func (r *run) setMember(id string, member bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.members[id] = member
}

func (r *run) isMember(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.members[id]
}

// memberNodes returns the slots that are meant to be voters now.
func (r *run) memberNodes() []*harness.Node {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*harness.Node
	for _, n := range r.slots {
		if r.members[n.ID] {
			out = append(out, n)
		}
	}
	return out
}

func (r *run) slot(id string) *harness.Node {
	for _, n := range r.slots {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// nodeStatus is the part of GET /cluster/status the suite reads.
type nodeStatus struct {
	NodeID        string           `json:"node_id"`
	State         string           `json:"state"`
	LeaderID      string           `json:"leader_id"`
	Term          uint64           `json:"term"`
	CommitIndex   uint64           `json:"commit_index"`
	AppliedIndex  uint64           `json:"applied_index"`
	LastLogIndex  uint64           `json:"last_log_index"`
	Ready         bool             `json:"ready"`
	StateHash     string           `json:"state_hash"`
	ClockSkewed   bool             `json:"clock_skewed"`
	ClockOffsetMs int64            `json:"clock_offset_ms"`
	Level         uint32           `json:"level"`
	BuildVersion  string           `json:"build_version"`
	ActiveLevel   uint32           `json:"active_level"`
	Nodes         []harness.Member `json:"nodes"`
}

func (s nodeStatus) voters() []string {
	var ids []string
	for _, m := range s.Nodes {
		if m.Voter {
			ids = append(ids, m.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

// status reads a node's status with a short timeout.
func (r *run) status(n *harness.Node, hash bool) (nodeStatus, error) {
	path := "/cluster/status"
	if hash {
		path += "?hash=true"
	}
	a := r.ops.Do(context.Background(), n.HTTPAddr, http.MethodGet, path, nil, "")
	if a.Err != nil {
		return nodeStatus{}, fmt.Errorf("status of %s: %w", n.ID, a.Err)
	}
	if a.Status != http.StatusOK {
		return nodeStatus{}, fmt.Errorf("status of %s: HTTP %d %.200s", n.ID, a.Status, a.Raw)
	}
	var s nodeStatus
	if err := json.Unmarshal(a.Raw, &s); err != nil {
		return nodeStatus{}, fmt.Errorf("status of %s: %w", n.ID, err)
	}
	return s, nil
}

// leader returns the running member that says it leads in the highest
// term, or nil.
func (r *run) leader() *harness.Node {
	var best *harness.Node
	var term uint64
	for _, n := range r.memberNodes() {
		if !n.Running() {
			continue
		}
		s, err := r.status(n, false)
		if err != nil || s.State != "leader" {
			continue
		}
		if best == nil || s.Term > term {
			best, term = n, s.Term
		}
	}
	return best
}

// poll calls f every interval until it returns nil or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return harness.Poll(ctx, interval, f)
}

// sleepCtx sleeps d or until ctx ends; it reports whether it slept fully.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// newRun prepares the directories, history and clients of a scenario.
func newRun(t *testing.T, s *suite, sc Scenario) *run {
	t.Helper()
	h := fnv.New64a()
	_, _ = io.WriteString(h, sc.Name)
	seed := s.cfg.seed ^ h.Sum64()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "artifacts")
	if s.cfg.artifacts != "" {
		dir = filepath.Join(s.cfg.artifacts, sanitize(sc.Name))
		_ = os.RemoveAll(dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatalf("create artifacts dir: %v", err)
	}
	rec, err := NewRecorder(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	r := &run{t: t, sc: sc, seed: seed, dir: dir, rec: rec, client: NewClient(clientTimeout), ops: NewClient(3 * time.Second),
		members: map[string]bool{}, maxAttempts: 5}
	t.Logf("scenario %s: seed %d (suite seed %d; replay with HOLDFAST_FAULT_SEED=%d)", sc.Name, seed, s.cfg.seed, s.cfg.seed)
	// Registered before the cluster, so it runs after the cluster has
	// killed its processes, and before the temporary directory goes.
	t.Cleanup(func() {
		_ = rec.Close()
		r.client.Close()
		r.ops.Close()
		if r.c != nil {
			for _, n := range r.slots {
				_ = harness.CopyFile(n.LogPath, filepath.Join(dir, "logs", filepath.Base(n.LogPath)))
			}
		}
		switch {
		case s.cfg.artifacts != "":
			t.Logf("artifacts of %s: %s", sc.Name, dir)
		case t.Failed():
			keep, err := os.MkdirTemp("", "holdfast-fault-"+sanitize(sc.Name)+"-")
			if err == nil {
				err = copyDir(dir, keep)
			}
			if err != nil {
				t.Logf("could not keep the artifacts: %v", err)
				return
			}
			t.Logf("artifacts (history, node logs, visualization) kept in %s", keep)
		}
	})
	return r
}

// form starts the cluster: the scenario's nodes bootstrap together, every
// node dials the others through the fault proxies, and the test settings
// are applied.
func (r *run) form(env *harness.Env) {
	t := r.t
	t.Helper()
	slots := r.sc.Nodes
	if r.sc.Nemesis == NemesisMembership || r.sc.Nemesis == NemesisMix {
		slots++ // a spare voter to add and remove
	}
	clusterDir := filepath.Join(t.TempDir(), "cluster")
	var diskRoot string
	if onDisks(r.sc.Nemesis) {
		// Registered before the cluster, so the mounts go after its
		// processes are killed and before the directories are removed.
		diskRoot = t.TempDir()
		r.disks = map[string]*faultfs.FS{}
		t.Cleanup(r.unmountDisks)
	}
	r.c = env.NewCluster(t, slots, harness.Options{
		Dir:              clusterDir,
		HeartbeatTimeout: time.Second,
		ElectionTimeout:  time.Second,
		Args:             append(commonArgs(), r.sc.Args...),
		WaitTimeout:      90 * time.Second,
		StopTimeout:      30 * time.Second,
		TLS:              r.sc.TLS,
	})
	if r.sc.TLS {
		cfg, err := harness.ClientTLS(r.c.PKI().CAFile(), nil)
		if err != nil {
			t.Fatal(err)
		}
		r.client.UseTLS(cfg)
		r.ops.UseTLS(cfg.Clone())
	}
	if diskRoot != "" {
		r.mountDisks(diskRoot)
	}
	r.slots = r.c.Nodes()
	eps := make([]Endpoint, len(r.slots))
	for i, n := range r.slots {
		eps[i] = Endpoint{ID: n.ID, HTTPAddr: n.HTTPAddr, RaftAddr: n.RaftAddr}
	}
	nw, err := NewNet(eps, env.Ports.Addr)
	if err != nil {
		t.Fatal(err)
	}
	r.net = nw
	t.Cleanup(nw.Close)
	for _, n := range r.slots {
		n.Args = append(n.Args, "--test-raft-peer-addrs", nw.PeerFlag(n.ID, KindRaft), "--test-http-peer-addrs", nw.PeerFlag(n.ID, KindHTTP))
	}
	r.targets = r.slots[:r.sc.Nodes]
	if len(r.slots) > r.sc.Nodes {
		r.spare = r.slots[r.sc.Nodes]
		nw.SetDown(r.spare.ID, true)
	}
	for _, n := range r.targets {
		if startsOnBaseline(r.sc.Nemesis) {
			n.Binary = r.baseline
		}
		r.setMember(n.ID, true)
		r.c.Start(n, "--bootstrap-expect", strconv.Itoa(r.sc.Nodes), "--join", harness.JoinList(harness.Except(r.targets, n)...))
	}
	leader := r.c.WaitLeader(r.targets...)
	r.c.WaitAllReady(r.targets...)
	settings := map[string]int64{
		"visibility_min_seconds": 1,
		"queue_max_jobs":         5000,
		"queues_per_client":      1000,
	}
	err = poll(context.Background(), 60*time.Second, 250*time.Millisecond, func() error {
		a := r.ops.Do(context.Background(), leader.HTTPAddr, http.MethodPut, "/cluster/settings", settings, "")
		if a.Status != http.StatusOK {
			if l := r.leader(); l != nil {
				leader = l
			}
			return fmt.Errorf("PUT /cluster/settings: HTTP %d %.200s %v", a.Status, a.Raw, a.Err)
		}
		var ans struct {
			Settings map[string]int64 `json:"settings"`
		}
		if err := json.Unmarshal(a.Raw, &ans); err != nil {
			return err
		}
		if v := ans.Settings["queue_max_attempts"]; v > 0 {
			r.maxAttempts = int(v)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("apply the test settings: %v", err)
	}
	r.start = time.Now()
}

// killNode SIGKILLs n; its links refuse connections until it starts again.
func (r *run) killNode(n *harness.Node) error {
	err := n.Kill()
	if !n.Alive() {
		r.net.SetDown(n.ID, true)
	}
	return err
}

// stopNode stops n gracefully (SIGTERM).
func (r *run) stopNode(n *harness.Node) error {
	_, err := n.Stop(30 * time.Second)
	if !n.Alive() {
		r.net.SetDown(n.ID, true)
	}
	return err
}

// startNode starts n from its data with extra flags.
func (r *run) startNode(n *harness.Node, extra ...string) error {
	r.net.SetDown(n.ID, false)
	return n.Start(extra...)
}

// ensureHealed undoes anything a nemesis may have left: every link healed,
// every paused process continued, every member process running.
func (r *run) ensureHealed() {
	r.net.HealAll()
	for _, err := range r.net.Errs() {
		r.problem("fault proxy: %v", err)
	}
	for _, n := range r.slots {
		switch {
		case n.State() == harness.Paused:
			if err := n.Resume(); err != nil {
				r.problem("resume %s at the end: %v", n.ID, err)
			}
		case r.isMember(n.ID) && !n.Alive():
			if err := r.startNode(n); err != nil {
				r.problem("restart %s at the end: %v", n.ID, err)
			}
		}
	}
}

// drain waits until the members agree on a leader, have applied the same
// index and report the same state hash. The same applied index with a
// different hash, seen three times in a row, is a divergence.
func (r *run) drain() {
	members := r.memberNodes()
	var last string
	mismatches := 0
	err := poll(context.Background(), 120*time.Second, 500*time.Millisecond, func() error {
		var sts []nodeStatus
		for _, n := range members {
			if !n.Alive() {
				// It exited after ensureHealed started it: it will not
				// converge (a node that refuses to start says why).
				return fmt.Errorf("%w: %s exited (%s): %s", harness.ErrPermanent, n.ID, exitState(n), harness.ServeFailedLine.FindString(n.LogSinceStart()))
			}
			s, err := r.status(n, true)
			if err != nil {
				return err
			}
			sts = append(sts, s)
		}
		leaders := 0
		for _, s := range sts {
			if s.State == "leader" && s.Ready {
				leaders++
			}
			if s.LeaderID == "" || s.LeaderID != sts[0].LeaderID {
				mismatches = 0
				return fmt.Errorf("no agreed leader: %s names %q, %s names %q", sts[0].NodeID, sts[0].LeaderID, s.NodeID, s.LeaderID)
			}
		}
		if leaders != 1 {
			return fmt.Errorf("%d ready leaders", leaders)
		}
		same := true
		for _, s := range sts[1:] {
			if s.AppliedIndex != sts[0].AppliedIndex {
				mismatches = 0
				return fmt.Errorf("%s applied %d, %s applied %d", sts[0].NodeID, sts[0].AppliedIndex, s.NodeID, s.AppliedIndex)
			}
			if s.StateHash != sts[0].StateHash {
				same = false
			}
		}
		if same {
			return nil
		}
		var parts []string
		for _, s := range sts {
			parts = append(parts, fmt.Sprintf("%s: applied %d hash %.16s", s.NodeID, s.AppliedIndex, s.StateHash))
		}
		last = strings.Join(parts, "; ")
		mismatches++
		if mismatches >= 3 {
			return fmt.Errorf("%w: state hashes differ at the same applied index: %s", harness.ErrPermanent, last)
		}
		return errors.New("hashes differ: " + last)
	})
	if err != nil {
		r.divergence = err.Error()
		r.problem("no convergence after healing: %v", err)
		return
	}
	r.converged = true
	// The configuration must hold exactly the members the nemesis left.
	if l := r.leader(); l != nil {
		if s, err := r.status(l, false); err == nil {
			want := harness.IDs(members)
			sort.Strings(want)
			if got := s.voters(); !slices.Equal(got, want) {
				r.problem("voters after healing are %v, want %v", got, want)
			}
		}
	}
}

// Result is one row of the report.
type Result struct {
	Scenario                string
	Workload, Nemesis       string
	Nodes                   int
	Tag                     string
	TLS                     bool
	Ops, OK, Failed, Info   int
	Lost, Unexpected        int
	Lin                     string
	Fencing                 int
	FaultOps, FaultAnswered int
	Recovery                []time.Duration
	// Outage is, for each fault, how long from its start until a write
	// invoked after it was acknowledged.
	Outage    []time.Duration
	Faults    int
	Converged bool
	// Violations is the total of every check that must be 0.
	Violations int
	Details    []string
	// Notes are what the nemesis saw, for the report.
	Notes   []string
	Elapsed time.Duration
	Outcome string
}

// detailLines formats what made a scenario fail (its details, then the
// nemesis's notes), one FAULT-DETAIL line per line of text, so a log
// filtered for results keeps the reason with the row.
func (res *Result) detailLines() string {
	var b strings.Builder
	for _, d := range append(append([]string(nil), res.Details...), res.Notes...) {
		for _, line := range strings.Split(d, "\n") {
			fmt.Fprintf(&b, "FAULT-DETAIL %s: %s\n", res.Scenario, line)
		}
	}
	return b.String()
}

// Availability is the fraction of operations invoked during a fault that
// got a definite answer, or NaN without any.
func (res *Result) Availability() float64 {
	if res.FaultOps == 0 {
		return math.NaN()
	}
	return float64(res.FaultAnswered) / float64(res.FaultOps)
}

// RecoveryMax is the longest time from a heal to the first acknowledged
// write invoked after it.
func (res *Result) RecoveryMax() time.Duration { return maxOf(res.Recovery) }

// RecoveryMean is the mean of the recovery times.
func (res *Result) RecoveryMean() time.Duration { return meanOf(res.Recovery) }

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func meanOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}

// meanMax formats durations as "mean/max" in seconds, "-" for none.
func meanMax(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fs/%.1fs", meanOf(ds).Seconds(), maxOf(ds).Seconds())
}

// ResultHeader is the header of the result rows.
const ResultHeader = "workload                 nemesis     nodes  ops    ok     fail   info  lost  unexp  linearizable  fencing  avail  outage(mean/max)  recovery(mean/max)  converged  result"

// Row formats the result as one line.
func (res *Result) Row() string {
	avail := "-"
	if a := res.Availability(); !math.IsNaN(a) {
		avail = fmt.Sprintf("%.2f", a)
	}
	wl := res.Workload
	if res.Tag != "" {
		wl += "+" + strings.TrimPrefix(res.Tag, "holdfast_bug_")
	}
	if res.TLS {
		wl += " (TLS)"
	}
	return fmt.Sprintf("%-24s %-11s %5d  %-6d %-6d %-6d %-5d %-5d %-6d %-13s %-8d %-6s %-17s %-19s %-10v %s",
		wl, res.Nemesis, res.Nodes, res.Ops, res.OK, res.Failed, res.Info, res.Lost, res.Unexpected, res.Lin, res.Fencing, avail,
		meanMax(res.Outage), meanMax(res.Recovery), res.Converged, res.Outcome)
}

// isWrite reports whether f changes state.
func isWrite(f string) bool {
	switch f {
	case fAcquire, fRenew, fRelease, fComplete, fCheckpoint, fEnqueue, fClaim, fAck, fJobRelease, fJobRenew, fSlotAcquire, fSlotRenew, fSlotRelease:
		return true
	}
	return false
}

// answered reports whether the service gave an op a definite answer.
func answered(o Op) bool {
	return o.Status != 0 && o.Status != http.StatusServiceUnavailable && o.Status != http.StatusTooManyRequests && o.Status < 500
}

// baseResult counts operations, availability and recovery.
func (r *run) baseResult() *Result {
	res := &Result{Scenario: r.sc.Name, Workload: r.sc.Workload, Nemesis: r.sc.Nemesis, Nodes: r.sc.Nodes, Tag: r.sc.Tag, TLS: r.sc.TLS, Lin: VerdictNA}
	ops := r.rec.Ops()
	windows := r.rec.Windows()
	res.Faults = len(windows)
	inFault := func(t int64) bool {
		for _, w := range windows {
			if t >= w.Start && (w.End == 0 || t < w.End) {
				return true
			}
		}
		return false
	}
	for _, o := range ops {
		if strings.HasPrefix(o.F, "final") || o.F == fWrite {
			continue
		}
		res.Ops++
		switch o.Type {
		case OK:
			res.OK++
		case Fail:
			res.Failed++
		default:
			res.Info++
		}
		if inFault(o.Call) {
			res.FaultOps++
			if answered(o) {
				res.FaultAnswered++
			}
		}
	}
	for i, w := range windows {
		next := int64(math.MaxInt64)
		if i+1 < len(windows) {
			next = windows[i+1].Start
		}
		if d, ok := firstWriteAfter(ops, w.Start, next); ok {
			res.Outage = append(res.Outage, d)
		}
		if w.End == 0 {
			continue
		}
		if d, ok := firstWriteAfter(ops, w.End, next); ok {
			res.Recovery = append(res.Recovery, d)
		}
	}
	return res
}

// firstWriteAfter is how long after from the first write invoked at or
// after it was acknowledged, among those acknowledged before until.
func firstWriteAfter(ops []Op, from, until int64) (time.Duration, bool) {
	best := int64(math.MaxInt64)
	for _, o := range ops {
		if o.Type == OK && isWrite(o.F) && o.Status >= 200 && o.Status < 300 && o.Call >= from && o.Ret < until {
			best = min(best, o.Ret-from)
		}
	}
	return time.Duration(best), best != math.MaxInt64
}

// writeVisualization writes porcupine's HTML for the lease history, with
// the fault windows as annotations.
func (r *run) writeVisualization(rep *LeaseReport) (string, error) {
	info := rep.info
	var anns []porcupine.Annotation
	for _, w := range r.rec.Windows() {
		end := w.End
		if end == 0 {
			end = time.Now().UnixNano()
		}
		anns = append(anns, porcupine.Annotation{Tag: "nemesis", Start: w.Start, End: end, Description: w.Description, BackgroundColor: "#f6d7d7"})
	}
	info.AddAnnotations(anns)
	path := filepath.Join(r.dir, "lease-linearizability.html")
	if err := porcupine.VisualizePath(rep.model, info, path); err != nil {
		return "", fmt.Errorf("write visualization: %w", err)
	}
	return path, nil
}

func sanitize(s string) string {
	return strings.Map(func(c rune) rune {
		if c == '/' || c == ' ' || c == os.PathSeparator || c == ':' {
			return '_'
		}
		return c
	}, s)
}

func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		return harness.CopyFile(p, target)
	})
}
