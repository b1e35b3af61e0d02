//go:build linux

package hosts

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// env is the built binary (and, for the figures' loopback cluster, the
// port allocator) every test shares; TestMain sets it before any test runs.
var env *harness.Env

// helperEnv makes the test binary a helper process inside a namespace
// instead of running tests (see runHelper).
const helperEnv = "HOLDFAST_HOSTS_HELPER"

// figuresEnv enables TestHostsFigures.
const figuresEnv = "HOLDFAST_HOSTS_FIGURES"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		os.Exit(runHelper(h, os.Args[1:]))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // every test skips
	}
	if err := Requirements(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v (CI runs as root, with iproute2 and util-linux installed; `go test -short` skips this package)\n", err)
		return 1
	}
	e, cleanup, err := harness.Setup(harness.BuildOptions{
		Race: os.Getenv("HOLDFAST_TEST_RACE_BINARY") == "1",
		Tags: harness.PlantedBugTags(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "building holdfast:", err)
		return 1
	}
	defer cleanup()
	env = e
	return m.Run()
}

// runHelper is the test binary run inside a namespace by `ip netns exec`,
// so that Go's own resolver reads that namespace's /etc/hosts, as the
// nodes' does:
//
//	resolve NAME...  prints {"NAME": [addresses]} as JSON
//	watch NAME       prints the addresses of NAME, then waits until they
//	                 change and prints the new ones and how long that took
func runHelper(mode string, args []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch mode {
	case "resolve":
		out := map[string][]string{}
		for _, name := range args {
			addrs, err := net.DefaultResolver.LookupHost(ctx, name)
			if err != nil {
				addrs = []string{"error: " + err.Error()}
			}
			out[name] = addrs
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
		return 0
	case "watch":
		if len(args) != 1 {
			return 2
		}
		first, err := net.DefaultResolver.LookupHost(ctx, args[0])
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println(strings.Join(first, ","))
		start := time.Now()
		for ctx.Err() == nil {
			now, err := net.DefaultResolver.LookupHost(ctx, args[0])
			if err == nil && !slices.Equal(now, first) {
				fmt.Printf("%s after %v\n", strings.Join(now, ","), time.Since(start).Round(time.Millisecond))
				return 0
			}
			time.Sleep(20 * time.Millisecond)
		}
		fmt.Println("no change within 30s")
		return 1
	}
	return 2
}

// requireHosts skips under -short and fails, saying what is missing, when
// the machine cannot run the namespaces.
func requireHosts(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespaces: not under -short")
	}
	if err := Requirements(); err != nil {
		t.Fatalf("%v (CI runs as root, with iproute2 and util-linux installed; `go test -short` skips this package)", err)
	}
}

// helperCmd runs this test binary as a helper in namespace ns.
func helperCmd(ctx context.Context, ns *Namespace, mode string, args ...string) *exec.Cmd {
	self, _ := os.Executable()
	cmd := ns.Command(ctx, self, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+mode)
	return cmd
}

