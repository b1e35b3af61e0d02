package devcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/internal/atomicfile"
	"github.com/holdfast/holdfast/internal/client"
)

// Defaults of Config.
const (
	DefaultNodes        = 3
	DefaultDir          = "./holdfast-dev"
	DefaultReadyTimeout = 60 * time.Second
	DefaultStopTimeout  = 20 * time.Second
	DefaultRestartDelay = 3 * time.Second
	DefaultCrashLimit   = 3
	DefaultCrashWindow  = 2 * time.Minute
)

// File names inside the dev directory.
const (
	PortsFile = "ports.json"
	PidsFile  = "pids"
)

const (
	// killWait bounds the wait for a process after SIGKILL.
	killWait = 5 * time.Second
	// tailLines is how many log lines an error about a node shows.
	tailLines = 30
	// tailBytes bounds how much of a log is read for its tail.
	tailBytes = 64 << 10
	// pollInterval is how often readiness is checked.
	pollInterval = 200 * time.Millisecond
	// probeTimeout bounds one readiness or status probe of a node.
	probeTimeout = 2 * time.Second
)

// Config says what cluster Run starts. Zero values take the defaults.
type Config struct {
	// Nodes is the number of nodes: 1, 3 or 5 (default 3).
	Nodes int
	// Dir is the dev directory (default ./holdfast-dev).
	Dir string
	// Clean removes Dir before starting. Run refuses if Dir exists and is
	// neither empty nor a dev directory (one with ports.json).
	Clean bool
	// Executable is the holdfast binary the nodes run (default: this
	// process's own executable).
	Executable string
	// Env is the environment the nodes start with (default os.Environ()).
	// HOLDFAST_* variables are always left out, so the nodes run with
	// serve's defaults and the flags Run gives them, nothing else.
	Env []string
	// Stdout receives the address table and the export line, Stderr
	// progress and warnings (default: discarded).
	Stdout, Stderr io.Writer
	// Signals are the stop requests: the first stops every node gracefully
	// (Run sends one SIGTERM to each node still running), a second kills
	// them. Nil: Run returns only when a node fails to start or to become
	// ready.
	Signals <-chan os.Signal
	// ReadyTimeout bounds the wait for every node to answer 200 on
	// /readyz (default 60s).
	ReadyTimeout time.Duration
	// StopTimeout bounds a graceful stop before the nodes still running
	// are killed (default 20s).
	StopTimeout time.Duration
	// RestartDelay is the pause before a node that exited while the
	// cluster ran is started again (default 3s).
	RestartDelay time.Duration
	// CrashLimit and CrashWindow: a node that exits CrashLimit times within
	// CrashWindow is left down (defaults 3 and 2 minutes).
	CrashLimit  int
	CrashWindow time.Duration
}

// ErrAllDown is wrapped by the error Run returns when every node has been
// left down (each exited too often, or could not be started again): nothing
// is left to serve, so Run ends instead of waiting for a signal.
var ErrAllDown = errors.New("every node is down")

// UsageError is an error in what the caller asked for: a bad node count, or
// a directory that is not a dev directory. `holdfast dev` exits 2 on it.
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

func usageErrorf(format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...)}
}

// NodeError says a node did not start, did not become ready, or died.
type NodeError struct {
	// Node is the node's id (n1, n2, ...).
	Node string
	// Problem says what happened, e.g. "exited unexpectedly (exit status 1)".
	Problem string
	// Hint, when not empty, suggests what to do.
	Hint string
	// LogPath is the node's log file and LogTail its last lines.
	LogPath string
	LogTail string
}

func (e *NodeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", e.Node, e.Problem)
	if e.Hint != "" {
		fmt.Fprintf(&b, "; %s", e.Hint)
	}
	if e.LogPath != "" {
		fmt.Fprintf(&b, "\n---- last lines of %s:\n%s", e.LogPath, e.LogTail)
	}
	return b.String()
}

// member is one node's entry in ports.json.
type member struct {
	ID       string `json:"id"`
	HTTPAddr string `json:"http_addr"`
	RaftAddr string `json:"raft_addr"`
}

