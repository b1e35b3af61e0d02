//go:build unix

package harness

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// KeepLogsEnv, when set in the environment, keeps the node logs of passing
// tests too (they are always kept for failing tests).
const KeepLogsEnv = "HOLDFAST_TEST_KEEP_LOGS"

// Options configure a Cluster. Zero values take the documented defaults.
type Options struct {
	// Dir holds the nodes' data directories and logs (default t.TempDir()).
	Dir string
	// ClusterKey is given to every node created by the cluster.
	ClusterKey string
	// HeartbeatTimeout and ElectionTimeout are Raft's (default 500ms each:
	// hashicorp/raft refuses a heartbeat timeout below its 500ms leader
	// lease timeout, which holdfast does not expose).
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	// LogLevel is passed as --log-level (default "info").
	LogLevel string
	// Args are extra flags given to every node on every start.
	Args []string
	// Env holds extra environment variables (KEY=value) for every node.
	Env []string
	// StopTimeout bounds a graceful stop before the harness kills the
	// process (default 30s).
	StopTimeout time.Duration
	// WaitTimeout bounds WaitLeader, WaitAllReady, WaitMembers and
	// WaitSameState (default 45s: a restarted follower may wait out Raft's
	// replication backoff, up to about 10s).
	WaitTimeout time.Duration
	// RequestTimeout bounds one HTTP request (default 30s).
	RequestTimeout time.Duration
	// LogTailLines is how many lines of each node's log are printed when the
	// test fails (default 60).
	LogTailLines int
	// TLS gives every node a node certificate from a CA made for the
	// cluster (with the binary's `holdfast tls` commands), used for the
	// links between nodes and the HTTP listener; the cluster's client
	// speaks HTTPS trusting that CA.
	TLS bool
	// NoRaftTiming leaves out the Raft timing flags, so the nodes run with
	// holdfast's default timing.
	NoRaftTiming bool
	// TLSClientAuth (with TLS) starts every node with --tls-client-auth
	// require against the cluster's CA, and the harness's client presents a
	// client certificate of that CA.
	TLSClientAuth bool
}

func (o *Options) setDefaults() {
	if o.HeartbeatTimeout == 0 {
		o.HeartbeatTimeout = 500 * time.Millisecond
	}
	if o.ElectionTimeout == 0 {
		o.ElectionTimeout = 500 * time.Millisecond
	}
	if o.LogLevel == "" {
		o.LogLevel = "info"
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 30 * time.Second
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = 45 * time.Second
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 30 * time.Second
	}
	if o.LogTailLines == 0 {
		o.LogTailLines = 60
	}
}

// Cluster is a set of node slots of one test. It kills every process and
// reports the logs of a failed test in t.Cleanup.
type Cluster struct {
	t      testing.TB
	env    *Env
	opts   Options
	dir    string
	client *http.Client
	scheme string
	pki    *PKI // nil without Options.TLS

	mu    sync.Mutex
	nodes []*Node
}

// NewCluster creates a cluster of n node slots (none started).
func (e *Env) NewCluster(t testing.TB, n int, opts Options) *Cluster {
	t.Helper()
	opts.setDefaults()
	dir := opts.Dir
	if dir == "" {
		dir = t.TempDir() // registered before the kill cleanup, so removed after it
	}
	c := &Cluster{t: t, env: e, opts: opts, dir: dir, client: newHTTPClient(opts.RequestTimeout), scheme: "http"}
	if opts.TLS {
		p, err := e.NewPKI(filepath.Join(dir, "tls"))
		if err != nil {
			t.Fatalf("make the cluster's CA: %v", err)
		}
		var mine *TLSFiles
		if opts.TLSClientAuth {
			f, err := p.Client("harness")
			if err != nil {
				t.Fatalf("make the harness's client certificate: %v", err)
			}
			mine = &f
		}
		cfg, err := ClientTLS(p.CAFile(), mine)
		if err != nil {
			t.Fatal(err)
		}
		c.pki, c.scheme, c.client = p, "https", NewTLSClient(cfg, opts.RequestTimeout)
	}
	t.Cleanup(c.cleanup)
	for i := 0; i < n; i++ {
		c.AddNode()
	}
	return c
}