// TestNetwork checks the machinery the cluster tests stand on, with no
// holdfast process: the delay proxy's round trip (measured against the
// direct one) and byte order, that a proxy refuses while its target does,
// that a cut link stops traffic and a restored one carries it again, that
// Go's resolver in a namespace returns every address of a name listed on
// several lines of the namespace's hosts file, and how long it takes to
// see the file rewritten in place.
func TestNetwork(t *testing.T) {
	requireHosts(t)
	nw := NewNetwork(t, 2)
	h0, h1, sw := nw.Hosts[0], nw.Hosts[1], nw.Switch
	echoAddr := netip.AddrPortFrom(h1.Addr(), 7000).String()
	ln, err := h1.Listen(echoAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go ServeEcho(ln)
	d, err := nw.Allocate()
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.AddAddr(d); err != nil {
		t.Fatal(err)
	}
	proxyAddr := netip.AddrPortFrom(d, 7000).String()
	px, err := NewProxy(sw, proxyAddr, sw, echoAddr, DefaultDelay())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	harness.Eventually(t, 10*time.Second, "the proxy to listen", func() error {
		if !px.Up() {
			return errors.New("down")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	measure := func(addr string) RTT {
		c, err := h0.DialContext(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r, err := MeasureRTT(c, 300)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	direct, proxied := measure(echoAddr), measure(proxyAddr)
	t.Logf("host to host round trip, 1 byte, direct:        %v", direct)
	t.Logf("host to host round trip, 1 byte, through proxy: %v (delay %v each way)", proxied, DefaultDelay())
	if proxied.Min < 2*(DefaultDelay().Mean-DefaultDelay().Jitter) {
		t.Errorf("a round trip through the proxy took %v, less than twice the least delay", proxied.Min)
	}
	if proxied.P50 > 25*time.Millisecond {
		t.Errorf("the proxy's median round trip is %v: far above 2 ms", proxied.P50)
	}

	// Bytes arrive in order and complete through the delay, both ways.
	c, err := h0.DialContext(ctx, proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 4<<20)
	_, _ = rand.Read(payload)
	go func() { _, _ = c.Write(payload); _ = c.(*net.TCPConn).CloseWrite() }()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("4 MiB through the proxy and the echo: %d bytes back, equal %v, err %v", len(got), bytes.Equal(got, payload), err)
	}

	// Nothing listening behind the proxy: it refuses as the host would.
	ln.Close()
	c, err = h0.DialContext(ctx, proxyAddr)
	if err == nil {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, rerr := c.Read(make([]byte, 1))
		c.Close()
		if rerr == nil {
			t.Fatal("read through a proxy whose target is gone succeeded")
		}
	}
	harness.Eventually(t, 5*time.Second, "the proxy to refuse like its target", func() error {
		c, err := h0.DialContext(ctx, proxyAddr)
		if err == nil {
			c.Close()
			return errors.New("still accepting")
		}
		return nil
	})
	ln2, err := h1.Listen(echoAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	go ServeEcho(ln2)
	harness.Eventually(t, 5*time.Second, "the proxy to listen again", func() error {
		if !px.Up() {
			return errors.New("down")
		}
		return nil
	})

	// A cut host reaches nobody; restored, it does again.
	if err := h0.SetLink(false); err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	if c, err := h0.DialContext(sctx, echoAddr); err == nil {
		c.Close()
		t.Error("a cut host connected to another")
	}
	scancel()
	if err := h0.SetLink(true); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 10*time.Second, "the restored host to connect", func() error {
		sctx, scancel := context.WithTimeout(ctx, time.Second)
		defer scancel()
		c, err := h0.DialContext(sctx, proxyAddr)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = MeasureRTT(c, 1)
		return err
	})

	// Go's resolver: all addresses of a name on several lines, and a
	// rewrite in place.
	name := "svc.example.internal"
	a1, a2, a3 := nw.hostAddr(201), nw.hostAddr(202), nw.hostAddr(203)
	hosts := fmt.Sprintf("127.0.0.1\tlocalhost\n%s\t%s\n%s\t%s\n", a1, name, a2, name)
	if err := h0.WriteEtc("hosts", hosts); err != nil {
		t.Fatal(err)
	}
	out, err := helperCmd(ctx, h0, "resolve", name).Output()
	if err != nil {
		t.Fatalf("resolve in %s: %v", h0, err)
	}
	var res map[string][]string
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if want := []string{a1.String(), a2.String()}; !slices.Equal(res[name], want) {
		t.Fatalf("Go's resolver in %s gives %v for a name on two lines, want %v", h0, res[name], want)
	}
	t.Logf("Go's resolver in a namespace gives every line's address of a name: %v", res[name])
	watch := helperCmd(ctx, h0, "watch", name)
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufioReader(stdout)
	if line, err := rd(); err != nil || line != a1.String()+","+a2.String() {
		t.Fatalf("the watcher first saw %q (%v)", line, err)
	}
	if err := h0.WriteEtc("hosts", hosts+fmt.Sprintf("%s\t%s\n", a3, name)); err != nil {
		t.Fatal(err)
	}
	line, err := rd()
	_ = watch.Wait()
	if err != nil || !strings.HasPrefix(line, a1.String()+","+a2.String()+","+a3.String()+" after ") {
		t.Fatalf("after the rewrite the watcher said %q (%v)", line, err)
	}
	t.Logf("a hosts file rewritten in place was seen by Go's resolver: %s", line)
}

// bufioReader returns a function reading r line by line.
func bufioReader(r io.Reader) func() (string, error) {
	var buf []byte
	one := make([]byte, 1)
	return func() (string, error) {
		buf = buf[:0]
		for {
			n, err := r.Read(one)
			if n == 1 {
				if one[0] == '\n' {
					return string(buf), nil
				}
				buf = append(buf, one[0])
			}
			if err != nil {
				return string(buf), err
			}
		}
	}
}

// newDeployment makes the StatefulSet of the built binary on n hosts (not
// started).
func newDeployment(t *testing.T, n int) *Deployment {
	t.Helper()
	requireHosts(t)
	d := NewDeployment(t, Options{Binary: env.Binary, Replicas: n})
	t.Logf("%d hosts in %s (switch %s), delay %v each way; the container's command line: %q",
		n, d.Net.Subnet, d.Net.Switch.Name, d.opts.Delay, append(d.Workload.Container().Command, d.Workload.Container().Args...))
	t.Logf("/etc/hosts of %s's host:\n%s", d.Pods[0].Name, d.HostsFile(0))
	return d
}

// all is every pod's ordinal.
func all(d *Deployment) []int {
	out := make([]int, len(d.Pods))
	for i := range out {
		out[i] = i
	}
	return out
}

// without is ords without x.
func without(ords []int, x int) []int {
	return slices.DeleteFunc(slices.Clone(ords), func(i int) bool { return i == x })
}

// agree checks that every pod of ords is ready and a member, that they
// name one leader among them, and that each lists all the StatefulSet's
// pods as voters (each at its DNS name) and nothing else. It returns the
// leader's ordinal.
func agree(ctx context.Context, d *Deployment, ords []int) (int, error) {
	if err := d.CheckPods(); err != nil {
		return -1, err
	}
	leader := ""
	for _, i := range ords {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		s, err := d.Status(rctx, i, false)
		cancel()
		if err != nil {
			return -1, err
		}
		name := d.Pods[i].Name
		switch {
		case s.NodeID != name:
			return -1, fmt.Errorf("%s reports node_id %q", name, s.NodeID)
		case !s.Formed || !s.Ready || !s.IsMember:
			return -1, fmt.Errorf("%s: formed=%v ready=%v member=%v state=%s", name, s.Formed, s.Ready, s.IsMember, s.State)
		case s.LeaderID == "":
			return -1, fmt.Errorf("%s knows no leader", name)
		case leader != "" && s.LeaderID != leader:
			return -1, fmt.Errorf("%s names leader %s, another names %s", name, s.LeaderID, leader)
		}
		leader = s.LeaderID
		var voters []string
		for _, m := range s.Nodes {
			j := slices.IndexFunc(d.Pods, func(p *Pod) bool { return p.Name == m.ID })
			if j < 0 || !m.Voter {
				return -1, fmt.Errorf("%s lists %+v, not a voter of the StatefulSet", name, m)
			}
			if host, _, _ := net.SplitHostPort(m.RaftAddr); m.HTTPAddr != d.PodAddr(j) || host != d.Workload.PodFQDN(j) {
				return -1, fmt.Errorf("%s lists %s at %s (raft %s), want its DNS name %s", name, m.ID, m.HTTPAddr, m.RaftAddr, d.PodAddr(j))
			}
			voters = append(voters, m.ID)
		}
		slices.Sort(voters)
		var want []string
		for _, p := range d.Pods {
			want = append(want, p.Name)
		}
		if !slices.Equal(voters, want) {
			return -1, fmt.Errorf("%s lists voters %v, want %v", name, voters, want)
		}
	}
	l := slices.IndexFunc(d.Pods, func(p *Pod) bool { return p.Name == leader })
	if !slices.Contains(ords, l) {
		return -1, fmt.Errorf("the leader %s is not among %v", leader, ords)
	}
	return l, nil
}

// waitAgree polls agree until it holds or timeout passes.
func waitAgree(t *testing.T, d *Deployment, ords []int, timeout time.Duration, what string) int {
	t.Helper()
	leader := -1
	harness.Eventually(t, timeout, what, func() error {
		var err error
		leader, err = agree(context.Background(), d, ords)
		return err
	})
	return leader
}

// waitProcesses waits until every running pod has exec'd the container's
// command and checks its argv, environment and identity.
func waitProcesses(t *testing.T, d *Deployment, ords []int) {
	t.Helper()
	for _, i := range ords {
		harness.Eventually(t, 20*time.Second, d.Pods[i].Name+" to run the container's command line", d.Pods[i].CheckProcess)
	}
}

// apiBody is the union of the answer fields the tests read.
type apiBody struct {
	Outcome     string          `json:"outcome"`
	Namespace   string          `json:"namespace"`
	Status      string          `json:"status"`
	OwnerToken  string          `json:"owner_token"`
	Result      json.RawMessage `json:"result"`
	QueueID     string          `json:"queue_id"`
	WriteToken  string          `json:"write_token"`
	WorkerToken string          `json:"worker_token"`
	ReadToken   string          `json:"read_token"`
	Job         *struct {
		JobID  string `json:"job_id"`
		JobKey string `json:"job_key"`
	} `json:"job"`
}

// answer is one API answer, or the error that replaced it.
type answer struct {
	Status int
	Body   apiBody
	Raw    []byte
	Err    error
}

// String is the answer or its error, for messages.
func (a answer) String() string {
	if a.Err != nil {
		return a.Err.Error()
	}
	return fmt.Sprintf("HTTP %d %.300s", a.Status, a.Raw)
}

// Outcome classes of an answer, as a client must count them.
const (
	definite   = "definite"    // the service said what happened
	notApplied = "not_applied" // nothing happened: never sent, or 503 not_applied, or 429
	unknown    = "unknown"     // it may have happened
)

func (a answer) class() string {
	if a.Err != nil {
		var op *net.OpError
		if errors.As(a.Err, &op) && op.Op == "dial" {
			return notApplied
		}
		return unknown
	}
	switch {
	case a.Status == http.StatusServiceUnavailable && a.Body.Outcome == "not_applied",
		a.Status == http.StatusInsufficientStorage && a.Body.Outcome == "not_applied",
		a.Status == http.StatusTooManyRequests:
		return notApplied
	case a.Status >= 500:
		return unknown
	}
	return definite
}

// call sends one API request from the client host to addr, bounded by
// timeout.
func call(ctx context.Context, d *Deployment, addr, method, path string, body any, bearer string, timeout time.Duration) answer {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h := http.Header{}
	if bearer != "" {
		h.Set("Authorization", "Bearer "+bearer)
	}
	r, err := d.Do(ctx, method, addr, path, body, h)
	if err != nil {
		return answer{Err: err}
	}
	a := answer{Status: r.Status, Raw: r.Body}
	if len(r.Body) > 0 {
		if err := json.Unmarshal(r.Body, &a.Body); err != nil {
			a.Err = fmt.Errorf("decode HTTP %d %.200q: %w", r.Status, r.Body, err)
		}
	}
	return a
}

// until repeats f (an attempt) while its answer is not definite, pausing
// briefly, until ctx ends; it returns the last answer.
func until(ctx context.Context, f func() answer) answer {
	for {
		a := f()
		if a.class() == definite || ctx.Err() != nil {
			return a
		}
		select {
		case <-ctx.Done():
			return a
		case <-time.After(50 * time.Millisecond):
		}
	}
}

const api = "/services/v1"

// queue is a queue's id and tokens.
type queue struct{ id, write, worker, read string }

// createQueue creates a queue through addr, retrying until it is created.
func createQueue(ctx context.Context, d *Deployment, addr string) (queue, error) {
	a := until(ctx, func() answer {
		return call(ctx, d, addr, http.MethodPost, api+"/queue", map[string]any{}, "", 5*time.Second)
	})
	if a.Status != http.StatusCreated || a.Body.QueueID == "" {
		return queue{}, fmt.Errorf("create a queue: %s", a)
	}
	return queue{a.Body.QueueID, a.Body.WriteToken, a.Body.WorkerToken, a.Body.ReadToken}, nil
}

// enqueue enqueues key (payload {"key": key}) through addr, repeating
// after an unknown outcome (an enqueue is repeat-safe), and returns the
// job id.
func enqueue(ctx context.Context, d *Deployment, addr string, q queue, key string, timeout time.Duration) (string, answer) {
	a := until(ctx, func() answer {
		return call(ctx, d, addr, http.MethodPost, api+"/queue/"+q.id+"/jobs", map[string]any{"job_key": key, "payload": map[string]any{"key": key}}, q.write, timeout)
	})
	if (a.Status == http.StatusCreated || a.Status == http.StatusOK) && a.Body.Job != nil {
		return a.Body.Job.JobID, a
	}
	return "", a
}

// readJobStale reads a job from addr's local state (?stale=true).
func readJobStale(ctx context.Context, d *Deployment, addr string, q queue, jobID string) error {
	a := call(ctx, d, addr, http.MethodGet, api+"/queue/"+q.id+"/jobs/"+jobID+"?stale=true", nil, q.read, 3*time.Second)
	if a.Status != http.StatusOK || a.Body.Job == nil || a.Body.Job.JobID != jobID {
		return fmt.Errorf("job %s on %s: %s", jobID, addr, a)
	}
	return nil
}

// clusterKeyHeader carries the cluster key.
const clusterKeyHeader = "X-Holdfast-Cluster-Key"

// raiseQueueQuota lets one client address create many queues (every
// request from the client host reaches the pods from a proxy's address).
func raiseQueueQuota(t *testing.T, d *Deployment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := until(ctx, func() answer {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := d.Do(c, http.MethodPut, d.ServiceAddr(), "/cluster/settings", map[string]any{"queues_per_client": 1000000}, http.Header{clusterKeyHeader: {d.Key}})
		if err != nil {
			return answer{Err: err}
		}
		a := answer{Status: r.Status, Raw: r.Body}
		_ = json.Unmarshal(r.Body, &a.Body)
		return a
	})
	if a.Status != http.StatusOK {
		t.Fatalf("raise queues_per_client: %s", a)
	}
}

// form starts every pod at once and waits until they are one cluster.
func form(t *testing.T, d *Deployment) int {
	t.Helper()
	start := time.Now()
	if err := d.StartAll(); err != nil {
		t.Fatal(err)
	}
	waitProcesses(t, d, all(d))
	leader := waitAgree(t, d, all(d), 90*time.Second, "the pods to form one cluster")
	t.Logf("%d pods started at once formed one cluster in %v: leader %s; each runs %s as uid %d with exactly its argv, environment, identity and mounts",
		len(d.Pods), time.Since(start).Round(time.Millisecond), d.Pods[leader].Name, d.Workload.Container().Command[0], mustIdentity(t, d).UID)
	for _, i := range all(d) {
		harness.Eventually(t, 30*time.Second, d.Pods[i].Name+" to pass its readiness probe", func() error { return d.Ready(context.Background(), i) })
	}
	return leader
}

// httpRTT times GET /healthz from the client host on kept-alive
// connections, through pod 0's proxy (its DNS name) and straight to its
// address, and logs both.
func httpRTT(t *testing.T, d *Deployment) {
	t.Helper()
	measure := func(addr string) RTT {
		var samples []time.Duration
		for range 100 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			r, err := d.Do(ctx, http.MethodGet, addr, "/healthz", nil, nil)
			cancel()
			if err != nil || r.Status != http.StatusOK {
				t.Fatalf("GET /healthz on %s: %v %v", addr, r, err)
			}
			samples = append(samples, time.Since(start))
		}
		return Summarise(samples[1:]) // the first one opened the connection
	}
	t.Logf("GET /healthz from the client host to %s, through its proxy: %v", d.Pods[0].Name, measure(d.PodAddr(0)))
	t.Logf("GET /healthz from the client host to %s, straight to its address: %v", d.Pods[0].Name, measure(d.PodIPAddr(0)))
}

func mustIdentity(t *testing.T, d *Deployment) Identity {
	id, err := d.Workload.Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// cliEnv is the environment of a holdfast command run in the client host:
// the test's own without HOLDFAST_* settings, the client Service as the
// address, the cluster key (operator calls from off the pods' hosts need
// it), and with TLS the CA file (HOLDFAST_CA_FILE: the commands then use
// https).
func cliEnv(d *Deployment) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOLDFAST_") {
			out = append(out, kv)
		}
	}
	out = append(out, "HOLDFAST_ADDR="+d.ServiceAddr(), "HOLDFAST_CLUSTER_KEY="+d.Key)
	if d.opts.CAFile != "" {
		out = append(out, "HOLDFAST_CA_FILE="+d.opts.CAFile)
	}
	return out
}

// clusterStatusCLI runs `holdfast cluster status` in the client host and
// checks the answer (JSON, as its output is not a terminal) lists every pod.
func clusterStatusCLI(t *testing.T, d *Deployment) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := d.Net.Client.Command(ctx, env.Binary, "cluster", "status")
	cmd.Env = cliEnv(d)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("holdfast cluster status in the client host: %v\n%s%s", err, out, stderr.Bytes())
	}
	var s harness.Status
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("holdfast cluster status: %v\n%s", err, out)
	}
	if len(s.Voters()) != len(d.Pods) || s.LeaderID == "" {
		t.Fatalf("holdfast cluster status through %s: voters %v, leader %q", d.ServiceAddr(), s.Voters(), s.LeaderID)
	}
	t.Logf("holdfast cluster status through %s (answered by %s): voters %v, leader %s", d.ServiceAddr(), s.NodeID, s.Voters(), s.LeaderID)
}