// portsJSON is the content of ports.json.
type portsJSON struct {
	Nodes []member `json:"nodes"`
}

// node is one running (or exited) node process.
type node struct {
	member
	dataDir string
	logPath string

	args []string // the command line after the executable

	cmd   *exec.Cmd
	done  chan struct{} // closed once the process has exited and state is set
	state string        // "exit status 0", "signal: killed", ...
	ok    bool          // exited with status 0

	exitTimes []time.Time // its exits while the cluster ran, within CrashWindow
	down      bool        // left down: it exited too often, or could not be started again
	downWhy   string      // why it was left down
	restartAt *time.Timer // the pause before its restart, while one runs
}

// leaveDown marks n as left down for the reason why.
func (n *node) leaveDown(why string) {
	n.down, n.downWhy = true, why
}

// downReport names n, why it was left down and its log.
func (n *node) downReport() string {
	return fmt.Sprintf("%s (%s; log %s)", n.ID, n.downWhy, n.logPath)
}

func (n *node) exited() bool {
	select {
	case <-n.done:
		return true
	default:
		return false
	}
}

func (n *node) tail() string { return tail(n.logPath, tailLines) }

// cluster is the state of one Run.
type cluster struct {
	cfg   Config
	dir   string
	nodes []*node
	moved bool // some recorded address was taken and re-picked
	exits chan *node
	env   []string

	// spawn carries (re)starts to the goroutine locked to its OS thread
	// (see start).
	spawn chan spawnRequest
	// restarts receives a node whose restart pause is over.
	restarts chan *node
	// readied receives a restarted node once it is ready (see watchReady).
	readied chan readyAgain
	// ended is closed once Run has stopped every node.
	ended <-chan struct{}
}

// readyAgain is a restarted node found ready: done is closed when the
// process found ready exits, at is when it was started.
type readyAgain struct {
	n    *node
	done <-chan struct{}
	at   time.Time
}

// spawnRequest asks the spawning goroutine to start n again.
type spawnRequest struct {
	n    *node
	errc chan error
}

// Run starts the cluster, waits until every node is ready, prints the
// nodes' addresses and blocks until a stop signal. A node that exits
// meanwhile is started again after RestartDelay while the others keep
// serving (see wait). It returns nil after a signal once every node
// stopped cleanly; a *UsageError for a bad Config or directory; a
// *NodeError when a node fails to start or to become ready (the other
// nodes are stopped first); an error wrapping ErrAllDown when every node
// has been left down.
func Run(cfg Config) error {
	cfg, err := withDefaults(cfg)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return fmt.Errorf("resolve --dir %s: %w", cfg.Dir, err)
	}
	c := &cluster{
		cfg: cfg,
		dir: dir,
	}
	members, err := c.prepare()
	if err != nil {
		return err
	}
	ended := make(chan struct{})
	defer close(ended) // after every node has been stopped
	c.ended = ended
	if err := c.start(members, ended); err != nil {
		c.stopAll()
		return err
	}
	fmt.Fprintf(cfg.Stderr, "holdfast dev: started %d node(s) in %s; waiting until every node is ready\n", len(c.nodes), c.dir)
	stopped, err := c.waitReady()
	if err == nil && !stopped {
		c.printTable()
		err = c.wait()
	}
	if err != nil {
		c.stopAll() // a no-op if handleExit stopped them
		return err
	}
	return c.finishStop()
}

// CheckNodes returns a *UsageError unless n is 1, 3 or 5: a dev cluster
// has an odd number of voters, so it tolerates (n-1)/2 failures.
func CheckNodes(n int) error {
	if n != 1 && n != 3 && n != 5 {
		return usageErrorf("--nodes must be 1, 3 or 5, not %d", n)
	}
	return nil
}

