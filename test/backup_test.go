//go:build unix

package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// ackedLease is a lease the load completed: its key, fingerprint, stored
// result and grant's fencing token.
type ackedLease struct {
	key, fingerprint, result string
	fence                    int64
	at                       time.Time // when the completion was acknowledged
}

// ackedJob is an enqueue that was acknowledged.
type ackedJob struct {
	id string
	at time.Time
}

// backupLoad runs acquire+complete and enqueue cycles against nodes until
// stop is closed, recording what was acknowledged.
type backupLoad struct {
	ns                 string
	queue, write, read string
	mu                 sync.Mutex
	leases             []ackedLease
	jobs               []ackedJob
	maxFence           int64
	errs               int
}

func (l *backupLoad) run(n *harness.Node, worker int, stop <-chan struct{}) {
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		key := fmt.Sprintf("w%d-%d", worker, i)
		fp := "fp-" + key
		r, err := n.Do(ctx, harness.Request{Method: http.MethodPost, Path: "/services/v1/lease",
			JSON: map[string]any{"namespace": l.ns, "key": key, "fingerprint": fp, "ttl_seconds": 300}})
		var grant struct {
			Owner string `json:"owner_token"`
			Fence int64  `json:"fencing_token"`
		}
		if err != nil || r.Status != http.StatusCreated || r.Decode(&grant) != nil {
			l.fail()
			continue
		}
		l.mu.Lock()
		l.maxFence = max(l.maxFence, grant.Fence)
		l.mu.Unlock()
		result := fmt.Sprintf(`{"worker":%d,"n":%d}`, worker, i)
		r, err = n.Do(ctx, harness.Request{Method: http.MethodPost, Path: "/services/v1/lease/complete",
			JSON: map[string]any{"namespace": l.ns, "key": key, "owner_token": grant.Owner, "result": json.RawMessage(result)}})
		if err != nil || r.Status != http.StatusOK {
			l.fail()
			continue
		}
		done := time.Now()
		var job struct {
			ID string `json:"job_id"`
		}
		if i%3 == 0 {
			r, err = n.Do(ctx, harness.Request{Method: http.MethodPost, Path: "/services/v1/queue/" + l.queue + "/jobs",
				Header: http.Header{"Authorization": {"Bearer " + l.write}}, JSON: map[string]any{"job_key": key, "payload": json.RawMessage(result)}})
			if err != nil || r.Status != http.StatusCreated || r.Decode(&job) != nil {
				l.fail()
			}
		}
		l.mu.Lock()
		l.leases = append(l.leases, ackedLease{key: key, fingerprint: fp, result: result, fence: grant.Fence, at: done})
		if job.ID != "" {
			l.jobs = append(l.jobs, ackedJob{id: job.ID, at: time.Now()})
		}
		l.mu.Unlock()
	}
}

func (l *backupLoad) fail() {
	l.mu.Lock()
	l.errs++
	l.mu.Unlock()
}

