//go:build linux

package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// The full-disk tests give each node's data directory a small tmpfs of its
// own, so filling it fills nothing else, and the nodes small log segments,
// so a few dozen entries need a new one.
const (
	diskSize    = 24 << 20
	segmentSize = 128 << 10
	// diskSlack is the free space the filler leaves: less than a segment, so
	// the next one cannot be made, but room for raft.db's few pages.
	diskSlack = 64 << 10
	// jobPayload makes each job's log entry about 12 KiB: ten fill a segment.
	jobPayload = 12 << 10
)

var storageFaultLine = regexp.MustCompile(`storage fault: this node cannot write its files`)

// diskNodes is a cluster whose every node has a private tmpfs data directory.
type diskNodes struct {
	t *testing.T
	c *harness.Cluster
}

// newDiskCluster makes n node slots, each with its data directory on a
// tmpfs of diskSize, started with small log segments and no free-space
// floor, but not yet started.
// It skips the test where mounting is not permitted.
func newDiskCluster(t *testing.T, n int) *diskNodes {
	t.Helper()
	// No free-space floor: these tests fill the disk itself (the floor
	// has TestFreeSpaceFloor).
	c := env.NewCluster(t, n, harness.Options{Args: []string{"--test-log-segment-size", fmt.Sprint(segmentSize), "--min-free-disk", "0"}})
	for _, node := range c.Nodes() {
		mountTmpfs(t, c, node)
	}
	return &diskNodes{t: t, c: c}
}

// mountTmpfs mounts a tmpfs of diskSize on node's data directory, and
// unmounts it once the test is over and the node stopped.
func mountTmpfs(t *testing.T, c *harness.Cluster, node *harness.Node) {
	t.Helper()
	if err := os.MkdirAll(node.DataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	err := syscall.Mount("tmpfs", node.DataDir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", diskSize))
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		t.Skipf("mounting a tmpfs is not permitted here (%v): the full-disk tests need root or CAP_SYS_ADMIN, as CI has", err)
	}
	if err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", node.DataDir, err)
	}
	t.Cleanup(func() {
		if node.Alive() {
			_ = node.Kill()
		}
		if err := syscall.Unmount(node.DataDir, 0); err != nil {
			// Still busy: detach it now, it goes once nothing uses it.
			if err := syscall.Unmount(node.DataDir, syscall.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", node.DataDir, err)
			}
		}
	})
}

// levelSnapshots waits until every node of a cluster that has just formed
// has taken the snapshot a node takes once its cluster's level is active
// (at once for a new cluster, formed with --bootstrap-expect or by a node
// alone): a fill before it
// would fail that snapshot as well, a second kind of storage fault beside
// the log's the tests mean to cause.
func (d *diskNodes) levelSnapshots() {
	d.t.Helper()
	d.c.Eventually("every node's snapshot of its cluster's level", func() error {
		for _, n := range d.c.Nodes() {
			snap, err := harness.NewestSnapshot(n.DataDir)
			if err != nil {
				return err
			}
			if snap == "" {
				return fmt.Errorf("%s has taken no snapshot yet", n.ID)
			}
		}
		return nil
	})
}

// fill writes a filler file into node's data directory until diskSlack
// bytes are left free.
func (d *diskNodes) fill(node *harness.Node) {
	d.t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(node.DataDir, &st); err != nil {
		d.t.Fatal(err)
	}
	left := int64(st.Bavail)*int64(st.Bsize) - diskSlack
	f, err := os.Create(fillerPath(node))
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for ; left > 0; left -= int64(len(chunk)) {
		if _, err := f.Write(chunk[:min(int64(len(chunk)), left)]); err != nil {
			d.t.Fatalf("fill %s: %v", node.DataDir, err)
		}
	}
}

// free removes the filler file.
func (d *diskNodes) free(node *harness.Node) {
	d.t.Helper()
	if err := os.Remove(fillerPath(node)); err != nil {
		d.t.Fatal(err)
	}
}

func fillerPath(node *harness.Node) string { return filepath.Join(node.DataDir, "filler") }

// jobWriter enqueues jobs with large payloads into queues it creates, and
// keeps what each answer said about them.
type jobWriter struct {
	t      *testing.T
	queues []diskQueue
	// acked are the job keys acknowledged; unknown those whose outcome is
	// unknown. A key refused with "nothing changed" is in neither.
	acked, unknown map[string]string // job key -> queue id
	n              int
	payload        string
}

type diskQueue struct{ id, write, read string }