func withDefaults(cfg Config) (Config, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = DefaultNodes
	}
	if err := CheckNodes(cfg.Nodes); err != nil {
		return cfg, err
	}
	if cfg.Dir == "" {
		cfg.Dir = DefaultDir
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("find the holdfast executable: %w", err)
		}
		cfg.Executable = exe
	}
	if cfg.Env == nil {
		cfg.Env = os.Environ()
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = DefaultReadyTimeout
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.RestartDelay <= 0 {
		cfg.RestartDelay = DefaultRestartDelay
	}
	if cfg.CrashLimit <= 0 {
		cfg.CrashLimit = DefaultCrashLimit
	}
	if cfg.CrashWindow <= 0 {
		cfg.CrashWindow = DefaultCrashWindow
	}
	return cfg, nil
}

// prepare checks (and with Clean, removes) the dev directory and returns
// every node's addresses: those of ports.json where still free, new ones
// otherwise. It records them in ports.json.
func (c *cluster) prepare() ([]member, error) {
	recorded, err := c.inspectDir()
	if err != nil {
		return nil, err
	}
	if recorded != nil {
		if err := c.checkNotRunning(recorded); err != nil {
			return nil, err
		}
	}
	if c.cfg.Clean {
		if err := os.RemoveAll(c.dir); err != nil {
			return nil, fmt.Errorf("--clean: remove %s: %w", c.dir, err)
		}
		recorded = nil
	}
	if recorded != nil && len(recorded.Nodes) != c.cfg.Nodes {
		return nil, usageErrorf("%s holds a %d-node dev cluster: start it with --nodes %d, or add --clean to start over (deleting its data)",
			c.dir, len(recorded.Nodes), len(recorded.Nodes))
	}
	if err := atomicfile.MkdirAll(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", c.dir, err)
	}
	members, moved, err := allocate(c.cfg.Nodes, recorded)
	if err != nil {
		return nil, err
	}
	for _, m := range moved {
		fmt.Fprintf(c.cfg.Stderr, "holdfast dev: warning: %s\n", m)
	}
	if len(moved) > 0 {
		c.moved = true
		fmt.Fprintf(c.cfg.Stderr, "holdfast dev: warning: the cluster's Raft membership records the old addresses, so it may not come back on the new ones; "+
			"if it does not become ready, start over with --clean (which deletes its data)\n")
	}
	b, err := marshalJSON(portsJSON{Nodes: members})
	if err != nil {
		return nil, fmt.Errorf("record the ports: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(c.dir, PortsFile), b); err != nil {
		return nil, fmt.Errorf("record the ports: %w", err)
	}
	return members, nil
}

// inspectDir checks that the dev directory is absent, empty or a dev
// directory, and returns its ports.json (nil if there is none).
func (c *cluster) inspectDir() (*portsJSON, error) {
	st, err := os.Stat(c.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", c.dir, err)
	}
	if !st.IsDir() {
		return nil, usageErrorf("%s is not a directory", c.dir)
	}
	b, err := os.ReadFile(filepath.Join(c.dir, PortsFile))
	if errors.Is(err, os.ErrNotExist) {
		entries, err := os.ReadDir(c.dir)
		if err != nil {
			return nil, fmt.Errorf("inspect %s: %w", c.dir, err)
		}
		if len(entries) > 0 {
			what := "use it as a dev directory"
			if c.cfg.Clean {
				what = "remove it"
			}
			return nil, usageErrorf("%s exists, is not empty and has no %s: it does not look like a holdfast dev directory, so holdfast dev will not %s; pick another --dir",
				c.dir, PortsFile, what)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(c.dir, PortsFile), err)
	}
	p, err := parsePorts(b)
	if err != nil {
		if c.cfg.Clean {
			return nil, nil // removed anyway
		}
		return nil, fmt.Errorf("%s: %w; add --clean to start over", filepath.Join(c.dir, PortsFile), err)
	}
	return p, nil
}

// parsePorts decodes and checks the content of ports.json: nodes n1..nN
// with distinct loopback addresses.
func parsePorts(b []byte) (*portsJSON, error) {
	var p portsJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if len(p.Nodes) == 0 {
		return nil, errors.New("no nodes listed")
	}
	seen := map[string]bool{}
	for i, m := range p.Nodes {
		if want := nodeID(i); m.ID != want {
			return nil, fmt.Errorf("node %d is %q, want %q", i+1, m.ID, want)
		}
		for _, a := range []string{m.HTTPAddr, m.RaftAddr} {
			host, port, err := net.SplitHostPort(a)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", m.ID, err)
			}
			if host != "127.0.0.1" {
				return nil, fmt.Errorf("%s: %s is not a 127.0.0.1 address", m.ID, a)
			}
			if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
				return nil, fmt.Errorf("%s: %s has no valid port", m.ID, a)
			}
			if seen[a] {
				return nil, fmt.Errorf("%s is listed twice", a)
			}
			seen[a] = true
		}
	}
	return &p, nil
}