// quickStart runs the README's quick start as a user pastes it (as
// TestReadmeQuickStart does on loopback), in the client host, against the
// client Service's name.
func quickStart(t *testing.T, d *Deployment) {
	t.Helper()
	script, err := harness.QuickStartScript(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(env.Binary, filepath.Join(dir, "holdfast")); err != nil {
		t.Fatal(err)
	}
	body := strings.ReplaceAll(script, "127.0.0.1:7070", d.ServiceAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	began := time.Now()
	cmd := d.Net.Client.Command(ctx, "sh", "-c", body)
	cmd.Dir = dir
	cmd.Env = cliEnv(d)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the quick start failed in the client host: %v\nscript:\n%s\noutput:\n%s", err, body, out)
	}
	for _, want := range []string{
		"HTTP 201 Created", `"status":"held"`, "exit 3", `{"receipt_id":4817}`, "completed", "fence ", "<- job ", "acknowledged job",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, out)
		}
	}
	t.Logf("the README's quick start passed in the client host against %s in %v",
		d.ServiceAddr(), time.Since(began).Round(time.Millisecond))
}

// TestHostsThreeNodes runs the three-pod StatefulSet on three hosts: it
// forms from a parallel start, serves the README's quick start through the
// client Service, survives a rolling restart under load without losing an
// acknowledged job or lease, takes back a pod on a new IP and a pod with an
// empty volume, and rides out its leader's and a follower's host being cut
// off.
func TestHostsThreeNodes(t *testing.T) {
	d := newDeployment(t, 3)
	form(t, d)
	httpRTT(t, d)
	if !t.Run("quick start", func(t *testing.T) {
		clusterStatusCLI(t, d)
		quickStart(t, d)
	}) {
		return
	}
	if !t.Run("rolling restart under load", func(t *testing.T) {
		ld := newLoader(t, d, 4, 2)
		rollingRestart(t, d, ld)
		ld.pause(time.Second)
		ld.verify(t)
	}) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q, err := createQueue(ctx, d, d.ServiceAddr())
	if err != nil {
		t.Fatal(err)
	}
	before, a := enqueue(ctx, d, d.ServiceAddr(), q, "before", 5*time.Second)
	if before == "" {
		t.Fatalf("enqueue: %s", a)
	}
	moved := -1
	if !t.Run("new IP", func(t *testing.T) { moved = newIP(t, d, q) }) {
		return
	}
	if !t.Run("empty volume", func(t *testing.T) { emptyVolume(t, d, q, before, moved) }) {
		return
	}
	if !t.Run("host cut off", func(t *testing.T) {
		leader, err := leaderOf(d, all(d))
		if err != nil {
			t.Fatal(err)
		}
		cutHosts(t, d, []int{leader}, q)
		cutHosts(t, d, []int{aFollower(t, d, all(d))}, q)
	}) {
		return
	}
	converge(t, d)
}