func newJobWriter(t *testing.T) *jobWriter {
	return &jobWriter{t: t, acked: map[string]string{}, unknown: map[string]string{}, payload: strings.Repeat("x", jobPayload)}
}

// answerOf is one enqueue's answer.
type answerOf struct {
	status  int
	body    harness.ErrorBody
	nodeID  string
	storage string
}

// enqueue sends one job through node (a new queue every 90 jobs, below the
// limit of 100).
func (w *jobWriter) enqueue(node *harness.Node) answerOf {
	w.t.Helper()
	if w.n%90 == 0 {
		w.newQueue(node)
	}
	q := w.queues[len(w.queues)-1]
	key := fmt.Sprintf("job-%d", w.n)
	w.n++
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := node.Do(ctx, harness.Request{Method: http.MethodPost, Path: apiPrefix + "/queue/" + q.id + "/jobs",
		Header: http.Header{"Authorization": {"Bearer " + q.write}},
		JSON:   map[string]any{"job_key": key, "payload": map[string]any{"data": w.payload}}})
	if err != nil {
		w.unknown[key] = q.id
		return answerOf{}
	}
	var a answerOf
	a.status = r.Status
	_ = json.Unmarshal(r.Body, &a.body)
	var extra struct {
		NodeID  string `json:"node_id"`
		Storage string `json:"storage"`
	}
	_ = json.Unmarshal(r.Body, &extra)
	a.nodeID, a.storage = extra.NodeID, extra.Storage
	switch {
	case r.Status == http.StatusCreated:
		w.acked[key] = q.id
	case r.Status == http.StatusServiceUnavailable && a.body.Outcome == "unknown":
		w.unknown[key] = q.id
	case r.Status == http.StatusInsufficientStorage || (r.Status == http.StatusServiceUnavailable && a.body.Outcome == "not_applied"):
	default:
		w.t.Fatalf("enqueue %s via %s: unexpected answer %s", key, node.ID, r)
	}
	return a
}

// newQueue creates a queue through node, retrying while no leader serves.
func (w *jobWriter) newQueue(node *harness.Node) {
	w.t.Helper()
	var q diskQueue
	harness.Eventually(w.t, 30*time.Second, "create a queue via "+node.ID, func() error {
		r, err := node.PostJSON(apiPrefix+"/queue", map[string]any{}, "")
		if err != nil {
			return err
		}
		var m struct {
			ID    string `json:"queue_id"`
			Write string `json:"write_token"`
			Read  string `json:"read_token"`
		}
		if r.Status != http.StatusCreated || r.Decode(&m) != nil {
			return fmt.Errorf("create a queue: %s", r)
		}
		q = diskQueue{m.ID, m.Write, m.Read}
		return nil
	})
	w.queues = append(w.queues, q)
}

// checkKept reads every queue through node and checks that each
// acknowledged job is there, and nothing but acknowledged jobs and jobs of
// unknown outcome.
func (w *jobWriter) checkKept(node *harness.Node) {
	w.t.Helper()
	for _, q := range w.queues {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := node.Do(ctx, harness.Request{Method: http.MethodGet, Path: apiPrefix + "/queue/" + q.id,
			Header: http.Header{"Authorization": {"Bearer " + q.read}}})
		cancel()
		if err != nil {
			w.t.Fatal(err)
		}
		var m struct {
			Counts struct {
				Total int `json:"total"`
			} `json:"counts"`
		}
		if r.Status != http.StatusOK || r.Decode(&m) != nil {
			w.t.Fatalf("read queue %s via %s: %s", q.id, node.ID, r)
		}
		acked, unknown := 0, 0
		for _, id := range w.acked {
			if id == q.id {
				acked++
			}
		}
		for _, id := range w.unknown {
			if id == q.id {
				unknown++
			}
		}
		if m.Counts.Total < acked || m.Counts.Total > acked+unknown {
			w.t.Errorf("queue %s holds %d jobs; %d were acknowledged and %d of unknown outcome", q.id, m.Counts.Total, acked, unknown)
		}
	}
}

// storageOf returns node's storage condition from its status.
func storageOf(node *harness.Node) (bool, string, error) {
	var st struct {
		Storage struct {
			OK      bool   `json:"ok"`
			DataDir string `json:"data_dir"`
			Faults  []struct {
				Kind  string `json:"kind"`
				Error string `json:"error"`
			} `json:"faults"`
		} `json:"storage"`
	}
	if _, err := node.GetJSON("/cluster/status", &st); err != nil {
		return false, "", err
	}
	kinds := []string{}
	for _, f := range st.Storage.Faults {
		kinds = append(kinds, f.Kind)
	}
	return st.Storage.OK, strings.Join(kinds, ","), nil
}