// checkNotRunning refuses a directory whose recorded nodes still answer:
// the nodes of an earlier holdfast dev that did not stop them (it was
// killed) keep their data directories in use.
func (c *cluster) checkNotRunning(p *portsJSON) error {
	for _, m := range p.Nodes {
		if c.runningAt(m) {
			return fmt.Errorf("%s of a dev cluster in %s is still running at %s (process ids of the last start in %s): stop those processes first",
				m.ID, c.dir, m.HTTPAddr, filepath.Join(c.dir, PidsFile))
		}
	}
	return nil
}

// runningAt reports whether a holdfast node answers at m's HTTP address
// with m's id and Raft address.
func (c *cluster) runningAt(m member) bool {
	code, body, err := c.get(m.HTTPAddr, "/cluster/status")
	var st struct {
		NodeID   string `json:"node_id"`
		RaftAddr string `json:"raft_addr"`
	}
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		return false
	}
	return st.NodeID == m.ID && st.RaftAddr == m.RaftAddr
}

// allocate returns n nodes' addresses: the recorded ones that are free
// now, new free loopback ports for the rest. moved describes each recorded
// address that had to be replaced.
func allocate(n int, recorded *portsJSON) (members []member, moved []string, err error) {
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			_ = ln.Close()
		}
	}()
	// Every address is held open until all are chosen, so the kernel
	// cannot hand the same port out twice.
	pick := func(old, what string) (string, error) {
		if old != "" {
			ln, err := net.Listen("tcp", old)
			if err == nil {
				held = append(held, ln)
				return old, nil
			}
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", fmt.Errorf("pick a free loopback port: %w", err)
		}
		held = append(held, ln)
		addr := ln.Addr().String()
		if old != "" {
			moved = append(moved, fmt.Sprintf("%s address %s is taken; using %s instead", what, old, addr))
		}
		return addr, nil
	}
	for i := 0; i < n; i++ {
		var old member
		if recorded != nil {
			old = recorded.Nodes[i]
		}
		m := member{ID: nodeID(i)}
		if m.HTTPAddr, err = pick(old.HTTPAddr, m.ID+"'s HTTP"); err != nil {
			return nil, nil, err
		}
		if m.RaftAddr, err = pick(old.RaftAddr, m.ID+"'s Raft"); err != nil {
			return nil, nil, err
		}
		members = append(members, m)
	}
	return members, moved, nil
}

func nodeID(i int) string { return "n" + strconv.Itoa(i+1) }

// nodeArgs returns the command line (after the executable) of member i of
// members: serve with its id, data directory and addresses; with more than
// one member also --bootstrap-expect and --join naming the others' HTTP
// addresses (ignored by a node that already has state, except that a node
// on a new Raft address reports it through them).
func nodeArgs(dir string, members []member, i int) []string {
	m := members[i]
	args := []string{"serve",
		"--node-id", m.ID,
		"--data-dir", filepath.Join(dir, m.ID),
		"--http-addr", m.HTTPAddr,
		"--raft-addr", m.RaftAddr,
	}
	if len(members) > 1 {
		var others []string
		for j, o := range members {
			if j != i {
				others = append(others, o.HTTPAddr)
			}
		}
		args = append(args, "--bootstrap-expect", strconv.Itoa(len(members)), "--join", strings.Join(others, ","))
	}
	return args
}