// loader is a client in the client host that keeps enqueueing jobs with
// unique keys and acquiring and completing leases through the client
// Service, and records every write the service acknowledged. An answer
// whose outcome is unknown (a broken connection, a 5xx) is retried, as the
// README allows for enqueues and for acquires with a request id; such a
// write counts as acknowledged only once an answer says so.
type loader struct {
	d    *Deployment
	addr string
	ns   string // lease namespace
	stop chan struct{}
	wg   sync.WaitGroup

	mu        sync.Mutex
	jobs      map[string]jobRef // acknowledged enqueues by job key
	uncertain map[string]bool   // keys tried without an acknowledgement
	leases    map[string]string // completed leases: key → result
	queues    []queue
	classes   map[string]int // answers by outcome class
	failures  []string       // definite answers no write should get
}

type jobRef struct {
	queue int
	id    string
}

// newLoader starts workers enqueueing (each into its own queue, a new one
// every 90 keys: a queue takes 100 distinct jobs) and working leases.
func newLoader(t *testing.T, d *Deployment, enqueuers, leasers int) *loader {
	t.Helper()
	raiseQueueQuota(t, d)
	ld := &loader{d: d, addr: d.ServiceAddr(), stop: make(chan struct{}),
		jobs: map[string]jobRef{}, uncertain: map[string]bool{}, leases: map[string]string{}, classes: map[string]int{}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := until(ctx, func() answer {
		return call(ctx, d, ld.addr, http.MethodPost, api+"/lease/namespace", map[string]any{}, "", 5*time.Second)
	})
	if a.Body.Namespace == "" {
		t.Fatalf("mint a lease namespace: %s", a)
	}
	ld.ns = a.Body.Namespace
	for w := 0; w < enqueuers; w++ {
		ld.wg.Add(1)
		go ld.enqueuer(w)
	}
	for w := 0; w < leasers; w++ {
		ld.wg.Add(1)
		go ld.leaser(w)
	}
	t.Cleanup(ld.halt)
	return ld
}

func (ld *loader) stopped() bool {
	select {
	case <-ld.stop:
		return true
	default:
		return false
	}
}

// halt stops the workers and waits for them.
func (ld *loader) halt() {
	ld.mu.Lock()
	select {
	case <-ld.stop:
	default:
		close(ld.stop)
	}
	ld.mu.Unlock()
	ld.wg.Wait()
}

// attempt sends one request and counts its class; it stops repeating once
// the loader is stopped.
func (ld *loader) attempt(method, path string, body any, bearer string) answer {
	a := call(context.Background(), ld.d, ld.addr, method, path, body, bearer, 10*time.Second)
	ld.mu.Lock()
	ld.classes[a.class()]++
	ld.mu.Unlock()
	return a
}

func (ld *loader) fail(format string, args ...any) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if len(ld.failures) < 20 {
		ld.failures = append(ld.failures, fmt.Sprintf(format, args...))
	}
}

func (ld *loader) pause(d time.Duration) bool {
	select {
	case <-ld.stop:
		return false
	case <-time.After(d):
		return true
	}
}

func (ld *loader) newQueue() (int, bool) {
	for !ld.stopped() {
		a := ld.attempt(http.MethodPost, api+"/queue", map[string]any{}, "")
		if a.Status == http.StatusCreated && a.Body.QueueID != "" {
			ld.mu.Lock()
			defer ld.mu.Unlock()
			ld.queues = append(ld.queues, queue{a.Body.QueueID, a.Body.WriteToken, a.Body.WorkerToken, a.Body.ReadToken})
			return len(ld.queues) - 1, true
		}
		if a.class() == definite {
			ld.fail("create a queue: %s", a)
		}
		ld.pause(100 * time.Millisecond)
	}
	return 0, false
}

