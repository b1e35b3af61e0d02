//go:build unix

package devcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/testutil"
	"github.com/holdfast/holdfast/test/harness"
)

// The end-to-end tests run this test binary itself as the dev process (it
// runs Run when envRunDev is set, see TestMain), with a holdfast binary
// built from this module as the nodes. cmd/holdfast's tests run the real
// `holdfast dev`.
const (
	envRunDev  = "DEVCLUSTER_TEST_RUN_DEV"
	envNodeExe = "DEVCLUSTER_TEST_NODE_EXE"
	// envPrebuilt names an existing holdfast binary to use instead of
	// building one (to iterate on these tests quickly).
	envPrebuilt = "DEVCLUSTER_TEST_HOLDFAST_BIN"
)

func TestMain(m *testing.M) {
	if os.Getenv(envRunDev) == "1" {
		os.Exit(devMain(os.Args[1:]))
	}
	if os.Getenv(envFakeNode) == "1" {
		os.Exit(fakeNodeMain(os.Args[1:]))
	}
	code := m.Run()
	build.cleanup()
	os.Exit(code)
}

// devMain is a stand-in for `holdfast dev` running the nodes from
// envNodeExe.
func devMain(args []string) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	nodes := fs.Int("nodes", DefaultNodes, "")
	dir := fs.String("dir", DefaultDir, "")
	clean := fs.Bool("clean", false, "")
	if fs.Parse(args) != nil {
		return 2
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	err := Run(Config{Nodes: *nodes, Dir: *dir, Clean: *clean, Executable: os.Getenv(envNodeExe),
		Stdout: os.Stdout, Stderr: os.Stderr, Signals: sigs})
	var usage *UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		fmt.Fprintf(os.Stderr, "dev: %v\n", err)
		return 2
	default:
		fmt.Fprintf(os.Stderr, "dev: %v\n", err)
		return 1
	}
}

// builtBinary is the holdfast binary, built once for the whole test binary.
type builtBinary struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

var build builtBinary

func (b *builtBinary) cleanup() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// nodeBinary returns the path of a holdfast binary built from this module.
func nodeBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		if p := os.Getenv(envPrebuilt); p != "" {
			build.bin = p
			return
		}
		build.bin, build.dir, build.err = buildHoldfast()
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

func buildHoldfast() (bin, dir string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if dir, err = os.MkdirTemp("", "devcluster-test-bin-"); err != nil {
		return "", "", err
	}
	if bin, err = harness.Build(ctx, dir, harness.BuildOptions{}); err != nil {
		_ = os.RemoveAll(dir)
		return "", "", err
	}
	return bin, dir, nil
}

// devProc is a running dev process.
type devProc struct {
	t              *testing.T
	dir            string // its --dir
	cmd            *exec.Cmd
	stdout, stderr testutil.SyncBuffer
	done           chan struct{}
	code           int
}

// startDev starts the dev process in a process group of its own (so the
// test can send it a "terminal" Ctrl-C: SIGINT to its whole group, which
// must not reach the nodes, as they run in groups of their own). If the dev
// process is still running at the end, the cleanup kills its nodes' groups
// and its own group.
func startDev(t *testing.T, args ...string) *devProc {
	t.Helper()
	bin := nodeBinary(t)
	d := &devProc{t: t, done: make(chan struct{}), code: -1}
	for i, a := range args {
		if a == "--dir" && i+1 < len(args) {
			d.dir = args[i+1]
		}
	}
	d.cmd = exec.Command(os.Args[0], args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOLDFAST_") {
			d.cmd.Env = append(d.cmd.Env, kv)
		}
	}
	d.cmd.Env = append(d.cmd.Env, envRunDev+"=1", envNodeExe+"="+bin)
	d.cmd.Stdout, d.cmd.Stderr = &d.stdout, &d.stderr
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = d.cmd.Wait()
		d.code = d.cmd.ProcessState.ExitCode()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			killNodes(d.dir)
		}
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			t.Errorf("dev process %d still running after SIGKILL", d.cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("dev stdout:\n%s\ndev stderr:\n%s", d.stdout.String(), d.stderr.String())
		}
	})
	return d
}