// TestBackupAndRestore saves a backup from a three-node cluster under load
// (through a follower, with the CLI), restores it into a new three-node
// cluster, and checks that every lease completed and every job enqueued
// before the save began is there with its result and payload, and that the
// restored cluster's next grant has a higher fencing token than any issued
// before the backup. A node with state refuses --restore.
func TestBackupAndRestore(t *testing.T) {
	a := env.NewCluster(t, 3, harness.Options{})
	a.StartBootstrap()
	a.WaitAllReady()
	leader := a.WaitLeader()
	follower := harness.Except(a.Nodes(), leader)[0]
	cli := newCLIEnv(t, follower)

	l := &backupLoad{ns: cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)}
	cli.want(0, nil, "cluster", "settings", "--set", "queue_max_jobs=100000")
	q := jsonOf(t, cli.want(0, nil, "queue", "create").stdout)
	l.queue, l.write, l.read = q["queue_id"].(string), cli.secret(q["write_token"].(string)), cli.secret(q["read_token"].(string))

	// Results large enough that the backup outgrows what a follower reads
	// into memory of a leader's answer: the save through a follower must
	// stream it through.
	big := json.RawMessage(`{"pad":"` + strings.Repeat("x", 30000) + `"}`)
	var seed sync.WaitGroup
	for w := range 6 {
		seed.Add(1)
		go func() {
			defer seed.Done()
			for i := range 50 {
				key := fmt.Sprintf("big-%d-%d", w, i)
				r, err := leader.Do(context.Background(), harness.Request{Method: http.MethodPost, Path: "/services/v1/lease",
					JSON: map[string]any{"namespace": l.ns, "key": key, "ttl_seconds": 300}})
				var g struct {
					Owner string `json:"owner_token"`
				}
				if err != nil || r.Status != http.StatusCreated || r.Decode(&g) != nil {
					t.Errorf("acquire %s: %v %v", key, r, err)
					return
				}
				r, err = leader.Do(context.Background(), harness.Request{Method: http.MethodPost, Path: "/services/v1/lease/complete",
					JSON: map[string]any{"namespace": l.ns, "key": key, "owner_token": g.Owner, "result": big}})
				if err != nil || r.Status != http.StatusOK {
					t.Errorf("complete %s: %v %v", key, r, err)
					return
				}
			}
		}()
	}
	seed.Wait()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, n := range append(a.Nodes(), a.Nodes()...) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(n, w, stop)
		}()
	}
	time.Sleep(2 * time.Second)
	file := filepath.Join(cli.dir, "holdfast.backup")
	began := time.Now()
	saved := jsonOf(t, cli.want(0, nil, "snapshot", "save", file).stdout)
	if size, _ := saved["size"].(float64); size <= 8<<20 {
		t.Errorf("the backup is %v bytes: too small to show that a follower streams it (want over 8 MiB)", saved["size"])
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	l.mu.Lock()
	var before []ackedLease
	var maxFenceBefore int64
	for _, x := range l.leases {
		if x.at.Before(began) {
			before = append(before, x)
			maxFenceBefore = max(maxFenceBefore, x.fence)
		}
	}
	var jobsBefore []ackedJob
	for _, j := range l.jobs {
		if j.at.Before(began) {
			jobsBefore = append(jobsBefore, j)
		}
	}
	l.mu.Unlock()
	if len(before) < 20 || len(jobsBefore) < 5 {
		t.Fatalf("only %d leases and %d jobs acknowledged before the save (%d errors)", len(before), len(jobsBefore), l.errs)
	}

	// inspect agrees with save, and sees at least what was acknowledged.
	inspected := jsonOf(t, cli.want(0, nil, "snapshot", "inspect", file).stdout)
	for _, k := range []string{"index", "term", "size", "sha256", "leases", "fencing_counter"} {
		if fmt.Sprint(inspected[k]) != fmt.Sprint(saved[k]) {
			t.Errorf("inspect says %s=%v, save said %v", k, inspected[k], saved[k])
		}
	}
	if int(inspected["leases"].(float64)) < len(before) || int64(inspected["fencing_counter"].(float64)) < maxFenceBefore {
		t.Errorf("the backup holds %v leases and fencing counter %v; %d leases and fence %d were acknowledged before it", inspected["leases"], inspected["fencing_counter"], len(before), maxFenceBefore)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range *cli.secrets {
		if strings.Contains(string(raw), s) {
			t.Errorf("the backup holds a raw secret")
		}
	}
	corrupt := filepath.Join(cli.dir, "corrupt.backup")
	if err := os.WriteFile(corrupt, raw[:len(raw)-10], 0o600); err != nil {
		t.Fatal(err)
	}
	cli.want(1, nil, "snapshot", "inspect", corrupt)

	// A new cluster: the first node restores alone, the others join it.
	b := env.NewCluster(t, 3, harness.Options{})
	first := b.Node(0)
	b.Start(first, "--restore", file)
	b.WaitAllReady(first)
	for _, n := range b.Nodes()[1:] {
		b.Start(n, "--join", first.HTTPAddr)
	}
	b.WaitMembers(b.Nodes())
	b.WaitAllReady()
	b.WaitSameState()
	rcli := newCLIEnv(t, b.Nodes()...)
	rcli.secrets = cli.secrets
	e := []string{"HOLDFAST_NAMESPACE=" + l.ns}
	for i, x := range before {
		n := b.Node(i % 3)
		r, err := n.Do(context.Background(), harness.Request{Method: http.MethodPost, Path: "/services/v1/lease",
			JSON: map[string]any{"namespace": l.ns, "key": x.key, "fingerprint": x.fingerprint}})
		var got struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
			Fence  int64           `json:"fencing_token"`
		}
		if err != nil || r.Status != http.StatusOK || r.Decode(&got) != nil || got.Status != "completed" || !sameJSON(got.Result, []byte(x.result)) || got.Fence != x.fence {
			t.Fatalf("lease %s after the restore: %v %v; want completed with %s and fence %d", x.key, r, err, x.result, x.fence)
		}
	}
	for _, j := range jobsBefore {
		r, err := b.Node(0).Do(context.Background(), harness.Request{Method: http.MethodGet, Path: "/services/v1/queue/" + l.queue + "/jobs/" + j.id,
			Header: http.Header{"Authorization": {"Bearer " + l.read}}})
		if err != nil || r.Status != http.StatusOK {
			t.Fatalf("job %s after the restore: %v %v", j.id, r, err)
		}
	}
	next := rcli.want(0, e, "lease", "acquire", "--key", "after-restore", "--field", "fencing_token").stdout
	if f := jsonOf(t, `{"f":`+next+`}`)["f"].(float64); int64(f) <= maxFenceBefore || int64(f) <= int64(inspected["fencing_counter"].(float64)) {
		t.Errorf("the restored cluster granted fence %v; %d was issued before the backup (counter %v)", next, maxFenceBefore, inspected["fencing_counter"])
	}
	t.Logf("backup at index %v: %d leases and %d jobs acknowledged before it, all restored; next fence %s > %d", saved["index"], len(before), len(jobsBefore), next, maxFenceBefore)

	// A node with state refuses to restore over it.
	b.Stop(b.Node(2))
	if code, out := restoreRefused(t, b.Node(2).DataDir, file); code == 0 || !strings.Contains(out, "already holds Raft state") {
		t.Errorf("--restore on a node with state: exit %d\n%s", code, out)
	}
	// Nor does a new node that would not bootstrap alone.
	if code, out := restoreRefused(t, t.TempDir(), file, "--join", first.HTTPAddr); code == 0 || !strings.Contains(out, "must bootstrap alone") {
		t.Errorf("--restore with --join: exit %d\n%s", code, out)
	}
}