func (ld *loader) enqueuer(w int) {
	defer ld.wg.Done()
	qi, ok := ld.newQueue()
	for i := 0; ok && !ld.stopped(); i++ {
		if i > 0 && i%90 == 0 {
			if qi, ok = ld.newQueue(); !ok {
				return
			}
		}
		ld.mu.Lock()
		q := ld.queues[qi]
		ld.mu.Unlock()
		key := fmt.Sprintf("e%d-%06d", w, i)
		for {
			a := ld.attempt(http.MethodPost, api+"/queue/"+q.id+"/jobs", map[string]any{"job_key": key, "payload": map[string]any{"key": key}}, q.write)
			if (a.Status == http.StatusCreated || a.Status == http.StatusOK) && a.Body.Job != nil {
				ld.mu.Lock()
				ld.jobs[key] = jobRef{qi, a.Body.Job.JobID}
				delete(ld.uncertain, key)
				ld.mu.Unlock()
				break
			}
			if a.class() == definite {
				ld.fail("enqueue %s: %s", key, a)
				break
			}
			ld.mu.Lock()
			if a.class() == unknown {
				ld.uncertain[key] = true
			}
			ld.mu.Unlock()
			if !ld.pause(50 * time.Millisecond) {
				return
			}
		}
		ld.pause(5 * time.Millisecond)
	}
}

// leaser acquires a new key (with a request id, so an acquire whose answer
// was lost is answered again), completes it with a result, and records the
// lease once the completion is acknowledged.
func (ld *loader) leaser(w int) {
	defer ld.wg.Done()
	for i := 0; !ld.stopped(); i++ {
		key := fmt.Sprintf("l%d-%06d", w, i)
		var rid [24]byte
		_, _ = rand.Read(rid[:])
		acquire := map[string]any{"namespace": ld.ns, "key": key, "fingerprint": "fp-" + key, "ttl_seconds": 60, "request_id": fmt.Sprintf("%x", rid)}
		var token string
		for token == "" {
			a := ld.attempt(http.MethodPost, api+"/lease", acquire, "")
			switch {
			case a.Status == http.StatusCreated && a.Body.OwnerToken != "":
				token = a.Body.OwnerToken
			case a.class() == definite:
				ld.fail("acquire %s: %s", key, a)
				return
			case !ld.pause(50 * time.Millisecond):
				return
			}
		}
		result := fmt.Sprintf(`{"n":%d}`, i)
		for done := false; !done; {
			a := ld.attempt(http.MethodPost, api+"/lease/complete", map[string]any{"namespace": ld.ns, "key": key, "owner_token": token, "result": json.RawMessage(result)}, "")
			switch {
			case a.Status == http.StatusOK && a.Body.Status == "completed":
				done = true
			case a.Status == http.StatusConflict && a.Body.Status == "lost":
				// An earlier complete whose answer was lost may have done it:
				// the key's stored result says.
				b := ld.attempt(http.MethodPost, api+"/lease", map[string]any{"namespace": ld.ns, "key": key, "fingerprint": "fp-" + key}, "")
				if b.Status == http.StatusOK && b.Body.Status == "completed" && string(b.Body.Result) == result {
					done = true
				} else {
					ld.fail("complete %s: lost, and the key answers %s", key, b)
					return
				}
			case a.class() == definite:
				ld.fail("complete %s: %s", key, a)
				return
			case !ld.pause(50 * time.Millisecond):
				return
			}
		}
		ld.mu.Lock()
		ld.leases[key] = result
		ld.mu.Unlock()
		ld.pause(5 * time.Millisecond)
	}
}

// counts returns the acknowledged jobs and leases so far.
func (ld *loader) counts() (jobs, leases int) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return len(ld.jobs), len(ld.leases)
}

// verify stops the loader and checks that every acknowledged job is in its
// queue (by claiming every job of every queue: each claimed job must have
// been acknowledged or at least tried) and every completed lease gives its
// stored result.
func (ld *loader) verify(t *testing.T) {
	t.Helper()
	ld.halt()
	ld.mu.Lock()
	defer ld.mu.Unlock()
	for _, f := range ld.failures {
		t.Errorf("loader: %s", f)
	}
	t.Logf("loader: %d jobs and %d leases acknowledged, %d enqueues without an answer saying so, %d queues; answers %v",
		len(ld.jobs), len(ld.leases), len(ld.uncertain), len(ld.queues), ld.classes)
	if len(ld.jobs) == 0 || len(ld.leases) == 0 {
		t.Fatal("the loader got no write acknowledged")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	type claimed struct {
		queue int
		keys  []string
		err   error
	}
	results := make(chan claimed, len(ld.queues))
	sem := make(chan struct{}, 8)
	for qi, q := range ld.queues {
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			c := claimed{queue: qi}
			for ctx.Err() == nil {
				var rid [24]byte
				_, _ = rand.Read(rid[:])
				body := map[string]any{"visibility_timeout": 600, "request_id": fmt.Sprintf("%x", rid)}
				a := until(ctx, func() answer {
					return call(ctx, ld.d, ld.addr, http.MethodPost, api+"/queue/"+q.id+"/claim", body, q.worker, 10*time.Second)
				})
				if a.Status != http.StatusOK {
					c.err = fmt.Errorf("claim from queue %d: %s", qi, a)
					break
				}
				if a.Body.Job == nil {
					break
				}
				c.keys = append(c.keys, a.Body.Job.JobKey)
			}
			if c.err == nil && ctx.Err() != nil {
				c.err = ctx.Err()
			}
			results <- c
		}()
	}
	found := map[string]int{} // key → queue
	for range ld.queues {
		c := <-results
		if c.err != nil {
			t.Fatal(c.err)
		}
		for _, k := range c.keys {
			if q, dup := found[k]; dup {
				t.Errorf("job %s claimed twice (queues %d and %d) within its visibility", k, q, c.queue)
			}
			found[k] = c.queue
		}
	}
	lost := 0
	for k, ref := range ld.jobs {
		if q, ok := found[k]; !ok || q != ref.queue {
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged job %s (queue %d, id %s) is not in its queue", k, ref.queue, ref.id)
			}
		}
	}
	extra := 0
	for k := range found {
		if _, ok := ld.jobs[k]; !ok {
			if !ld.uncertain[k] {
				t.Errorf("job %s is in a queue but was never acknowledged nor left uncertain", k)
			}
			extra++
		}
	}
	t.Logf("claimed all %d jobs of %d queues: every one of the %d acknowledged jobs is there (%d lost), and %d of the %d enqueues left without an acknowledgement landed",
		len(found), len(ld.queues), len(ld.jobs), lost, extra, len(ld.uncertain))
	// Leases: the stored result of each completed key.
	keys := make(chan string)
	var lmu sync.Mutex
	var bad []string
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				a := until(ctx, func() answer {
					return call(ctx, ld.d, ld.addr, http.MethodPost, api+"/lease", map[string]any{"namespace": ld.ns, "key": k, "fingerprint": "fp-" + k}, "", 10*time.Second)
				})
				if a.Status != http.StatusOK || a.Body.Status != "completed" || string(a.Body.Result) != ld.leases[k] {
					lmu.Lock()
					bad = append(bad, fmt.Sprintf("%s: want result %s, got %s", k, ld.leases[k], a))
					lmu.Unlock()
				}
			}
		}()
	}
	for k := range ld.leases {
		keys <- k
	}
	close(keys)
	wg.Wait()
	for i, b := range bad {
		if i < 10 {
			t.Errorf("completed lease %s", b)
		}
	}
	t.Logf("every one of the %d completed leases answers its stored result (%d do not)", len(ld.leases), len(bad))
}