// killNodes kills the process group of every node listed in dir's pids
// file (a node is its group's leader), if there is such a file.
func killNodes(dir string) {
	if dir == "" {
		return
	}
	b, err := os.ReadFile(filepath.Join(dir, PidsFile))
	if err != nil {
		return
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		_, p, _ := strings.Cut(line, " ")
		if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// addrs waits for the export line and returns its addresses.
func (d *devProc) addrs(timeout time.Duration) []string {
	d.t.Helper()
	re := regexp.MustCompile(`(?m)^export HOLDFAST_ADDR=(\S+)$`)
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(d.stdout.String()); m != nil {
			return strings.Split(m[1], ",")
		}
		select {
		case <-d.done:
			d.t.Fatalf("dev exited with %d before printing the export line", d.code)
		case <-time.After(100 * time.Millisecond):
		}
	}
	d.t.Fatalf("no export line within %v", timeout)
	return nil
}

// wait waits for the dev process to exit and returns its exit code.
func (d *devProc) wait(timeout time.Duration) int {
	d.t.Helper()
	select {
	case <-d.done:
		return d.code
	case <-time.After(timeout):
		d.t.Fatalf("dev process still running %v later", timeout)
		return -1
	}
}

func (d *devProc) signal(sig syscall.Signal) {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
}

var httpClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}

type reply struct {
	code int
	body []byte
}

func call(t *testing.T, method, addr, path string, body any) reply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+addr+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, addr, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, b}
}