// expectReportsFault checks that node reports a raft-log fault in its
// status, its /readyz (naming the data dir) and its metrics.
func expectReportsFault(t *testing.T, node *harness.Node) {
	t.Helper()
	ok, kinds, err := storageOf(node)
	if err != nil || ok || kinds != "raft-log" {
		t.Errorf("%s status: storage ok=%v faults=%q (%v), want a raft-log fault", node.ID, ok, kinds, err)
	}
	r, err := node.Get("/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := r.ErrorBody()
	if r.Status != http.StatusServiceUnavailable || !strings.Contains(body.Error, "storage fault") ||
		!strings.Contains(body.Error, node.DataDir) || !strings.Contains(body.Error, "raft-log") {
		t.Errorf("%s /readyz does not name the disk: %s", node.ID, r)
	}
	m, err := node.Get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"holdfast_storage_ok 0", `holdfast_storage_errors_total{kind="raft-log"} 1`} {
		if !strings.Contains(string(m.Body), want) {
			t.Errorf("%s metrics lack %q", node.ID, want)
		}
	}
}

// expectBehind checks that victim's log is behind leader's: it could not
// take every entry while its disk was full.
func expectBehind(t *testing.T, victim, leader *harness.Node) {
	t.Helper()
	vs, err := victim.Status()
	if err != nil {
		t.Fatal(err)
	}
	ls, err := leader.Status()
	if err != nil {
		t.Fatal(err)
	}
	if vs.LastLogIndex >= ls.LastLogIndex {
		t.Errorf("%s's log reaches %d, the leader's %d: its disk was not full", victim.ID, vs.LastLogIndex, ls.LastLogIndex)
	}
}

// waitFault writes through via until victim reports a storage fault.
func (w *jobWriter) waitFault(via, victim *harness.Node) {
	w.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if ok, _, err := storageOf(victim); err == nil && !ok {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%s reports no storage fault after %d jobs", victim.ID, w.n)
		}
		w.enqueue(via)
	}
}

// recovered waits until victim can write again, is ready and holds the
// others' state, without having been restarted.
func (d *diskNodes) recovered(victim *harness.Node, pid int) {
	d.t.Helper()
	d.c.Eventually(victim.ID+" writes again", func() error {
		ok, kinds, err := storageOf(victim)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("storage faults %s", kinds)
		}
		return nil
	})
	d.c.WaitAllReady()
	d.c.WaitSameState()
	if victim.Pid() != pid {
		d.t.Errorf("%s was restarted (pid %d, was %d)", victim.ID, victim.Pid(), pid)
	}
	log := victim.Log()
	if n := len(storageFaultLine.FindAllString(log, -1)); n != 1 {
		d.t.Errorf("%s logged %d storage fault episodes, want 1", victim.ID, n)
	}
	if !strings.Contains(log, "storage fault over: writes work again") {
		d.t.Errorf("%s did not log the end of its storage fault", victim.ID)
	}
	for _, held := range []string{"failed to commit logs", "failed to append to logs"} {
		if n := strings.Count(log, held); n > 1 {
			d.t.Errorf("%s logged %q %d times: a fault's repeats are held back", victim.ID, held, n)
		}
	}
}

// TestDiskFullFollower fills a follower's disk: the leader and the other
// follower keep serving, the full follower reports its fault (status,
// /readyz naming the data dir, metrics), and once space is back it catches
// up without a restart.
func TestDiskFullFollower(t *testing.T) {
	d := newDiskCluster(t, 3)
	d.c.StartBootstrap()
	leader := d.c.WaitLeader()
	d.c.WaitAllReady()
	d.levelSnapshots()
	victim := harness.Except(d.c.Nodes(), leader)[0]
	pid := victim.Pid()
	w := newJobWriter(t)
	w.enqueue(leader)

	d.fill(victim)
	w.waitFault(leader, victim)
	// The entries the follower cannot take are committed by the other two.
	for range 2 * segmentSize / jobPayload {
		if a := w.enqueue(leader); a.status != http.StatusCreated {
			t.Fatalf("a write while a follower's disk is full: HTTP %d %+v", a.status, a.body)
		}
	}
	if now, err := d.c.LeaderOf(); err != nil || now != leader {
		t.Errorf("leadership moved while a follower's disk was full: %v %v", now, err)
	}
	expectBehind(t, victim, leader)
	expectReportsFault(t, victim)

	d.free(victim)
	d.recovered(victim, pid)
	w.checkKept(victim)
}