// rollingRestart restarts the pods one at a time, highest ordinal first,
// as the StatefulSet controller rolls an update: SIGTERM, wait for the
// exit, start on the same volume, wait for the readiness probe to pass on
// the pod's own address, then the next.
func rollingRestart(t *testing.T, d *Deployment, ld *loader) {
	t.Helper()
	harness.Eventually(t, 30*time.Second, "the loader to get writes acknowledged", func() error {
		if j, l := ld.counts(); j < 50 || l < 10 {
			return fmt.Errorf("%d jobs and %d leases acknowledged", j, l)
		}
		return nil
	})
	for i := len(d.Pods) - 1; i >= 0; i-- {
		p := d.Pods[i]
		j0, l0 := ld.counts()
		t0 := time.Now()
		exit, err := p.Stop()
		if err != nil {
			t.Fatal(err)
		}
		stopped := time.Since(t0)
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		harness.Eventually(t, 90*time.Second, p.Name+" to pass its readiness probe after a restart", func() error {
			if err := p.Unexpected(); err != nil {
				return err
			}
			return d.Ready(context.Background(), i)
		})
		j1, l1 := ld.counts()
		t.Logf("rolled %s: SIGTERM to exit %v (%s), start to ready %v; %d jobs and %d leases acknowledged meanwhile",
			p.Name, stopped.Round(time.Millisecond), exit, (time.Since(t0) - stopped).Round(time.Millisecond), j1-j0, l1-l0)
	}
	waitProcesses(t, d, all(d))
	waitAgree(t, d, all(d), 60*time.Second, "the cluster to settle after the rolling restart")
}

// leaderOf asks the pods of ords (skipping any that do not answer) which
// pod leads.
func leaderOf(d *Deployment, ords []int) (int, error) {
	var errs []error
	for _, i := range ords {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		s, err := d.Status(ctx, i, false)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if l := slices.IndexFunc(d.Pods, func(p *Pod) bool { return p.Name == s.LeaderID }); l >= 0 {
			return l, nil
		}
		errs = append(errs, fmt.Errorf("%s knows no leader", d.Pods[i].Name))
	}
	return -1, errors.Join(errs...)
}

// aFollower returns a pod of ords that does not lead.
func aFollower(t *testing.T, d *Deployment, ords []int) int {
	t.Helper()
	l, err := leaderOf(d, ords)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ords {
		if i != l {
			return i
		}
	}
	t.Fatalf("no follower among %v", ords)
	return -1
}

// writeThrough enqueues key through pod i's DNS name, within timeout.
func writeThrough(d *Deployment, i int, q queue, key string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	id, a := enqueue(ctx, d, d.PodAddr(i), q, key, 3*time.Second)
	if id == "" {
		return "", fmt.Errorf("enqueue %s through %s: %s", key, d.Pods[i].Name, a)
	}
	return id, nil
}

// replicatedTo waits until pod i's own state holds the job.
func replicatedTo(t *testing.T, d *Deployment, i int, q queue, jobID string, timeout time.Duration, what string) {
	t.Helper()
	harness.Eventually(t, timeout, what, func() error {
		if err := d.Pods[i].Unexpected(); err != nil {
			return err
		}
		return readJobStale(context.Background(), d, d.PodAddr(i), q, jobID)
	})
}

// newIP stops a follower, gives its host a new address (and the proxy in
// front of it a new one), rewrites every hosts file in place and starts
// it: it must serve again, a write through it reaching the leader and
// coming back to it.
func newIP(t *testing.T, d *Deployment, q queue) int {
	k := aFollower(t, d, all(d))
	p := d.Pods[k]
	t0 := time.Now()
	if _, err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(t0)
	oldA, oldD := p.Host.Addr(), d.DelayAddr(k)
	if _, _, err := d.Move(k); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s stopped (SIGTERM to exit %v) and moved from %s (reached at %s) to %s (reached at %s); every hosts file rewritten in place",
		p.Name, stopped.Round(time.Millisecond), oldA, oldD, p.Host.Addr(), d.DelayAddr(k))
	start := time.Now()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	const bound = 60 * time.Second
	harness.Eventually(t, bound, p.Name+" on its new address to pass its readiness probe", func() error {
		if err := p.Unexpected(); err != nil {
			return err
		}
		return d.Ready(context.Background(), k)
	})
	ready := time.Since(start)
	var jobID string
	harness.Eventually(t, bound-ready, "a write through "+p.Name+" on its new address", func() error {
		var err error
		jobID, err = writeThrough(d, k, q, "moved-"+p.Name, 3*time.Second)
		return err
	})
	wrote := time.Since(start)
	replicatedTo(t, d, k, q, jobID, bound-wrote, "the write to come back to "+p.Name+" from the leader")
	back := time.Since(start)
	leader := waitAgree(t, d, all(d), bound-back, "every pod to list "+p.Name+" and agree on the leader")
	t.Logf("%s on its new IP: ready %v after its start, a write through it %v, replicated back to it %v, all agree (leader %s) %v",
		p.Name, ready.Round(time.Millisecond), wrote.Round(time.Millisecond), back.Round(time.Millisecond), d.Pods[leader].Name, time.Since(start).Round(time.Millisecond))
	return k
}

// emptyVolume stops a follower (another than avoid, if it can), empties
// its volume and starts it: it must join again as the same member and
// catch up, serving what was written before.
func emptyVolume(t *testing.T, d *Deployment, q queue, before string, avoid int) {
	k := aFollower(t, d, without(all(d), avoid))
	p := d.Pods[k]
	t0 := time.Now()
	if _, err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(t0)
	if err := p.Wipe(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 60*time.Second, p.Name+" with an empty volume to pass its readiness probe", func() error {
		if err := p.Unexpected(); err != nil {
			return err
		}
		return d.Ready(context.Background(), k)
	})
	ready := time.Since(start)
	replicatedTo(t, d, k, q, before, 60*time.Second, p.Name+" to serve a job written before its volume was emptied")
	caught := time.Since(start)
	leader := waitAgree(t, d, all(d), 60*time.Second, p.Name+" to be a voter again")
	t.Logf("%s (SIGTERM to exit %v) with an empty volume: ready %v after its start, serving the earlier job from its own state %v, all agree on %d voters (leader %s) %v",
		p.Name, stopped.Round(time.Millisecond), ready.Round(time.Millisecond), caught.Round(time.Millisecond), len(d.Pods), d.Pods[leader].Name, time.Since(start).Round(time.Millisecond))
}