// AddNode creates a new node slot with its own ports, data directory and
// log file; it is not started.
func (c *Cluster) AddNode() *Node {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	i := len(c.nodes)
	httpAddr, err := c.env.Ports.Addr()
	if err != nil {
		c.t.Fatalf("allocate port: %v", err)
	}
	raftAddr, err := c.env.Ports.Addr()
	if err != nil {
		c.t.Fatalf("allocate port: %v", err)
	}
	id := fmt.Sprintf("node%d", i)
	if err := os.MkdirAll(filepath.Join(c.dir, "logs"), 0o755); err != nil {
		c.t.Fatalf("create log dir: %v", err)
	}
	n := &Node{
		c:          c,
		Index:      i,
		ID:         id,
		HTTPAddr:   httpAddr,
		RaftAddr:   raftAddr,
		DataDir:    filepath.Join(c.dir, id),
		LogPath:    filepath.Join(c.dir, "logs", id+".log"),
		ClusterKey: c.opts.ClusterKey,
	}
	if c.pki != nil {
		f, err := c.pki.Node(id)
		if err != nil {
			c.t.Fatalf("make the certificate of %s: %v", id, err)
		}
		n.TLS = f
	}
	c.nodes = append(c.nodes, n)
	return n
}

// PKI is the cluster's certificate authority (nil without Options.TLS).
func (c *Cluster) PKI() *PKI { return c.pki }

// Scheme is "https" for a TLS cluster, else "http".
func (c *Cluster) Scheme() string { return c.scheme }

// Client is the HTTP client the harness talks to the nodes with.
func (c *Cluster) Client() *http.Client { return c.client }

// Nodes returns every node slot, started or not.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// Node returns slot i.
func (c *Cluster) Node(i int) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i]
}

// Running returns the nodes whose process is alive and not paused.
func (c *Cluster) Running() []*Node {
	var out []*Node
	for _, n := range c.Nodes() {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// Except returns nodes without the excluded ones.
func Except(nodes []*Node, excluded ...*Node) []*Node {
	var out []*Node
	for _, n := range nodes {
		if !slices.Contains(excluded, n) {
			out = append(out, n)
		}
	}
	return out
}

// IDs returns the ids of nodes.
func IDs(nodes []*Node) []string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
	}
	return ids
}

// Key returns the cluster key of the options.
func (c *Cluster) Key() string { return c.opts.ClusterKey }

// Dir is the directory holding the nodes' data and logs.
func (c *Cluster) Dir() string { return c.dir }

// BootstrapArgs are the flags that make n form a new cluster with every
// other node slot: --bootstrap-expect <all slots> --join <the others>.
func (c *Cluster) BootstrapArgs(n *Node) []string {
	all := c.Nodes()
	return []string{"--bootstrap-expect", strconv.Itoa(len(all)), "--join", JoinList(Except(all, n)...)}
}

// JoinList is the --join value naming the nodes' HTTP addresses.
func JoinList(nodes ...*Node) string {
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.HTTPAddr
	}
	return strings.Join(addrs, ",")
}

// Start starts n, failing the test on error.
func (c *Cluster) Start(n *Node, extra ...string) {
	c.t.Helper()
	if err := n.Start(extra...); err != nil {
		c.t.Fatal(err)
	}
}

// StartBootstrap starts every slot with BootstrapArgs at once, in the given
// order of indexes (default slot order).
func (c *Cluster) StartBootstrap(order ...int) {
	c.t.Helper()
	if len(order) == 0 {
		for i := range c.Nodes() {
			order = append(order, i)
		}
	}
	for _, i := range order {
		n := c.Node(i)
		c.Start(n, c.BootstrapArgs(n)...)
	}
}