// restoreRefused runs `serve --restore file` with dataDir (of no running
// node) on fresh ports and returns its exit code and output.
func restoreRefused(t *testing.T, dataDir, file string, extra ...string) (int, string) {
	t.Helper()
	httpAddr, err := env.Ports.Addr()
	if err != nil {
		t.Fatal(err)
	}
	raftAddr, err := env.Ports.Addr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"serve", "--data-dir", dataDir, "--http-addr", httpAddr, "--raft-addr", raftAddr, "--restore", file}, extra...)
	out, err := exec.CommandContext(ctx, env.Binary, args...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("serve --restore: %v", err)
	return 0, ""
}

// TestRestoresNeverReissueFences restores one backup twice, each time into
// a new cluster: fences issued on the old cluster after the backup was
// taken are never issued again, the second restore starts above the first
// restored cluster's fences, and a request id repeated after a restore never
// gets a smaller fence than it got before. A damaged or truncated backup is
// refused with its checksum named.
func TestRestoresNeverReissueFences(t *testing.T) {
	a := env.NewCluster(t, 1, harness.Options{})
	a.StartBootstrap()
	a.WaitAllReady()
	cli := newCLIEnv(t, a.Nodes()...)
	ns := cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)
	e := []string{"HOLDFAST_NAMESPACE=" + ns}
	fence := func(c *cliEnv, key string, extra ...string) int64 {
		t.Helper()
		out := c.want(0, e, append([]string{"lease", "acquire", "--key", key, "--ttl", "3600", "--field", "fencing_token"}, extra...)...).stdout
		var f int64
		if _, err := fmt.Sscan(out, &f); err != nil {
			t.Fatalf("fence %q: %v", out, err)
		}
		return f
	}
	heldID := strings.Repeat("h", 40)
	laterID := strings.Repeat("l", 40)
	held := fence(cli, "held-at-backup", "--request-id", heldID)
	file := filepath.Join(cli.dir, "holdfast.backup")
	saved := jsonOf(t, cli.want(0, nil, "snapshot", "save", file).stdout)
	if saved["fencing_counter"].(float64) != float64(held) {
		t.Fatalf("save reports fencing_counter %v, want %d", saved["fencing_counter"], held)
	}
	if floor := saved["restore_floor"].(float64); floor < float64(held)+1e9 || floor < float64(time.Now().UnixMilli())*1000-1e6 {
		t.Fatalf("save reports restore_floor %v", floor)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var header map[string]any
	if err := json.Unmarshal(raw[:bytes.IndexByte(raw, '\n')], &header); err != nil || header["fencing_counter"].(float64) != float64(held) {
		t.Fatalf("backup header %v (%v): want fencing_counter %d", header, err, held)
	}
	// The old cluster goes on issuing fences after the backup.
	var afterBackup int64
	later := fence(cli, "acquired-after-backup", "--request-id", laterID)
	for i := range 20 {
		afterBackup = fence(cli, fmt.Sprintf("after-backup-%d", i))
	}
	if afterBackup <= later {
		t.Fatalf("fences after the backup: %d then %d", later, afterBackup)
	}

	restore := func() (*cliEnv, int64) {
		t.Helper()
		b := env.NewCluster(t, 1, harness.Options{})
		b.Start(b.Node(0), "--restore", file)
		b.WaitAllReady()
		c := newCLIEnv(t, b.Nodes()...)
		c.secrets = cli.secrets
		first := fence(c, "new-"+b.Node(0).HTTPAddr)
		return c, first
	}
	b, fromB := restore()
	if fromB <= afterBackup {
		t.Fatalf("the restored cluster granted fence %d; the old cluster had issued up to %d", fromB, afterBackup)
	}
	// The grant the backup holds answers its request id as before; a
	// request id whose grant came after the backup gets a new, higher fence.
	if f := fence(b, "held-at-backup", "--request-id", heldID); f != held {
		t.Fatalf("repeating the request id of a grant in the backup: fence %d, want %d", f, held)
	}
	if f := fence(b, "acquired-after-backup", "--request-id", laterID); f <= later {
		t.Fatalf("repeating a request id after the restore: fence %d, below the %d it got before", f, later)
	}
	var lastB int64
	for i := range 5 {
		lastB = fence(b, fmt.Sprintf("on-b-%d", i))
	}

	_, fromC := restore()
	if fromC <= lastB {
		t.Fatalf("the second restore of the same backup granted fence %d; the first restored cluster had issued %d", fromC, lastB)
	}
	t.Logf("fences: %d at the backup, up to %d after it, %d..%d on the first restore, %d on the second", held, afterBackup, fromB, lastB, fromC)

	// A damaged or truncated backup is refused, its checksum named.
	for name, damage := range map[string]func([]byte) []byte{
		"flipped byte": func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		"truncated":    func(b []byte) []byte { return b[:len(b)-100] },
	} {
		bad := filepath.Join(cli.dir, strings.ReplaceAll(name, " ", "-")+".backup")
		if err := os.WriteFile(bad, damage(bytes.Clone(raw)), 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out := restoreRefused(t, t.TempDir(), bad); code == 0 || !strings.Contains(out, "checksum mismatch") || !strings.Contains(out, header["sha256"].(string)) {
			t.Errorf("--restore of a backup with a %s: exit %d\n%s", name, code, out)
		}
	}
}