// cutHosts takes the hosts of the pods cut off the network: the others
// (a majority) must keep taking writes, electing a leader among them if
// the leader was cut; with their links back, the cut pods must rejoin and
// catch up on what was written without them.
func cutHosts(t *testing.T, d *Deployment, cut []int, q queue) {
	survivors := slices.DeleteFunc(all(d), func(i int) bool { return slices.Contains(cut, i) })
	before, err := leaderOf(d, all(d))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range cut {
		role := "a follower"
		if i == before {
			role = "the leader"
		}
		names = append(names, fmt.Sprintf("%s (%s)", d.Pods[i].Name, role))
	}
	what := strings.Join(names, " and ")
	start := time.Now()
	restored := map[int]bool{}
	defer func() {
		for _, i := range cut {
			if !restored[i] {
				_ = d.Pods[i].Host.SetLink(true)
			}
		}
	}()
	for _, i := range cut {
		if err := d.Pods[i].Host.SetLink(false); err != nil {
			t.Fatal(err)
		}
	}
	var jobID string
	n := 0
	harness.Eventually(t, 60*time.Second, "a write through the other pods while "+what+" are cut off", func() error {
		s := survivors[n%len(survivors)]
		n++
		var err error
		jobID, err = writeThrough(d, s, q, fmt.Sprintf("cut-%d", start.UnixNano()), 3*time.Second)
		return err
	})
	wrote := time.Since(start)
	leader := waitAgree(t, d, survivors, 60*time.Second, "the other pods to agree on a leader among them")
	t.Logf("cut off the host of %s: a write through the others acknowledged %v after the cut; leader %s (was %s)",
		what, wrote.Round(time.Millisecond), d.Pods[leader].Name, d.Pods[before].Name)
	back := time.Now()
	for _, i := range cut {
		if err := d.Pods[i].Host.SetLink(true); err != nil {
			t.Fatal(err)
		}
		restored[i] = true
	}
	for _, i := range cut {
		replicatedTo(t, d, i, q, jobID, 60*time.Second, d.Pods[i].Name+" back on the network to catch up")
	}
	caught := time.Since(back)
	leader = waitAgree(t, d, all(d), 60*time.Second, "every pod to agree again once "+what+" came back")
	t.Logf("links back up: the write made without %s is in their own state %v later; all agree on leader %s after %v",
		what, caught.Round(time.Millisecond), d.Pods[leader].Name, time.Since(back).Round(time.Millisecond))
}

// converge waits until every pod reports the same state hash at the same
// applied index.
func converge(t *testing.T, d *Deployment) {
	t.Helper()
	harness.Eventually(t, 60*time.Second, "every pod to hold the same state", func() error {
		var first harness.Status
		for _, i := range all(d) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			s, err := d.Status(ctx, i, true)
			cancel()
			if err != nil {
				return err
			}
			if i == 0 {
				first = s
				continue
			}
			if s.AppliedIndex != first.AppliedIndex || s.StateHash != first.StateHash {
				return fmt.Errorf("%s at %d has %.12s, %s at %d has %.12s", s.NodeID, s.AppliedIndex, s.StateHash, first.NodeID, first.AppliedIndex, first.StateHash)
			}
		}
		t.Logf("every pod holds state %.16s at index %d", first.StateHash, first.AppliedIndex)
		return nil
	})
}

// TestHostsFiveNodes runs the five-pod StatefulSet: it forms from a
// parallel start, serves the README's quick start through the client
// Service, and rides out its leader's host, a follower's, and then two
// hosts at once (the leader's and a follower's) being cut off.
func TestHostsFiveNodes(t *testing.T) {
	d := newDeployment(t, 5)
	form(t, d)
	if !t.Run("quick start", func(t *testing.T) {
		clusterStatusCLI(t, d)
		quickStart(t, d)
	}) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q, err := createQueue(ctx, d, d.ServiceAddr())
	if err != nil {
		t.Fatal(err)
	}
	if !t.Run("host cut off", func(t *testing.T) {
		leader, err := leaderOf(d, all(d))
		if err != nil {
			t.Fatal(err)
		}
		cutHosts(t, d, []int{leader}, q)
		cutHosts(t, d, []int{aFollower(t, d, all(d))}, q)
		leader, err = leaderOf(d, all(d))
		if err != nil {
			t.Fatal(err)
		}
		cutHosts(t, d, []int{leader, aFollower(t, d, without(all(d), leader))}, q)
	}) {
		return
	}
	converge(t, d)
}

// figureSystem is one cluster the figures measure: how to find, kill and
// bring back its leader, how a client writes to it, how to run the load
// tool against it.
type figureSystem struct {
	name string
	// pids are the node processes, for their CPU time.
	pids    func() []int
	leader  func() (int, error)
	kill    func(i int) error
	restart func(t *testing.T, i int)
	write   func(ctx context.Context, key string) error
	bench   func(ctx context.Context, workload string) (string, error)
	// close stops the cluster, so that the next one measured has the
	// machine to itself.
	close func()
}

// failover kills the leader n times, each time timing from the SIGKILL
// until a write through the client path is acknowledged, then starts the
// killed node again and waits until it is ready and a member before the
// next kill.
func failover(t *testing.T, s figureSystem, n int) []time.Duration {
	var out []time.Duration
	for k := 0; k < n; k++ {
		l, err := s.leader()
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := s.kill(l); err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("failover-%d", k)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var last error
		for ctx.Err() == nil {
			actx, acancel := context.WithTimeout(ctx, time.Second)
			last = s.write(actx, key)
			acancel()
			if last == nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		if last != nil {
			t.Fatalf("%s: no write acknowledged within 60s of killing the leader: %v", s.name, last)
		}
		took := time.Since(start)
		out = append(out, took)
		t.Logf("%s: kill %d of the leader (node %d): a write acknowledged %v later", s.name, k+1, l, took.Round(time.Millisecond))
		s.restart(t, l)
	}
	return out
}

// cpuTime is the user and system CPU time of a process so far.
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 12th and 13th of them, in clock ticks (100 a second).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var u, s int64
	_, _ = fmt.Sscan(f[11], &u)
	_, _ = fmt.Sscan(f[12], &s)
	return time.Duration(u+s) * 10 * time.Millisecond
}

// benchLine runs `holdfast bench` for one workload and returns its result
// line, with the CPU time the nodes and the test process (which runs the
// delay proxies) used meanwhile.
func benchLine(t *testing.T, s figureSystem, workload string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pids := s.pids()
	cpu := func() (nodes, self time.Duration) {
		for _, p := range pids {
			nodes += cpuTime(p)
		}
		return nodes, cpuTime(os.Getpid())
	}
	n0, s0 := cpu()
	out, err := s.bench(ctx, workload)
	n1, s1 := cpu()
	if err != nil {
		t.Fatalf("%s: holdfast bench --workload %s: %v\n%s", s.name, workload, err, out)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "workload=") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("%s: holdfast bench printed no result line:\n%s", s.name, out)
	}
	line += fmt.Sprintf(" node_cpu=%.1fs test_process_cpu=%.1fs", (n1 - n0).Seconds(), (s1 - s0).Seconds())
	t.Logf("%s: %s", s.name, line)
	return line
}

// benchField is one key=value field of a bench result line.
func benchField(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return "?"
}

// figureArgs are the flags both clusters of the figures add: the per
// client address rate limit would measure itself (every load client of
// either cluster comes from one address), as the README's benchmarks note.
func figureArgs() []string { return []string{"--rate-limit=0"} }