// Stop sends SIGTERM and waits for the exit, failing the test if the
// process does not exit in time. It returns the exit code.
func (c *Cluster) Stop(n *Node) int {
	c.t.Helper()
	code, err := n.Stop(c.opts.StopTimeout)
	if err != nil {
		c.t.Fatal(err)
	}
	return code
}

// Kill sends SIGKILL and waits for the process to be gone.
func (c *Cluster) Kill(n *Node) {
	c.t.Helper()
	if err := n.Kill(); err != nil {
		c.t.Fatal(err)
	}
}

// Pause sends SIGSTOP.
func (c *Cluster) Pause(n *Node) {
	c.t.Helper()
	if err := n.Pause(); err != nil {
		c.t.Fatal(err)
	}
}

// Resume sends SIGCONT.
func (c *Cluster) Resume(n *Node) {
	c.t.Helper()
	if err := n.Resume(); err != nil {
		c.t.Fatal(err)
	}
}

// Restart stops n gracefully if it is alive and starts it again with the
// same data directory and the given extra flags.
func (c *Cluster) Restart(n *Node, extra ...string) {
	c.t.Helper()
	if n.Alive() {
		c.Stop(n)
	}
	c.Start(n, extra...)
}

// Wipe deletes n's data directory; n must not be running.
func (c *Cluster) Wipe(n *Node) {
	c.t.Helper()
	if err := n.Wipe(); err != nil {
		c.t.Fatal(err)
	}
}

// checkExits returns a permanent error if a node exited without the
// harness stopping it.
func (c *Cluster) checkExits() error {
	for _, n := range c.Nodes() {
		if how := n.UnexpectedExit(); how != "" {
			return fmt.Errorf("%w: %s exited unexpectedly (%s); log tail:\n%s", ErrPermanent, n, how, n.LogTail(30))
		}
	}
	return nil
}

// Eventually polls f (failing fast if a node dies unexpectedly) until it
// returns nil, failing the test after the cluster's WaitTimeout.
func (c *Cluster) Eventually(what string, f func() error) {
	c.t.Helper()
	c.EventuallyWithin(c.opts.WaitTimeout, what, f)
}

// EventuallyWithin is Eventually with an explicit timeout.
func (c *Cluster) EventuallyWithin(timeout time.Duration, what string, f func() error) {
	c.t.Helper()
	Eventually(c.t, timeout, what, func() error {
		if err := c.checkExits(); err != nil {
			return err
		}
		return f()
	})
}

func (c *Cluster) orRunning(nodes []*Node) []*Node {
	if len(nodes) == 0 {
		return c.Running()
	}
	return nodes
}

// Statuses returns the status of each node, keyed by id.
func (c *Cluster) Statuses(hash bool, nodes ...*Node) (map[string]Status, error) {
	out := map[string]Status{}
	for _, n := range c.orRunning(nodes) {
		var s Status
		var err error
		if hash {
			s, err = n.StatusWithHash()
		} else {
			s, err = n.Status()
		}
		if err != nil {
			return nil, err
		}
		out[n.ID] = s
	}
	return out, nil
}

// LeaderOf returns the leader the nodes agree on: exactly one of them says
// it is the leader, is ready, and every node names it as leader in the
// same term.
func (c *Cluster) LeaderOf(nodes ...*Node) (*Node, error) {
	nodes = c.orRunning(nodes)
	if len(nodes) == 0 {
		return nil, errors.New("no running nodes")
	}
	sts, err := c.Statuses(false, nodes...)
	if err != nil {
		return nil, err
	}
	var leader *Node
	for _, n := range nodes {
		if sts[n.ID].State == "leader" {
			if leader != nil {
				return nil, fmt.Errorf("two nodes say they lead: %s (term %d) and %s (term %d)", leader.ID, sts[leader.ID].Term, n.ID, sts[n.ID].Term)
			}
			leader = n
		}
	}
	if leader == nil {
		return nil, fmt.Errorf("no node says it leads: %s", summarize(sts))
	}
	ls := sts[leader.ID]
	if !ls.Ready {
		return nil, fmt.Errorf("leader %s is not ready yet", leader.ID)
	}
	for _, n := range nodes {
		s := sts[n.ID]
		if s.LeaderID != leader.ID || s.Term != ls.Term {
			return nil, fmt.Errorf("%s sees leader %q in term %d, %s leads in term %d", n.ID, s.LeaderID, s.Term, leader.ID, ls.Term)
		}
	}
	return leader, nil
}