// nodeEnv is env without HOLDFAST_* variables.
func nodeEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "HOLDFAST_") {
			out = append(out, kv)
		}
	}
	return out
}

// start starts every node (see startNodes) from a goroutine locked to its
// OS thread until ended is closed, which also starts again every node that
// exited (requests on c.spawn). On Linux the kernel sends a node its
// Pdeathsig when the thread that forked it exits, not only the process,
// and the Go runtime ends a thread whenever a goroutine locked to it
// returns (in any package, on whatever thread it was scheduled); a thread
// that no other goroutine may run on lives until the run ends. Run closes
// ended once every node has been stopped; the goroutine then returns
// still locked and the runtime ends its thread, by which time no node is
// left to signal. (Elsewhere the lock is not needed; it costs one thread.)
func (c *cluster) start(members []member, ended <-chan struct{}) error {
	errc := make(chan error, 1)
	c.spawn = make(chan spawnRequest)
	go func() {
		runtime.LockOSThread()
		errc <- c.startNodes(members)
		for {
			select {
			case r := <-c.spawn:
				r.errc <- c.startNode(r.n)
			case <-ended:
				return
			}
		}
	}()
	return <-errc
}

// startNodes starts every node and records their process ids.
func (c *cluster) startNodes(members []member) error {
	c.exits = make(chan *node, len(members))
	c.restarts = make(chan *node, len(members))
	c.readied = make(chan readyAgain)
	c.env = nodeEnv(c.cfg.Env)
	for i, m := range members {
		n := &node{
			member:  m,
			dataDir: filepath.Join(c.dir, m.ID),
			logPath: filepath.Join(c.dir, m.ID+".log"),
			args:    nodeArgs(c.dir, members, i),
		}
		if err := c.startNode(n); err != nil {
			return err
		}
		c.nodes = append(c.nodes, n)
	}
	return c.recordPids()
}

// recordPids writes the running nodes' process ids to the pids file.
func (c *cluster) recordPids() error {
	var pids strings.Builder
	for _, n := range c.nodes {
		if !n.exited() {
			fmt.Fprintf(&pids, "%s %d\n", n.ID, n.cmd.Process.Pid)
		}
	}
	if err := atomicfile.Write(filepath.Join(c.dir, PidsFile), []byte(pids.String())); err != nil {
		return fmt.Errorf("record the process ids: %w", err)
	}
	return nil
}

// startNode starts n's process; it must run on the spawning goroutine.
func (c *cluster) startNode(n *node) error {
	args := n.args
	if err := atomicfile.MkdirAll(n.dataDir, 0o700); err != nil {
		return fmt.Errorf("create the data directory of %s: %w", n.ID, err)
	}
	f, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open the log of %s: %w", n.ID, err)
	}
	defer f.Close() // the child has its own descriptor
	fmt.Fprintf(f, "=== holdfast dev: starting %s at %s: %s %s\n", n.ID, time.Now().Format(time.RFC3339), c.cfg.Executable, strings.Join(args, " "))
	cmd := exec.Command(c.cfg.Executable, args...)
	cmd.Dir = c.dir
	cmd.Env = c.env
	cmd.Stdout = f
	cmd.Stderr = f
	// A process group of its own: a terminal's Ctrl-C or SIGHUP reaches
	// only this process, which forwards one SIGTERM (a second signal would
	// make the node exit at once). The node never touches the terminal (its
	// stdin is /dev/null, its output goes to its log), so running in a
	// background group does not stop it. On Linux it also gets SIGTERM if
	// this process dies without stopping it.
	cmd.SysProcAttr = nodeProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s (%s): %w", n.ID, c.cfg.Executable, err)
	}
	n.cmd = cmd
	n.done = make(chan struct{})
	go func() {
		err := cmd.Wait()
		switch {
		case cmd.ProcessState != nil:
			n.state, n.ok = cmd.ProcessState.String(), cmd.ProcessState.Success()
		case err != nil:
			n.state = err.Error()
		default:
			n.state = "exited"
		}
		close(n.done)
		c.exits <- n
	}()
	return nil
}