// TestDiskFullLeader fills the leader's disk: its append fails, it steps
// down, the other two elect a leader and serve within seconds while the
// full node never leads again until it can write; once space is back it
// catches up without a restart, and every acknowledged write is kept.
func TestDiskFullLeader(t *testing.T) {
	d := newDiskCluster(t, 3)
	d.c.StartBootstrap()
	victim := d.c.WaitLeader()
	d.c.WaitAllReady()
	d.levelSnapshots()
	pid := victim.Pid()
	others := harness.Except(d.c.Nodes(), victim)
	w := newJobWriter(t)
	w.enqueue(others[0])

	d.fill(victim)
	// Through a follower, until another node leads.
	deadline := time.Now().Add(60 * time.Second)
	var stepped time.Time
	refused := 0
	for stepped.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("%s still leads after %d jobs on a full disk", victim.ID, w.n)
		}
		a := w.enqueue(others[0])
		if a.status == http.StatusInsufficientStorage {
			refused++
			if a.nodeID != victim.ID || a.storage != "raft-log" {
				t.Errorf("507 naming %q %q, want the full leader %s's raft-log: %+v", a.nodeID, a.storage, victim.ID, a.body)
			}
		}
		if l, err := d.c.LeaderOf(others...); err == nil && l != victim {
			stepped = time.Now()
		}
	}
	t.Logf("%s stepped down after %d jobs; %d answered 507 naming its storage", victim.ID, w.n, refused)
	// A new leader serves within a few seconds.
	served := false
	for time.Since(stepped) < 10*time.Second && !served {
		served = w.enqueue(others[1]).status == http.StatusCreated
	}
	if !served {
		t.Fatalf("no write acknowledged within 10 s of %s stepping down", victim.ID)
	}
	leader, err := d.c.LeaderOf(others...)
	if err != nil {
		t.Fatal(err)
	}
	// While full, the old leader takes part in no election: the new leader
	// and its term stay, and writes keep being served, for several election
	// timeouts and more entries than its disk has room for.
	before, err := leader.Status()
	if err != nil {
		t.Fatal(err)
	}
	for start, n := time.Now(), 0; n < 2*segmentSize/jobPayload || time.Since(start) < 3*time.Second; n++ {
		if a := w.enqueue(others[n%2]); a.status != http.StatusCreated {
			t.Fatalf("a write while the old leader's disk is full: HTTP %d %+v", a.status, a.body)
		}
		if st, err := victim.Status(); err != nil || st.State == "leader" || st.State == "candidate" && st.Term > before.Term {
			t.Fatalf("the full node runs for leader: %+v %v", st, err)
		}
	}
	expectBehind(t, victim, leader)
	for _, n := range d.c.Nodes() {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		if st.LeaderID != leader.ID || st.Term != before.Term {
			t.Errorf("%s sees leader %q in term %d, want %s in term %d: the full node disturbed the cluster", n.ID, st.LeaderID, st.Term, leader.ID, before.Term)
		}
	}
	expectReportsFault(t, victim)

	d.free(victim)
	d.recovered(victim, pid)
	w.checkKept(victim)
	w.checkKept(leader)
}

// TestDiskFullSingleNode fills the only node's disk: writes are refused
// with 507 naming its storage (or 503 saying their outcome is unknown),
// /readyz names the disk, the log says it once, and once space is back the
// node serves again without a restart, with every acknowledged write.
func TestDiskFullSingleNode(t *testing.T) {
	d := newDiskCluster(t, 1)
	d.c.StartBootstrap()
	node := d.c.WaitLeader()
	d.c.WaitAllReady()
	d.levelSnapshots()
	pid := node.Pid()
	w := newJobWriter(t)
	w.enqueue(node)

	d.fill(node)
	deadline := time.Now().Add(60 * time.Second)
	refused := 0
	for refused < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("writes still acknowledged after %d jobs on a full disk", w.n)
		}
		a := w.enqueue(node)
		switch {
		case a.status == http.StatusInsufficientStorage:
			if a.nodeID != node.ID || a.storage != "raft-log" || a.body.Outcome != "not_applied" || !strings.Contains(a.body.Error, "raft-log") {
				t.Errorf("507 does not name the node's raft-log: %+v %q %q", a.body, a.nodeID, a.storage)
			}
			refused++
		case a.status == http.StatusServiceUnavailable && (a.body.Outcome != "unknown" || !strings.Contains(a.body.Error, "raft-log")):
			t.Errorf("503 %+v on a full single node: want 507 naming its storage, or an unknown outcome naming it", a.body)
		}
	}
	expectReportsFault(t, node)
	if st, err := node.Status(); err != nil || st.State == "leader" {
		t.Errorf("the full node leads (%v): it stays out of elections until it can write", err)
	}

	d.free(node)
	freed := time.Now()
	var served bool
	for time.Since(freed) < 10*time.Second && !served {
		served = w.enqueue(node).status == http.StatusCreated
	}
	if !served {
		t.Fatal("no write acknowledged within 10 s of space coming back")
	}
	t.Logf("the first write was acknowledged %v after space came back", time.Since(freed).Round(time.Millisecond))
	d.recovered(node, pid)
	w.checkKept(node)
}