func summarize(sts map[string]Status) string {
	var parts []string
	for id, s := range sts {
		parts = append(parts, fmt.Sprintf("%s=%s/term %d/leader %q", id, s.State, s.Term, s.LeaderID))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// WaitLeader waits until the nodes (default: every running node) agree on
// one ready leader and returns it.
func (c *Cluster) WaitLeader(nodes ...*Node) *Node {
	c.t.Helper()
	var leader *Node
	c.Eventually("an agreed, ready leader", func() error {
		l, err := c.LeaderOf(nodes...)
		leader = l
		return err
	})
	return leader
}

// WaitHealthy waits until n answers GET /healthz with 200.
func (c *Cluster) WaitHealthy(n *Node) {
	c.t.Helper()
	c.Eventually(n.ID+" healthy", func() error {
		r, err := n.Get("/healthz")
		if err != nil {
			return err
		}
		if r.Status != http.StatusOK {
			return fmt.Errorf("healthz: %s", r)
		}
		return nil
	})
}

// WaitAllReady waits until every node (default: every running node)
// answers GET /readyz with 200.
func (c *Cluster) WaitAllReady(nodes ...*Node) {
	c.t.Helper()
	c.Eventually("every node ready", func() error {
		for _, n := range c.orRunning(nodes) {
			r, err := n.Get("/readyz")
			if err != nil {
				return err
			}
			if r.Status != http.StatusOK {
				return fmt.Errorf("readyz of %s: %s", n.ID, r)
			}
		}
		return nil
	})
}

// MembersMatch reports whether s lists exactly members, all voters, with
// the addresses the harness gave them.
func MembersMatch(s Status, members []*Node) error {
	if len(s.Nodes) != len(members) {
		return fmt.Errorf("%s lists %d members %v, want %v", s.NodeID, len(s.Nodes), s.Nodes, IDs(members))
	}
	for _, n := range members {
		m, ok := s.Member(n.ID)
		switch {
		case !ok:
			return fmt.Errorf("%s does not list %s: %v", s.NodeID, n.ID, s.Nodes)
		case !m.Voter:
			return fmt.Errorf("%s lists %s as a non-voter", s.NodeID, n.ID)
		case m.RaftAddr != advertised(n.RaftAdvertise, n.RaftAddr):
			return fmt.Errorf("%s lists %s with raft_addr %q, want %q", s.NodeID, n.ID, m.RaftAddr, advertised(n.RaftAdvertise, n.RaftAddr))
		case m.HTTPAddr != advertised(n.HTTPAdvertise, n.HTTPAddr):
			return fmt.Errorf("%s lists %s with http_addr %q, want %q", s.NodeID, n.ID, m.HTTPAddr, advertised(n.HTTPAdvertise, n.HTTPAddr))
		}
	}
	return nil
}

func advertised(adv, addr string) string {
	if adv != "" {
		return adv
	}
	return addr
}

// WaitMembers waits until every observer (default: every running node)
// lists exactly members as voters with their addresses.
func (c *Cluster) WaitMembers(members []*Node, observers ...*Node) {
	c.t.Helper()
	c.Eventually(fmt.Sprintf("members %v everywhere", IDs(members)), func() error {
		for _, n := range c.orRunning(observers) {
			s, err := n.Status()
			if err != nil {
				return err
			}
			if err := MembersMatch(s, members); err != nil {
				return err
			}
		}
		return nil
	})
}

// StateHashes returns each node's state hash, keyed by id.
func (c *Cluster) StateHashes(nodes ...*Node) (map[string]string, error) {
	sts, err := c.Statuses(true, nodes...)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for id, s := range sts {
		out[id] = s.StateHash
	}
	return out, nil
}

// SameState reports the state hash if every node has applied the same
// index and has the same state hash.
func (c *Cluster) SameState(nodes ...*Node) (string, error) {
	sts, err := c.Statuses(true, nodes...)
	if err != nil {
		return "", err
	}
	var hash string
	var applied uint64
	first := ""
	for id, s := range sts {
		if first == "" {
			first, hash, applied = id, s.StateHash, s.AppliedIndex
			continue
		}
		if s.StateHash != hash || s.AppliedIndex != applied {
			return "", fmt.Errorf("%s has hash %.12s at applied index %d, %s has %.12s at %d", first, hash, applied, id, s.StateHash, s.AppliedIndex)
		}
	}
	return hash, nil
}

// WaitSameState waits until every node (default: every running node) has
// applied the same index with the same state hash, and returns the hash.
func (c *Cluster) WaitSameState(nodes ...*Node) string {
	c.t.Helper()
	var hash string
	c.Eventually("the same state everywhere", func() error {
		h, err := c.SameState(nodes...)
		hash = h
		return err
	})
	return hash
}

// WaitLog waits until the latest process of n has logged a line matching
// re and returns the submatches of the first such line.
func (c *Cluster) WaitLog(n *Node, re *regexp.Regexp) []string {
	c.t.Helper()
	var m []string
	c.Eventually(fmt.Sprintf("%s to log %q", n.ID, re), func() error {
		m = re.FindStringSubmatch(n.LogSinceStart())
		if m == nil {
			return errors.New("not yet")
		}
		return nil
	})
	return m
}

func (c *Cluster) cleanup() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		if n.Alive() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := n.Kill(); err != nil {
					c.t.Errorf("cleanup: %v", err)
				}
			}()
		}
	}
	wg.Wait()
	if tr, ok := c.client.Transport.(*http.Transport); ok {
		tr.CloseIdleConnections()
	}
	if !c.t.Failed() {
		if os.Getenv(KeepLogsEnv) != "" {
			if keep, err := c.keepLogs(); err == nil {
				c.t.Logf("node logs kept in %s", keep)
			}
		}
		return
	}
	keep, err := c.keepLogs()
	if err != nil {
		c.t.Logf("could not keep the node logs: %v", err)
	}
	for _, n := range c.Nodes() {
		how := "never started"
		if _, s := n.Exit(); s != "" {
			how = s
		}
		c.t.Logf("---- %s (%s), last command: %s\n---- log %s, last %d lines:\n%s", n, how,
			strings.Join(n.CommandLine(), " "), filepath.Join(keep, filepath.Base(n.LogPath)), c.opts.LogTailLines, n.LogTail(c.opts.LogTailLines))
	}
	if keep != "" {
		c.t.Logf("node logs kept in %s", keep)
	}
}

// keepLogs copies the logs out of the test's temporary directory, which is
// removed after the test.
func (c *Cluster) keepLogs() (string, error) {
	name := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, c.t.Name())
	dir, err := os.MkdirTemp("", "holdfast-logs-"+name+"-")
	if err != nil {
		return "", err
	}
	for _, n := range c.Nodes() {
		if err := CopyFile(n.LogPath, filepath.Join(dir, filepath.Base(n.LogPath))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return dir, err
		}
	}
	return dir, nil
}

// CopyFile copies src to dst (created or truncated); tests use it to keep
// logs and artifacts out of directories that are about to be removed.
func CopyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