// waitReady waits until every node answers 200 on /readyz. It returns
// stopped=true if a signal came first (the nodes are then being stopped:
// finishStop completes it).
func (c *cluster) waitReady() (stopped bool, err error) {
	deadline := time.NewTimer(c.cfg.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	why := make([]string, len(c.nodes))
	for {
		all := true
		for i, n := range c.nodes {
			var ok bool
			if ok, why[i] = c.ready(n); !ok {
				all = false
			}
		}
		if all {
			return false, nil
		}
		select {
		case sig := <-c.cfg.Signals:
			c.beginStop(sig)
			return true, nil
		case n := <-c.exits:
			return c.handleExit(n, "exited before it was ready")
		case <-deadline.C:
			for i, n := range c.nodes {
				if why[i] != "" {
					e := &NodeError{Node: n.ID, Problem: fmt.Sprintf("was not ready within %v (%s)", c.cfg.ReadyTimeout, why[i]),
						LogPath: n.logPath, LogTail: n.tail()}
					if c.moved {
						e.Hint = "its addresses changed since the last run (see the warning above): try --clean"
					}
					return false, e
				}
			}
			return false, fmt.Errorf("the cluster was not ready within %v", c.cfg.ReadyTimeout)
		case <-tick.C:
		}
	}
}

// ready reports whether n answers 200 on /readyz and its /cluster/status
// lists exactly the dev cluster's nodes, as voters, at the addresses they
// were given (a follower's HTTP address reaches the others a moment after
// it first answers ready); reason says why not.
func (c *cluster) ready(n *node) (bool, string) {
	code, body, err := c.get(n.HTTPAddr, "/readyz")
	if err != nil {
		return false, err.Error()
	}
	if code != http.StatusOK {
		return false, fmt.Sprintf("/readyz: %d %s", code, strings.TrimSpace(string(body)))
	}
	code, body, err = c.get(n.HTTPAddr, "/cluster/status")
	if err != nil {
		return false, err.Error()
	}
	var st struct {
		Nodes []struct {
			member
			Voter bool `json:"voter"`
		} `json:"nodes"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
		return false, fmt.Sprintf("/cluster/status: %d %s", code, strings.TrimSpace(string(body)))
	}
	var got, want []string
	for _, m := range st.Nodes {
		got = append(got, fmt.Sprintf("%s(http %s, raft %s, voter %t)", m.ID, m.HTTPAddr, m.RaftAddr, m.Voter))
	}
	for _, o := range c.nodes {
		want = append(want, fmt.Sprintf("%s(http %s, raft %s, voter true)", o.ID, o.HTTPAddr, o.RaftAddr))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return false, fmt.Sprintf("its cluster status lists %s, not yet %s", strings.Join(got, ", "), strings.Join(want, ", "))
	}
	return true, ""
}

// get fetches http://addr/path and returns the status code and (the start
// of) the body.
func (c *cluster) get(addr, path string) (int, []byte, error) {
	cl, err := client.New(client.Config{Addrs: []string{addr}, Timeout: probeTimeout})
	if err != nil {
		return 0, nil, fmt.Errorf("%s of %s: %w", path, addr, err)
	}
	defer cl.CloseIdle()
	resp, err := cl.Do(context.Background(), client.Request{Method: http.MethodGet, Path: path, Once: true})
	if err != nil {
		return 0, nil, fmt.Errorf("%s of %s: %w", path, addr, err)
	}
	return resp.Status, resp.Body, nil
}

// handleExit deals with a node that exited while none was asked to stop:
// the others are stopped and a *NodeError returned. A stop signal that is
// already waiting wins: the stop it asked for is under way (finishStop
// names the node that did not exit cleanly).
func (c *cluster) handleExit(n *node, problem string) (stopped bool, err error) {
	select {
	case sig := <-c.cfg.Signals:
		c.beginStop(sig)
		return true, nil
	default:
	}
	fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %s %s (%s); stopping the others\n", n.ID, problem, n.state)
	c.stopAll()
	return false, &NodeError{Node: n.ID, Problem: fmt.Sprintf("%s (%s)", problem, n.state), LogPath: n.logPath, LogTail: n.tail()}
}

func (c *cluster) printTable() {
	w := c.cfg.Stdout
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.HTTPAddr
		fmt.Fprintf(w, "%s  http://%s  raft %s  data %s  log %s\n", n.ID, n.HTTPAddr, n.RaftAddr, n.dataDir, n.logPath)
	}
	fmt.Fprintf(w, "export HOLDFAST_ADDR=%s\n", strings.Join(addrs, ","))
	fmt.Fprintf(w, "every node is ready; Ctrl-C stops them all (a node that stops is started again after %v)\n", c.cfg.RestartDelay)
}

// wait runs the cluster until a signal, then stops the nodes and returns
// nil. A node that exits meanwhile is started again after RestartDelay, as
// a supervisor would, while the others keep serving, and named once it is
// ready again; one that exits CrashLimit times within CrashWindow, or
// cannot be started again, is left down. Once every node is left down it
// returns an error wrapping ErrAllDown.
func (c *cluster) wait() error {
	for {
		select {
		case sig := <-c.cfg.Signals:
			c.beginStop(sig)
			return nil
		case n := <-c.exits:
			c.nodeExited(n)
		case n := <-c.restarts:
			c.restart(n)
		case r := <-c.readied:
			select {
			case <-r.done: // it exited again since
			default:
				fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %s is ready again, %v after its restart\n", r.n.ID, time.Since(r.at).Round(100*time.Millisecond))
			}
		}
		if err := c.allDown(); err != nil {
			return err
		}
	}
}

// allDown returns an error wrapping ErrAllDown, naming every node and why
// it is down, once every node is left down; else nil.
func (c *cluster) allDown() error {
	why := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		if !n.down {
			return nil
		}
		why[i] = n.downReport()
	}
	return fmt.Errorf("%w and none will be started again: %s; nothing is left to serve: run holdfast dev again (the same command) to start the cluster on its data",
		ErrAllDown, strings.Join(why, "; "))
}

// nodeExited says which node stopped and how, then schedules its restart
// or leaves it down.
func (c *cluster) nodeExited(n *node) {
	now := time.Now()
	n.exitTimes = append(slices.DeleteFunc(n.exitTimes, func(t time.Time) bool { return now.Sub(t) >= c.cfg.CrashWindow }), now)
	if err := c.recordPids(); err != nil {
		fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %v\n", err)
	}
	if len(n.exitTimes) >= c.cfg.CrashLimit {
		n.leaveDown(fmt.Sprintf("left down after it exited %d times within %v, last %s", len(n.exitTimes), c.cfg.CrashWindow, n.state))
		fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %s exited (%s), %d times within %v: leaving it down; %s. "+
			"Its log is %s; to bring it back, start holdfast dev again (Ctrl-C, then the same command), or run it yourself: %s %s\n",
			n.ID, n.state, len(n.exitTimes), c.cfg.CrashWindow, c.others(n), n.logPath, c.cfg.Executable, strings.Join(n.args, " "))
		return
	}
	fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %s exited (%s); %s; restarting it in %v (log %s)\n",
		n.ID, n.state, c.others(n), c.cfg.RestartDelay, n.logPath)
	n.restartAt = time.AfterFunc(c.cfg.RestartDelay, func() { c.restarts <- n })
}

// others says whether the nodes other than n, which just exited, still
// run.
func (c *cluster) others(n *node) string {
	for _, o := range c.nodes {
		if o != n && !o.exited() {
			return "the others keep serving"
		}
	}
	if len(c.nodes) == 1 {
		return "it is the only node"
	}
	return "no other node is running"
}

// restart starts n again, on the spawning goroutine, and watches for it
// to be ready.
func (c *cluster) restart(n *node) {
	n.restartAt = nil
	r := spawnRequest{n: n, errc: make(chan error, 1)}
	c.spawn <- r
	if err := <-r.errc; err != nil {
		n.leaveDown(fmt.Sprintf("could not be restarted: %v", err))
		fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %s could not be restarted: %v; leaving it down\n", n.ID, err)
		return
	}
	fmt.Fprintf(c.cfg.Stderr, "holdfast dev: restarted %s (pid %d)\n", n.ID, n.cmd.Process.Pid)
	if err := c.recordPids(); err != nil {
		fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %v\n", err)
	}
	go c.watchReady(readyAgain{n: n, done: n.done, at: time.Now()})
}

// watchReady polls r's node until it is ready, then hands r to wait on
// c.readied. It gives up when that process exits or the run ends.
func (c *cluster) watchReady(r readyAgain) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if ok, _ := c.ready(r.n); ok {
			select {
			case c.readied <- r:
			case <-r.done:
			case <-c.ended:
			}
			return
		}
		select {
		case <-tick.C:
		case <-r.done:
			return
		case <-c.ended:
			return
		}
	}
}

// beginStop carries out the graceful stop after sig (see stopAll). The
// signal reached only this process: the nodes run in process groups of
// their own.
func (c *cluster) beginStop(sig os.Signal) {
	fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %v: stopping every node (a second signal kills them)\n", sig)
	c.stopAll()
}

// finishStop reports how the stop after a signal went: "stopped" when
// every node exited with status 0, an error naming the others.
func (c *cluster) finishStop() error {
	var bad []string
	for _, n := range c.nodes {
		if !n.exited() {
			bad = append(bad, fmt.Sprintf("%s (still running as pid %d)", n.ID, n.cmd.Process.Pid))
		} else if n.down {
			bad = append(bad, n.downReport())
		} else if !n.ok {
			bad = append(bad, fmt.Sprintf("%s (%s, log %s)", n.ID, n.state, n.logPath))
		}
	}
	if err := os.Remove(filepath.Join(c.dir, PidsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %v\n", err)
	}
	if len(bad) > 0 {
		return fmt.Errorf("stopped, but not cleanly: %s", strings.Join(bad, "; "))
	}
	fmt.Fprintln(c.cfg.Stdout, "stopped")
	return nil
}

// stopAll stops every node that is still running and waits for all of
// them: each gets exactly one SIGTERM (`holdfast serve` exits at once on a
// second signal), then SIGKILL after StopTimeout or on a signal from
// Config.Signals.
func (c *cluster) stopAll() {
	for _, n := range c.nodes {
		if n.restartAt != nil {
			n.restartAt.Stop()
		}
	}
	deadline := time.NewTimer(c.cfg.StopTimeout)
	defer deadline.Stop()
	for _, n := range c.nodes {
		if !n.exited() {
			_ = n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, n := range c.nodes {
		select {
		case <-n.done:
		case <-deadline.C:
			fmt.Fprintf(c.cfg.Stderr, "holdfast dev: not every node stopped within %v; killing the rest\n", c.cfg.StopTimeout)
			c.killAll()
			return
		case <-c.cfg.Signals:
			c.killAll()
			return
		}
	}
}

// killAll kills every node still running and waits (bounded) for each.
func (c *cluster) killAll() {
	for _, n := range c.nodes {
		if !n.exited() {
			_ = n.cmd.Process.Kill()
		}
	}
	t := time.NewTimer(killWait)
	defer t.Stop()
	for _, n := range c.nodes {
		select {
		case <-n.done:
		case <-t.C:
			fmt.Fprintf(c.cfg.Stderr, "holdfast dev: %s (pid %d) did not exit after SIGKILL\n", n.ID, n.cmd.Process.Pid)
			return
		}
	}
}

// tail returns the last lines of the file at path (at most the last 64 KiB
// of it), or a note saying why it cannot be read.
func tail(path string, lines int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read the log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(cannot read the log: %v)", err)
	}
	from := max(0, st.Size()-tailBytes)
	b := make([]byte, st.Size()-from)
	if _, err := f.ReadAt(b, from); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(cannot read the log: %v)", err)
	}
	parts := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if from > 0 && len(parts) > 1 {
		parts = parts[1:] // the first line is cut
	}
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

// marshalJSON encodes v as indented JSON ending with a newline.
func marshalJSON(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