type status struct {
	NodeID   string `json:"node_id"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	Term     uint64 `json:"term"`
	Nodes    []struct {
		ID       string `json:"id"`
		HTTPAddr string `json:"http_addr"`
		Voter    bool   `json:"voter"`
	} `json:"nodes"`
}

// checkCluster checks that every address answers /readyz 200 and that the
// nodes agree on one leader of len(addrs) voters at those addresses. It
// returns a follower's address (the leader's for one node).
func checkCluster(t *testing.T, addrs []string) string {
	t.Helper()
	leaders, via := 0, addrs[0]
	var leaderID string
	for i, a := range addrs {
		if r := call(t, http.MethodGet, a, "/readyz", nil); r.code != http.StatusOK {
			t.Fatalf("/readyz of %s: %d %s", a, r.code, r.body)
		}
		r := call(t, http.MethodGet, a, "/cluster/status", nil)
		var st status
		if err := json.Unmarshal(r.body, &st); err != nil || r.code != http.StatusOK {
			t.Fatalf("/cluster/status of %s: %d %s (%v)", a, r.code, r.body, err)
		}
		if want := "n" + strconv.Itoa(i+1); st.NodeID != want {
			t.Errorf("%s is %s, want %s", a, st.NodeID, want)
		}
		if st.State == "leader" {
			leaders++
		} else {
			via = a
		}
		if leaderID == "" {
			leaderID = st.LeaderID
		} else if st.LeaderID != leaderID {
			t.Errorf("%s sees leader %q, another node %q", st.NodeID, st.LeaderID, leaderID)
		}
		if len(st.Nodes) != len(addrs) {
			t.Errorf("%s lists %d nodes, want %d: %+v", st.NodeID, len(st.Nodes), len(addrs), st.Nodes)
		}
		for j, m := range st.Nodes {
			if !m.Voter || m.HTTPAddr != addrs[j] {
				t.Errorf("%s lists %+v, want voter at %s", st.NodeID, m, addrs[j])
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders, want 1", leaders)
	}
	return via
}

// readPids reads the pids file of a running dev cluster.
func readPids(t *testing.T, dir string) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, PidsFile))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		id, p, ok := strings.Cut(line, " ")
		pid, err := strconv.Atoi(p)
		if !ok || err != nil {
			t.Fatalf("pids line %q", line)
		}
		out[id] = pid
	}
	return out
}

// checkOwnGroups checks that every node leads a process group of its own,
// not the dev process's group.
func checkOwnGroups(t *testing.T, d *devProc, pids map[string]int) {
	t.Helper()
	devGroup, err := getpgid(d.cmd.Process.Pid)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Logf("not checking the nodes' process groups: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for id, pid := range pids {
		g, err := getpgid(pid)
		if err != nil || g != pid || g == devGroup {
			t.Errorf("%s (pid %d) is in process group %d (%v), want its own; dev's is %d", id, pid, g, err, devGroup)
		}
	}
}

// checkGone checks that no node process is left and no address accepts
// connections.
func checkGone(t *testing.T, pids map[string]int, addrs []string) {
	t.Helper()
	for id, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) is still there: kill 0: %v", id, pid, err)
		}
	}
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections", a)
		}
	}
}

type leaseReply struct {
	Status     string `json:"status"`
	OwnerToken string `json:"owner_token"`
}

func mintNamespace(t *testing.T, addr string) string {
	t.Helper()
	r := call(t, http.MethodPost, addr, "/services/v1/lease/namespace", map[string]any{})
	var ns struct {
		Namespace string `json:"namespace"`
	}
	if (r.code != http.StatusOK && r.code != http.StatusCreated) || json.Unmarshal(r.body, &ns) != nil || ns.Namespace == "" {
		t.Fatalf("mint a namespace through %s: %d %s", addr, r.code, r.body)
	}
	return ns.Namespace
}

func acquire(t *testing.T, addr, ns string) (int, leaseReply) {
	t.Helper()
	r := call(t, http.MethodPost, addr, "/services/v1/lease",
		map[string]any{"namespace": ns, "key": "dev-test", "ttl_seconds": 600, "fingerprint": "fp"})
	var l leaseReply
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("lease answer %d %s: %v", r.code, r.body, err)
	}
	return r.code, l
}

func TestThreeNodesStartServeAndStopOnSIGINT(t *testing.T) {
	start := time.Now()
	dir := filepath.Join(t.TempDir(), "dev")
	d := startDev(t, "--nodes", "3", "--dir", dir)
	addrs := d.addrs(90 * time.Second)
	t.Logf("ready after %v", time.Since(start).Round(time.Millisecond))
	if len(addrs) != 3 {
		t.Fatalf("export line lists %v", addrs)
	}
	follower := checkCluster(t, addrs)

	out := d.stdout.String()
	for i, a := range addrs {
		id := "n" + strconv.Itoa(i+1)
		line := fmt.Sprintf(`(?m)^%s  http://%s  raft 127\.0\.0\.1:\d+  data %s  log %s$`, id, regexp.QuoteMeta(a),
			regexp.QuoteMeta(filepath.Join(dir, id)), regexp.QuoteMeta(filepath.Join(dir, id+".log")))
		if !regexp.MustCompile(line).MatchString(out) {
			t.Errorf("no line for %s matching %s in:\n%s", id, line, out)
		}
	}
	if !strings.Contains(out, "Ctrl-C stops them all") {
		t.Errorf("no Ctrl-C hint in:\n%s", out)
	}

	// A write through a follower (a namespace is minted where it arrives; the
	// lease goes through Raft).
	ns := mintNamespace(t, follower)
	if code, l := acquire(t, follower, ns); code != http.StatusCreated || l.Status != "held" || l.OwnerToken == "" {
		t.Fatalf("acquire through %s: %d %+v", follower, code, l)
	}

	pids := readPids(t, dir)
	if len(pids) != 3 {
		t.Fatalf("pids file lists %v", pids)
	}
	checkOwnGroups(t, d, pids)

	// A second dev on the same directory refuses: its nodes are running.
	second := startDev(t, "--nodes", "3", "--dir", dir)
	if code := second.wait(30 * time.Second); code != 1 || !strings.Contains(second.stderr.String(), "still running") {
		t.Errorf("a second dev on a running dir: exit %d, stderr:\n%s", code, second.stderr.String())
	}

	// SIGINT to the dev process alone: it forwards SIGTERM to each node.
	stopAt := time.Now()
	d.signal(syscall.SIGINT)
	if code := d.wait(40 * time.Second); code != 0 {
		t.Fatalf("dev exited with %d after SIGINT, stderr:\n%s", code, d.stderr.String())
	}
	t.Logf("stopped %v after SIGINT", time.Since(stopAt).Round(time.Millisecond))
	if !strings.HasSuffix(d.stdout.String(), "stopped\n") {
		t.Errorf("stdout does not end with stopped:\n%s", d.stdout.String())
	}
	checkGone(t, pids, addrs)
	for i := range addrs {
		log := readLog(t, filepath.Join(dir, "n"+strconv.Itoa(i+1)+".log"))
		if !strings.Contains(log, "stopped cleanly") || strings.Contains(log, "second signal: exiting now") {
			t.Errorf("n%d did not stop cleanly after one signal:\n%s", i+1, tail(filepath.Join(dir, "n"+strconv.Itoa(i+1)+".log"), 15))
		}
	}
	if _, err := os.Stat(filepath.Join(dir, PidsFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pids file left after a clean stop: %v", err)
	}
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRestartKeepsAddressesAndData restarts a cluster on its directory: the
// same addresses, ready again, the lease written before still held. The
// second run is stopped the way a terminal's Ctrl-C does it (SIGINT to the
// dev process's whole group): it reaches only dev, which gives each node
// one SIGTERM, so no node gets a second signal.
func TestRestartKeepsAddressesAndData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	d := startDev(t, "--dir", dir) // the default: 3 nodes
	first := d.addrs(90 * time.Second)
	via := checkCluster(t, first)
	ns := mintNamespace(t, via)
	if code, _ := acquire(t, via, ns); code != http.StatusCreated {
		t.Fatalf("acquire: %d", code)
	}
	ports, err := os.ReadFile(filepath.Join(dir, PortsFile))
	if err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(40 * time.Second); code != 0 {
		t.Fatalf("first run exited with %d", code)
	}

	start := time.Now()
	d2 := startDev(t, "--nodes", "3", "--dir", dir)
	second := d2.addrs(90 * time.Second)
	t.Logf("ready again after %v", time.Since(start).Round(time.Millisecond))
	if strings.Join(second, ",") != strings.Join(first, ",") {
		t.Fatalf("addresses changed: %v, then %v", first, second)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, PortsFile)); !bytes.Equal(again, ports) {
		t.Errorf("ports.json changed:\n%s\nthen\n%s", ports, again)
	}
	if strings.Contains(d2.stderr.String(), "warning") {
		t.Errorf("warnings on a plain restart:\n%s", d2.stderr.String())
	}
	via = checkCluster(t, second)
	if code, l := acquire(t, via, ns); code != http.StatusConflict || l.Status != "held" {
		t.Errorf("the lease of the first run: %d %+v, want 409 held", code, l)
	}
	pids := readPids(t, dir)
	checkOwnGroups(t, d2, pids)

	logs := map[string]int64{}
	for id := range pids {
		st, err := os.Stat(filepath.Join(dir, id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		logs[id] = st.Size()
	}
	if err := syscall.Kill(-d2.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := d2.wait(40 * time.Second); code != 0 {
		t.Fatalf("dev exited with %d after a Ctrl-C to its group, stderr:\n%s", code, d2.stderr.String())
	}
	checkGone(t, pids, second)
	for id, off := range logs {
		log := readLog(t, filepath.Join(dir, id+".log"))[off:]
		if !strings.Contains(log, "stopped cleanly") || strings.Contains(log, "second signal: exiting now") {
			t.Errorf("%s after a Ctrl-C to the group:\n%s", id, log)
		}
	}

	// A third run finds n3's HTTP port taken: n3 moves to a new one (a new
	// HTTP address alone is one a member reports by itself), with a warning.
	ln, err := net.Listen("tcp", first[2])
	if err != nil {
		t.Fatalf("occupy n3's port: %v", err)
	}
	defer ln.Close()
	d3 := startDev(t, "--dir", dir)
	third := d3.addrs(90 * time.Second)
	if third[0] != first[0] || third[1] != first[1] || third[2] == first[2] {
		t.Fatalf("only n3 should move: %v, then %v", first, third)
	}
	if errOut := d3.stderr.String(); !strings.Contains(errOut, "n3's HTTP address "+first[2]+" is taken; using "+third[2]) || !strings.Contains(errOut, "--clean") {
		t.Errorf("no warning about the move:\n%s", errOut)
	}
	checkCluster(t, third)
	d3.signal(syscall.SIGTERM)
	if code := d3.wait(40 * time.Second); code != 0 {
		t.Fatalf("third run exited with %d", code)
	}
}

// TestNodeDeathIsSurvived: a node killed with SIGKILL, then another stopped
// with SIGTERM from outside, are each named and started again after the
// pause while the others keep serving; dev then stops cleanly.
func TestNodeDeathIsSurvived(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	d := startDev(t, "--nodes", "3", "--dir", dir)
	addrs := d.addrs(90 * time.Second)
	pids := readPids(t, dir)
	if err := syscall.Kill(pids["n2"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &d.stderr, "n2 exited (signal: killed); the others keep serving; restarting it in 3s", 20*time.Second)
	// The others serve while n2 is down (after an election if n2 led).
	waitWrite(t, addrs[0], 30*time.Second)
	waitOutput(t, &d.stderr, "restarted n2 (pid", 20*time.Second)
	if now := readPids(t, dir); now["n2"] == pids["n2"] || now["n1"] != pids["n1"] || now["n3"] != pids["n3"] {
		t.Fatalf("pids before %v, after the restart %v: only n2's should change", pids, now)
	}
	waitReadyAll(t, addrs, 60*time.Second)
	waitWrite(t, addrs[1], 30*time.Second) // through the restarted node

	// A clean SIGTERM of one node from outside is survived the same way.
	if err := syscall.Kill(pids["n1"], syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &d.stderr, "n1 exited (exit status 0); the others keep serving", 30*time.Second)
	waitWrite(t, addrs[2], 30*time.Second)
	waitOutput(t, &d.stderr, "restarted n1 (pid", 20*time.Second)
	waitReadyAll(t, addrs, 60*time.Second)

	final := readPids(t, dir)
	d.signal(syscall.SIGTERM)
	if code := d.wait(40 * time.Second); code != 0 {
		t.Fatalf("dev exited with %d; stderr:\n%s", code, d.stderr.String())
	}
	checkGone(t, final, addrs)
}

// TestCrashLoopIsLeftDown: a node that exits CrashLimit times within the
// window is left down, saying how to bring it back, and the others keep
// serving; the stop afterwards names it.
func TestCrashLoopIsLeftDown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	sigs := make(chan os.Signal, 2)
	var stdout, stderr testutil.SyncBuffer
	ran := make(chan error, 1)
	go func() {
		ran <- Run(Config{Nodes: 3, Dir: dir, Executable: nodeBinary(t), Stdout: &stdout, Stderr: &stderr, Signals: sigs,
			RestartDelay: 200 * time.Millisecond, CrashLimit: 2, CrashWindow: time.Minute})
	}()
	waitOutput(t, &stdout, "every node is ready", 90*time.Second)
	first := readPids(t, dir)
	if err := syscall.Kill(first["n3"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &stderr, "restarted n3 (pid", 20*time.Second)
	second := readPids(t, dir)
	if second["n3"] == first["n3"] || second["n3"] == 0 {
		t.Fatalf("n3 was not restarted: pids %v then %v", first, second)
	}
	if err := syscall.Kill(second["n3"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &stderr, "n3 exited (signal: killed), 2 times within 1m0s: leaving it down", 20*time.Second)
	if !strings.Contains(stderr.String(), "serve --node-id n3 --data-dir "+filepath.Join(dir, "n3")) {
		t.Errorf("the message does not give n3's command line:\n%s", stderr.String())
	}
	time.Sleep(time.Second) // more than the pause: no restart comes
	if n := strings.Count(stderr.String(), "restarted n3"); n != 1 {
		t.Fatalf("n3 was restarted %d times, want 1:\n%s", n, stderr.String())
	}
	if _, ok := readPids(t, dir)["n3"]; ok {
		t.Error("the pids file still lists n3")
	}
	m := regexp.MustCompile(`(?m)^export HOLDFAST_ADDR=(\S+)$`).FindStringSubmatch(stdout.String())
	if m == nil {
		t.Fatal("no export line")
	}
	waitWrite(t, strings.Split(m[1], ",")[0], 30*time.Second)
	sigs <- syscall.SIGTERM
	select {
	case err := <-ran:
		if err == nil || !strings.Contains(err.Error(), "n3 (left down after it exited 2 times") {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Fatal("Run did not return within 40 s of the signal")
	}
}

// waitOutput waits until buf holds want.
func waitOutput(t *testing.T, buf *testutil.SyncBuffer, want string, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !strings.Contains(buf.String(), want); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v; output:\n%s", want, timeout, buf.String())
		}
	}
}

// waitWrite waits until a write through addr (creating a queue) succeeds.
func waitWrite(t *testing.T, addr string, timeout time.Duration) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		resp, err := httpClient.Post("http://"+addr+"/services/v1/queue", "application/json", strings.NewReader("{}"))
		if err != nil {
			last = err.Error()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusCreated {
			return
		}
		last = fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
	t.Fatalf("no write through %s succeeded within %v: %s", addr, timeout, last)
}

// waitReadyAll waits until every address answers /readyz 200.
func waitReadyAll(t *testing.T, addrs []string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, a := range addrs {
		for {
			resp, err := httpClient.Get("http://" + a + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not ready within %v", a, timeout)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func TestSingleNode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	d := startDev(t, "--nodes", "1", "--dir", dir)
	addrs := d.addrs(90 * time.Second)
	if len(addrs) != 1 {
		t.Fatalf("export line lists %v", addrs)
	}
	checkCluster(t, addrs)
	pids := readPids(t, dir)
	d.signal(syscall.SIGTERM)
	if code := d.wait(40 * time.Second); code != 0 {
		t.Fatalf("dev exited with %d", code)
	}
	checkGone(t, pids, addrs)
}

// TestKilledDevStopsNodes kills the dev process with SIGKILL, so it cannot
// stop its nodes: on Linux the kernel sends each node SIGTERM (Pdeathsig)
// and they stop by themselves. Elsewhere they would keep running (the next
// dev on the directory refuses to start while they answer).
//
// The kernel sends the signal each time a node is handed to another thread
// of the dying dev process, so a node may get it more than once and exit at
// once rather than gracefully: only that the nodes stop is checked.
func TestKilledDevStopsNodes(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skipf("on %s the nodes of a killed dev process keep running", runtime.GOOS)
	}
	dir := filepath.Join(t.TempDir(), "dev")
	d := startDev(t, "--nodes", "3", "--dir", dir)
	d.addrs(90 * time.Second)
	pids := readPids(t, dir)
	b, err := os.ReadFile(filepath.Join(dir, PortsFile))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parsePorts(b)
	if err != nil {
		t.Fatal(err)
	}
	// Runs before startDev's cleanup, which leaves the nodes alone once dev
	// has exited.
	t.Cleanup(func() {
		if t.Failed() {
			killNodes(dir)
		}
	})

	killedAt := time.Now()
	d.signal(syscall.SIGKILL)
	d.wait(10 * time.Second)
	deadline := killedAt.Add(30 * time.Second)
	for _, m := range p.Nodes {
		for _, a := range []string{m.HTTPAddr, m.RaftAddr} {
			for {
				c, err := net.DialTimeout("tcp", a, time.Second)
				if err != nil {
					break
				}
				c.Close()
				if time.Now().After(deadline) {
					t.Fatalf("%s of %s still accepts connections %v after dev was killed", a, m.ID, time.Since(killedAt).Round(time.Millisecond))
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	t.Logf("every node's ports closed %v after dev was killed", time.Since(killedAt).Round(time.Millisecond))
	for id, pid := range pids {
		for !exitedLinux(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("%s (pid %d) still running %v after dev was killed", id, pid, time.Since(killedAt).Round(time.Millisecond))
			}
			time.Sleep(100 * time.Millisecond)
		}
		how := "without logging how"
		switch log := readLog(t, filepath.Join(dir, id+".log")); {
		case strings.Contains(log, "second signal: exiting now"):
			how = "at once, on a repeated SIGTERM"
		case strings.Contains(log, "stopped cleanly"):
			how = "cleanly"
		}
		t.Logf("%s stopped %s", id, how)
	}
}

// exitedLinux reports whether process pid is gone or a zombie (a node of a
// killed dev process is reaped by whoever inherits it, maybe never).
func exitedLinux(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && (b[i+2] == 'Z' || b[i+2] == 'X')
}

// TestRefusals runs Run in this process: each case is refused before any
// process starts (the executable does not exist).
func TestRefusals(t *testing.T) {
	base := t.TempDir()
	notDev := filepath.Join(base, "notdev")
	if err := os.MkdirAll(notDev, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := filepath.Join(notDev, "important.txt")
	if err := os.WriteFile(keep, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	threeNode := filepath.Join(base, "three")
	if err := os.MkdirAll(threeNode, 0o755); err != nil {
		t.Fatal(err)
	}
	members, _, err := allocate(3, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := marshalJSON(portsJSON{Nodes: members})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(threeNode, PortsFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(base, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"two nodes", Config{Nodes: 2, Dir: filepath.Join(base, "x")}, "--nodes must be 1, 3 or 5"},
		{"minus one node", Config{Nodes: -1, Dir: filepath.Join(base, "x")}, "--nodes must be 1, 3 or 5"},
		{"clean a non-dev dir", Config{Dir: notDev, Clean: true}, "will not remove it"},
		{"use a non-dev dir", Config{Dir: notDev}, "will not use it"},
		{"other node count", Config{Nodes: 5, Dir: threeNode}, "start it with --nodes 3"},
		{"a file", Config{Dir: file}, "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Executable = filepath.Join(base, "no-such-binary")
			err := Run(tc.cfg)
			var usage *UsageError
			if !errors.As(err, &usage) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a usage error with %q", err, tc.want)
			}
		})
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "keep me" {
		t.Errorf("a refused --clean touched %s: %q %v", keep, b, err)
	}
}

func TestCleanRemovesADevDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dev")
	if err := os.MkdirAll(filepath.Join(dir, "n1"), 0o755); err != nil {
		t.Fatal(err)
	}
	old, _, err := allocate(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := marshalJSON(portsJSON{Nodes: old})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, PortsFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "n1", "raft.db"), []byte("old state"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := withDefaults(Config{Dir: dir, Clean: true})
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{cfg: cfg, dir: dir}
	members, err := c.prepare()
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 3 {
		t.Errorf("%d members after --clean with the default, want 3", len(members))
	}
	if _, err := os.Stat(filepath.Join(dir, "n1", "raft.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old state survived --clean: %v", err)
	}
	b, err = os.ReadFile(filepath.Join(dir, PortsFile))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := parsePorts(b); err != nil || len(p.Nodes) != 3 {
		t.Errorf("new ports.json: %v %s", err, b)
	}
}

func TestAllocateReusesFreeAndReplacesTaken(t *testing.T) {
	first, moved, err := allocate(3, nil)
	if err != nil || len(moved) != 0 {
		t.Fatal(err, moved)
	}
	seen := map[string]bool{}
	for _, m := range first {
		for _, a := range []string{m.HTTPAddr, m.RaftAddr} {
			if seen[a] || !strings.HasPrefix(a, "127.0.0.1:") {
				t.Fatalf("address %s twice or not loopback: %+v", a, first)
			}
			seen[a] = true
		}
	}
	again, moved, err := allocate(3, &portsJSON{Nodes: first})
	if err != nil || len(moved) != 0 || fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("free recorded ports not reused: %v %v %v", again, moved, err)
	}
	ln, err := net.Listen("tcp", first[1].RaftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	third, moved, err := allocate(3, &portsJSON{Nodes: first})
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != 1 || !strings.Contains(moved[0], "n2's Raft address "+first[1].RaftAddr+" is taken") {
		t.Errorf("moved: %q", moved)
	}
	if third[1].RaftAddr == first[1].RaftAddr || third[1].HTTPAddr != first[1].HTTPAddr || third[0] != first[0] || third[2] != first[2] {
		t.Errorf("only n2's Raft address should change: %v, then %v", first, third)
	}
}

func TestParsePorts(t *testing.T) {
	good := `{"nodes":[{"id":"n1","http_addr":"127.0.0.1:1000","raft_addr":"127.0.0.1:1001"}]}`
	if p, err := parsePorts([]byte(good)); err != nil || len(p.Nodes) != 1 {
		t.Fatalf("%v %v", p, err)
	}
	for _, bad := range []string{
		`{}`,
		`not json`,
		`{"nodes":[{"id":"n2","http_addr":"127.0.0.1:1000","raft_addr":"127.0.0.1:1001"}]}`,
		`{"nodes":[{"id":"n1","http_addr":"10.0.0.1:1000","raft_addr":"127.0.0.1:1001"}]}`,
		`{"nodes":[{"id":"n1","http_addr":"127.0.0.1:1000","raft_addr":"127.0.0.1:1000"}]}`,
		`{"nodes":[{"id":"n1","http_addr":"127.0.0.1:0","raft_addr":"127.0.0.1:1001"}]}`,
		`{"nodes":[{"id":"n1","http_addr":"127.0.0.1","raft_addr":"127.0.0.1:1001"}]}`,
		`{"nodes":[],"extra":1}`,
	} {
		if _, err := parsePorts([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestNodeArgs(t *testing.T) {
	ms := []member{
		{ID: "n1", HTTPAddr: "127.0.0.1:1", RaftAddr: "127.0.0.1:2"},
		{ID: "n2", HTTPAddr: "127.0.0.1:3", RaftAddr: "127.0.0.1:4"},
		{ID: "n3", HTTPAddr: "127.0.0.1:5", RaftAddr: "127.0.0.1:6"},
	}
	got := strings.Join(nodeArgs("/d", ms, 1), " ")
	want := "serve --node-id n2 --data-dir /d/n2 --http-addr 127.0.0.1:3 --raft-addr 127.0.0.1:4 --bootstrap-expect 3 --join 127.0.0.1:1,127.0.0.1:5"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	got = strings.Join(nodeArgs("/d", ms[:1], 0), " ")
	if want := "serve --node-id n1 --data-dir /d/n1 --http-addr 127.0.0.1:1 --raft-addr 127.0.0.1:2"; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	env := nodeEnv([]string{"PATH=/bin", "HOLDFAST_TLS_CERT_FILE=x", "HOLDFAST_ADDR=y", "HOME=/h"})
	if strings.Join(env, " ") != "PATH=/bin HOME=/h" {
		t.Errorf("node environment %v", env)
	}
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	var b strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := tail(path, 3); got != "line 19997\nline 19998\nline 19999" {
		t.Errorf("tail: %q", got)
	}
	if got := tail(filepath.Join(t.TempDir(), "none"), 3); !strings.Contains(got, "cannot read") {
		t.Errorf("tail of a missing file: %q", got)
	}
}

// fakeNode writes a shell script that stands in for the holdfast binary.
func fakeNode(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fake-node")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFailuresOfFakeNodes runs Run in this process with scripts for nodes:
// one that exits at once, one that never serves, one that ignores SIGTERM.
func TestFailuresOfFakeNodes(t *testing.T) {
	t.Run("exits before ready", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "dev")
		var stderr testutil.SyncBuffer
		err := Run(Config{Nodes: 1, Dir: dir, Executable: fakeNode(t, `echo "boom: $*"; exit 3`), Stderr: &stderr})
		var ne *NodeError
		if !errors.As(err, &ne) || ne.Node != "n1" || !strings.Contains(ne.Problem, "exited before it was ready (exit status 3)") ||
			!strings.Contains(ne.LogTail, "boom: serve --node-id n1 --data-dir "+filepath.Join(dir, "n1")) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("never ready", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "dev")
		start := time.Now()
		err := Run(Config{Nodes: 3, Dir: dir, Executable: fakeNode(t, `exec sleep 60`), ReadyTimeout: time.Second})
		var ne *NodeError
		if !errors.As(err, &ne) || ne.Node != "n1" || !strings.Contains(ne.Problem, "was not ready within 1s") {
			t.Fatalf("got %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("took %v: the sleeping nodes were not stopped by SIGTERM", d)
		}
	})
	t.Run("ignores SIGTERM", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "dev")
		start := time.Now()
		err := Run(Config{Nodes: 1, Dir: dir, Executable: fakeNode(t, `trap "" TERM; while :; do sleep 0.1; done`),
			ReadyTimeout: 500 * time.Millisecond, StopTimeout: time.Second})
		var ne *NodeError
		if !errors.As(err, &ne) || !strings.Contains(ne.Problem, "was not ready") {
			t.Fatalf("got %v", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("took %v: the node was not killed after StopTimeout", d)
		}
	})
	t.Run("signal while waiting", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "dev")
		sigs := make(chan os.Signal, 1)
		var stdout testutil.SyncBuffer
		// The signal comes once every node has its trap set: one that came
		// earlier would end a node by the shell's default action.
		marks := t.TempDir()
		ran := make(chan error, 1)
		go func() {
			ran <- Run(Config{Nodes: 3, Dir: dir, Executable: fakeNode(t, `trap "exit 0" TERM; touch `+marks+`/$$; while :; do sleep 0.1; done`), Signals: sigs, Stdout: &stdout})
		}()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if m, _ := os.ReadDir(marks); len(m) == 3 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the fake nodes did not start within 20 s")
			}
		}
		sigs <- syscall.SIGTERM
		if err := <-ran; err != nil || stdout.String() != "stopped\n" {
			t.Fatalf("got %v, stdout %q", err, stdout.String())
		}
		// A node killed by the signal is reported: the stop was not clean.
		sigs <- syscall.SIGTERM
		err := Run(Config{Nodes: 1, Dir: dir + "-2", Executable: fakeNode(t, `exec sleep 60`), Signals: sigs, Stdout: &stdout})
		if err == nil || !strings.Contains(err.Error(), "stopped, but not cleanly: n1 (signal: terminated") {
			t.Fatalf("got %v", err)
		}
	})
}