// TestHostsFigures prints, for the three-pod StatefulSet on hosts with the
// 2 ms round trip and for three nodes on loopback run by test/harness with
// the same Raft timing, side by side: the time from SIGKILL of the leader
// until a write through the client path is acknowledged (over 10 kills,
// the killed node back and ready before each next kill), and lease and
// queue throughput of `holdfast bench` at 64 clients for 10 s (in the
// client host for the namespaces). Only with HOLDFAST_HOSTS_FIGURES=1; run
// it without -race (the delay proxies run in the test process).
func TestHostsFigures(t *testing.T) {
	if os.Getenv(figuresEnv) == "" {
		t.Skip("figures: set " + figuresEnv + "=1")
	}
	requireHosts(t)
	const kills = 10
	type row struct {
		fail  []time.Duration
		lease string
		queue string
	}
	rows := map[string]row{}
	systems := []func() figureSystem{
		func() figureSystem { return netnsSystem(t, false) },
		func() figureSystem { return netnsSystem(t, true) },
		func() figureSystem { return loopbackSystem(t) },
	}
	var names []string
	for _, mk := range systems {
		s := mk()
		names = append(names, s.name)
		r := row{fail: failover(t, s, kills)}
		r.lease = benchLine(t, s, "lease")
		r.queue = benchLine(t, s, "queue")
		rows[s.name] = r
		s.close()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%-42s", "")
	for _, n := range names {
		fmt.Fprintf(&b, " | %-29s", n)
	}
	line := func(label string, f func(r row) string) {
		fmt.Fprintf(&b, "\n%-42s", label)
		for _, n := range names {
			fmt.Fprintf(&b, " | %-29s", f(rows[n]))
		}
	}
	line(fmt.Sprintf("failover, kill to acknowledged write (%d)", kills), func(r row) string {
		s := Summarise(r.fail)
		return fmt.Sprintf("p50 %v, max %v", s.P50.Round(time.Millisecond), s.Max.Round(time.Millisecond))
	})

	for _, w := range []struct {
		name string
		get  func(r row) string
	}{{"lease", func(r row) string { return r.lease }}, {"queue", func(r row) string { return r.queue }}} {
		line(w.name+" at 64 clients: cycles/s (p50, p99)", func(r row) string {
			l := w.get(r)
			return fmt.Sprintf("%s/s (%s, %s)", benchField(l, "cycles_per_sec"), benchField(l, "p50"), benchField(l, "p99"))
		})
		line("  CPU s: nodes, test process (proxies)", func(r row) string {
			l := w.get(r)
			return fmt.Sprintf("%s, %s", benchField(l, "node_cpu"), benchField(l, "test_process_cpu"))
		})
	}
	for _, n := range names {
		var ms []string
		for _, d := range rows[n].fail {
			ms = append(ms, strconv.FormatInt(d.Milliseconds(), 10))
		}
		fmt.Fprintf(&b, "\nfailover, every kill, %s: %s ms", n, strings.Join(ms, " "))
	}
	t.Log(b.String())
}

// netnsSystem is the three-pod StatefulSet on hosts with the delay, or
// with proxies that add none (a control: what the proxies cost in CPU).
func netnsSystem(t *testing.T, noDelay bool) figureSystem {
	d := NewDeployment(t, Options{Binary: env.Binary, Replicas: 3, ExtraArgs: figureArgs(), NoDelay: noDelay})
	name := "3 pods on hosts, 2 ms RTT"
	if noDelay {
		name = "hosts, proxies without delay"
	}
	form(t, d)
	raiseQueueQuota(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q, err := createQueue(ctx, d, d.ServiceAddr())
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for i := range d.Pods {
		addrs = append(addrs, d.PodAddr(i))
	}
	return figureSystem{
		name: name,
		pids: func() []int {
			var out []int
			for _, p := range d.Pods {
				out = append(out, p.Pid())
			}
			return out
		},
		leader: func() (int, error) { return leaderOf(d, all(d)) },
		kill:   func(i int) error { return d.Pods[i].Kill() },
		restart: func(t *testing.T, i int) {
			if err := d.Pods[i].Start(); err != nil {
				t.Fatal(err)
			}
			harness.Eventually(t, 60*time.Second, d.Pods[i].Name+" to be ready again", func() error { return d.Ready(context.Background(), i) })
			waitAgree(t, d, all(d), 60*time.Second, "every pod to agree again")
		},
		write: func(ctx context.Context, key string) error {
			a := call(ctx, d, d.ServiceAddr(), http.MethodPost, api+"/queue/"+q.id+"/jobs", map[string]any{"job_key": key, "payload": map[string]any{"key": key}}, q.write, time.Second)
			if a.Status == http.StatusCreated || a.Status == http.StatusOK {
				return nil
			}
			return errors.New(a.String())
		},
		bench: func(ctx context.Context, workload string) (string, error) {
			cmd := d.Net.Client.Command(ctx, env.Binary, "bench", "--workload", workload, "--clients", "64", "--duration", "10s", "--addr", strings.Join(addrs, ","))
			cmd.Env = cliEnv(d)
			out, err := cmd.CombinedOutput()
			return string(out), err
		},
		close: d.Close,
	}
}

// loopbackSystem is three nodes on 127.0.0.1 run by test/harness, with
// holdfast's default Raft timing as the pods have.
func loopbackSystem(t *testing.T) figureSystem {
	var key [32]byte
	_, _ = rand.Read(key[:])
	c := env.NewCluster(t, 3, harness.Options{NoRaftTiming: true, ClusterKey: fmt.Sprintf("%x", key), Args: figureArgs()})
	c.StartBootstrap()
	c.WaitLeader()
	c.WaitMembers(c.Nodes())
	c.WaitAllReady()
	n0 := c.Node(0)
	if r, err := n0.PutSettings(map[string]any{"queues_per_client": 1000000}, c.Key()); err != nil || r.Status != http.StatusOK {
		t.Fatalf("raise queues_per_client: %v %v", r, err)
	}
	r, err := n0.PostJSON(api+"/queue", map[string]any{}, "")
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("create a queue: %v %v", r, err)
	}
	var qa apiBody
	if err := r.Decode(&qa); err != nil {
		t.Fatal(err)
	}
	index := func(n *harness.Node) int { return slices.Index(c.Nodes(), n) }
	return figureSystem{
		name: "3 nodes on loopback",
		pids: func() []int {
			var out []int
			for _, n := range c.Nodes() {
				out = append(out, n.Pid())
			}
			return out
		},
		leader: func() (int, error) {
			l, err := c.LeaderOf()
			if err != nil {
				return -1, err
			}
			return index(l), nil
		},
		kill: func(i int) error { return c.Node(i).Kill() },
		restart: func(t *testing.T, i int) {
			c.Start(c.Node(i))
			c.WaitAllReady()
			c.WaitMembers(c.Nodes())
		},
		write: func(ctx context.Context, key string) error {
			var errs []error
			for _, i := range mrand.Perm(3) {
				r, err := c.Node(i).Do(ctx, harness.Request{Method: http.MethodPost, Path: api + "/queue/" + qa.QueueID + "/jobs",
					JSON: map[string]any{"job_key": key, "payload": map[string]any{"key": key}}, Header: http.Header{"Authorization": {"Bearer " + qa.WriteToken}}})
				if err != nil {
					var op *net.OpError
					if errors.As(err, &op) && op.Op == "dial" {
						errs = append(errs, err)
						continue // as a Service's next endpoint
					}
					return err
				}
				if r.Status == http.StatusCreated || r.Status == http.StatusOK {
					return nil
				}
				return errors.New(r.String())
			}
			return errors.Join(errs...)
		},
		bench: func(ctx context.Context, workload string) (string, error) {
			cmd := exec.CommandContext(ctx, env.Binary, "bench", "--workload", workload, "--clients", "64", "--duration", "10s", "--addr", harness.JoinList(c.Nodes()...))
			var e []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "HOLDFAST_") {
					e = append(e, kv)
				}
			}
			cmd.Env = append(e, "HOLDFAST_CLUSTER_KEY="+c.Key())
			out, err := cmd.CombinedOutput()
			return string(out), err
		},
		close: func() {
			for _, n := range c.Nodes() {
				_ = n.Kill()
			}
		},
	}
}