// TestFreeSpaceFloor: a leader whose data directory has less free space
// than --min-free-disk refuses new lease keys, queues and jobs with 507
// naming the floor and changes nothing, while the keys, queues and jobs
// that exist go on working.
func TestFreeSpaceFloor(t *testing.T) {
	d := newDiskCluster(t, 1)
	d.c.StartBootstrap()
	node := d.c.WaitLeader()
	d.c.WaitAllReady()
	e := &apiEnv{c: d.c, leader: node, secrets: newSecretSet(), stored: newSecretSet(), ids: newSecretSet()}
	ns := e.newNamespace(t, node)
	kept := map[string]any{"namespace": ns, "key": "kept", "ttl_seconds": 60}
	g := e.do(t, node, post("/lease/acquire", kept))
	expectStatus(t, "acquire before the floor", g, http.StatusCreated)
	owner := str(t, "acquire before the floor", g.m, "owner_token")
	expectStatus(t, "complete before the floor", e.do(t, node, post("/lease/complete",
		map[string]any{"namespace": ns, "key": "kept", "owner_token": owner, "result": map[string]any{"n": 1}})), http.StatusOK)
	q := e.createQueue(t, node)
	expectStatus(t, "enqueue before the floor", e.enqueue(t, node, q, "job-1", `{"n":1}`), http.StatusCreated)

	const floor = int64(2 * diskSize) // more than the whole tmpfs: always below
	d.c.Restart(node, "--min-free-disk", fmt.Sprint(floor))
	d.c.WaitLeader()
	d.c.WaitAllReady()

	lowDisk := func(what string, a *answer) {
		t.Helper()
		expectStatus(t, what, a, http.StatusInsufficientStorage)
		if s := str(t, what, a.m, "status"); s != "disk_low" {
			t.Errorf("%s: status %q, want disk_low", what, s)
		}
		if s := str(t, what, a.m, "setting"); s != "min_free_disk" {
			t.Errorf("%s: setting %q, want min_free_disk", what, s)
		}
		if got := integer(t, what, a.m, "min_free_bytes"); got != floor {
			t.Errorf("%s: min_free_bytes %d, want %d", what, got, floor)
		}
		if free := integer(t, what, a.m, "free_bytes"); free >= floor || free <= 0 {
			t.Errorf("%s: free_bytes %d, want the tmpfs's free space", what, free)
		}
	}
	lowDisk("acquire of a new key", e.do(t, node, post("/lease/acquire", map[string]any{"namespace": ns, "key": "new", "ttl_seconds": 60})))
	lowDisk("queue creation", e.do(t, node, post("/queue", map[string]any{})))
	lowDisk("enqueue of a new job key", e.enqueue(t, node, q, "job-2", `{"n":2}`))

	// What exists works: the done key gives its result, the job is found
	// again by its key, claimed and acked.
	r := e.do(t, node, post("/lease/acquire", kept))
	expectStatus(t, "acquire of the done key", r, http.StatusOK)
	if s := str(t, "acquire of the done key", r.m, "status"); s != "completed" {
		t.Errorf("acquire of the done key: status %q, want completed", s)
	}
	expectStatus(t, "enqueue of the job key again", e.enqueue(t, node, q, "job-1", `{"n":1}`), http.StatusOK)
	c := e.claim(t, node, q, "")
	expectStatus(t, "claim", c, http.StatusOK)
	claimed := object(t, "claim", c.m, "job")
	job, receipt := str(t, "claim", claimed, "job_id"), str(t, "claim", claimed, "receipt")
	expectStatus(t, "ack", e.jobAction(t, node, q, job, "ack", receiptBody(receipt)), http.StatusOK)
}
