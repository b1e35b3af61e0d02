//go:build unix

package harness

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Node is one holdfast process slot: its id, addresses, data directory and
// log file stay the same across restarts. Fields may be changed while the
// node is not running; they take effect at the next Start.
type Node struct {
	c *Cluster

	// Index is the node's position in its cluster.
	Index int
	// ID is passed as --node-id on every start, unless KeptID is set.
	ID string
	// KeptID leaves --node-id out of every start: the node takes the id
	// kept in its data directory, or makes one and keeps it. ID then only
	// names the slot in the harness's messages.
	KeptID bool
	// HTTPAddr and RaftAddr are where the node listens (--http-addr,
	// --raft-addr). Tests talk to HTTPAddr.
	HTTPAddr string
	RaftAddr string
	// HTTPAdvertise and RaftAdvertise, when set, are passed as
	// --http-advertise and --raft-advertise (for example the address of a
	// fault proxy in front of this node).
	HTTPAdvertise string
	RaftAdvertise string
	// DataDir is passed as --data-dir.
	DataDir string
	// LogPath receives the process's stdout and stderr, appended across
	// restarts, each start preceded by a "=== harness:" line.
	LogPath string
	// ClusterKey is given to the process as HOLDFAST_CLUSTER_KEY when not empty.
	ClusterKey string
	// Args are extra flags given on every start, after the cluster's and
	// before those of one Start call.
	Args []string
	// Env holds extra environment variables (KEY=value) for every start.
	Env []string
	// TLS is the node certificate of a TLS cluster (zero otherwise); it is
	// passed with the peer flags, before Args.
	TLS TLSFiles
	// Binary, when set, is the holdfast binary of this node's starts instead
	// of its cluster's (another build, e.g. an older release in an upgrade
	// test).
	Binary string

	mu        sync.Mutex
	cmd       *exec.Cmd
	done      chan struct{} // closed when the current process has exited
	exitCode  int
	exitState string
	expected  bool // the harness stopped or killed the process on purpose
	paused    bool
	starts    int
	logStart  int64 // log file offset where the current start's output begins
	lastArgs  []string
}

// State of a node's process.
const (
	NotStarted = "not started"
	Running    = "running"
	Paused     = "paused"
	Exited     = "exited"
)

// State reports whether the process is running, paused, exited or never started.
func (n *Node) State() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stateLocked()
}

func (n *Node) stateLocked() string {
	switch {
	case n.cmd == nil:
		return NotStarted
	case isClosed(n.done):
		return Exited
	case n.paused:
		return Paused
	}
	return Running
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Running reports whether the process is alive and not paused.
func (n *Node) Running() bool { return n.State() == Running }

// Alive reports whether the process exists (running or paused).
func (n *Node) Alive() bool {
	s := n.State()
	return s == Running || s == Paused
}

// String names the node for messages.
func (n *Node) String() string { return fmt.Sprintf("%s(%s)", n.ID, n.HTTPAddr) }

// CommandLine returns the flags of the latest start.
func (n *Node) CommandLine() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.lastArgs...)
}

func (n *Node) args(extra []string) []string {
	o := n.c.opts
	a := []string{"serve"}
	if !n.KeptID {
		a = append(a, "--node-id", n.ID)
	}
	a = append(a,
		"--data-dir", n.DataDir,
		"--http-addr", n.HTTPAddr,
		"--raft-addr", n.RaftAddr,
		"--log-level", o.LogLevel,
	)
	if !o.NoRaftTiming {
		a = append(a, "--raft-heartbeat-timeout", o.HeartbeatTimeout.String(), "--raft-election-timeout", o.ElectionTimeout.String())
	}
	if n.HTTPAdvertise != "" {
		a = append(a, "--http-advertise", n.HTTPAdvertise)
	}
	if n.RaftAdvertise != "" {
		a = append(a, "--raft-advertise", n.RaftAdvertise)
	}
	if n.TLS.Cert != "" {
		a = append(a, PeerArgs(n.TLS)...)
		if o.TLSClientAuth {
			a = append(a, "--tls-client-ca-file", n.TLS.CA, "--tls-client-auth", "require")
		}
	}
	a = append(a, o.Args...)
	a = append(a, n.Args...)
	return append(a, extra...)
}

func (n *Node) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		// The developer's own HOLDFAST_* settings must not leak into tests.
		if !strings.HasPrefix(kv, "HOLDFAST_") {
			env = append(env, kv)
		}
	}
	if n.ClusterKey != "" {
		env = append(env, "HOLDFAST_CLUSTER_KEY="+n.ClusterKey)
	}
	// No free-space floor unless a test asks for one (--min-free-disk
	// on the command line wins): what a test sees must not depend on the
	// free space of the machine it runs on. A build before the floor
	// ignores the variable.
	env = append(env, "HOLDFAST_MIN_FREE_DISK=0")
	env = append(env, n.c.opts.Env...)
	return append(env, n.Env...)
}

// Start starts the process with the node's data directory. extra flags come
// last, so they override earlier ones (Go's flag package keeps the last
// value). It returns once the process is started, not once it serves.
func (n *Node) Start(extra ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.stateLocked(); s == Running || s == Paused {
		return fmt.Errorf("start %s: already %s", n, s)
	}
	args := n.args(extra)
	f, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", n, err)
	}
	defer f.Close() // the child keeps its own descriptor
	n.starts++
	fmt.Fprintf(f, "=== harness: start #%d of %s at %s: %s\n", n.starts, n.ID, time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	off, err := f.Seek(0, 2)
	if err != nil {
		return fmt.Errorf("log offset of %s: %w", n, err)
	}
	bin := n.c.env.Binary
	if n.Binary != "" {
		bin = n.Binary
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = n.c.dir
	cmd.Env = n.env()
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", n, err)
	}
	done := make(chan struct{})
	n.cmd, n.done, n.expected, n.paused = cmd, done, false, false
	n.exitCode, n.exitState, n.logStart, n.lastArgs = -1, "", off, args
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		defer n.mu.Unlock()
		if cmd.ProcessState != nil {
			n.exitCode = cmd.ProcessState.ExitCode()
			n.exitState = cmd.ProcessState.String()
		} else if err != nil {
			n.exitState = err.Error()
		}
		close(done)
	}()
	return nil
}

func (n *Node) signal(sig syscall.Signal, expectExit bool) (chan struct{}, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s := n.stateLocked(); s != Running && s != Paused {
		return nil, fmt.Errorf("signal %v to %s: process is %s", sig, n, s)
	}
	if expectExit {
		n.expected = true
	}
	if err := n.cmd.Process.Signal(sig); err != nil {
		return nil, fmt.Errorf("signal %v to %s: %w", sig, n, err)
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	case syscall.SIGTERM, syscall.SIGINT:
		if n.paused {
			// A stopped process handles the signal only once continued.
			if err := n.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				return nil, fmt.Errorf("continue %s: %w", n, err)
			}
			n.paused = false
		}
	}
	return n.done, nil
}

// Pid is the process id of the node's current process (0 before its start).
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Signal sends sig to the process. SIGSTOP and SIGCONT also update the
// paused state; other signals do not mark the exit as expected.
func (n *Node) Signal(sig syscall.Signal) error {
	_, err := n.signal(sig, false)
	return err
}

// Stop sends SIGTERM and waits up to timeout for the process to exit. It
// returns the exit code; if the process does not exit in time it is killed
// and an error is returned.
func (n *Node) Stop(timeout time.Duration) (int, error) {
	done, err := n.signal(syscall.SIGTERM, true)
	if err != nil {
		return -1, err
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
		code, _ := n.Exit()
		return code, nil
	case <-t.C:
	}
	_ = n.Kill()
	return -1, fmt.Errorf("%s did not exit within %v of SIGTERM; killed it", n, timeout)
}

// Kill sends SIGKILL and waits for the process to be gone.
func (n *Node) Kill() error {
	done, err := n.signal(syscall.SIGKILL, true)
	if err != nil {
		return err
	}
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s still running 30s after SIGKILL", n)
	}
}

// Pause stops the process with SIGSTOP: it keeps its sockets but does nothing.
func (n *Node) Pause() error {
	_, err := n.signal(syscall.SIGSTOP, false)
	return err
}

// Resume continues a paused process with SIGCONT.
func (n *Node) Resume() error {
	_, err := n.signal(syscall.SIGCONT, false)
	return err
}

// Wait waits up to timeout for the process to exit on its own and returns
// its exit code.
func (n *Node) Wait(timeout time.Duration) (int, error) {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return -1, fmt.Errorf("%s was never started", n)
	}
	select {
	case <-done:
		code, _ := n.Exit()
		return code, nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("%s still running after %v", n, timeout)
	}
}

// Exit returns the exit code and a description ("exit status 1", "signal:
// killed") of the latest process, or -1 and "" if it has not exited.
func (n *Node) Exit() (int, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil || !isClosed(n.done) {
		return -1, ""
	}
	return n.exitCode, n.exitState
}

// UnexpectedExit describes the exit of a process the harness did not stop,
// or returns "".
func (n *Node) UnexpectedExit() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done == nil || !isClosed(n.done) || n.expected {
		return ""
	}
	return n.exitState
}

// Wipe deletes the node's data directory. The process must not be running.
func (n *Node) Wipe() error {
	if n.Alive() {
		return fmt.Errorf("wipe %s: process is still alive", n)
	}
	if err := os.RemoveAll(n.DataDir); err != nil {
		return fmt.Errorf("wipe %s: %w", n, err)
	}
	return nil
}

// Log returns the whole log file (every start).
func (n *Node) Log() string {
	b, err := os.ReadFile(n.LogPath)
	if err != nil {
		return ""
	}
	return string(b)
}

// LogSinceStart returns what the latest process has written so far.
func (n *Node) LogSinceStart() string {
	n.mu.Lock()
	off := n.logStart
	n.mu.Unlock()
	b, err := os.ReadFile(n.LogPath)
	if err != nil || int64(len(b)) < off {
		return ""
	}
	return string(b[off:])
}

// LogMatches returns every match of re (with its groups) in the latest
// process's log.
func (n *Node) LogMatches(re *regexp.Regexp) [][]string {
	return re.FindAllStringSubmatch(n.LogSinceStart(), -1)
}

// LogTail returns the last lines of the whole log.
func (n *Node) LogTail(lines int) string {
	b := bytes.TrimRight([]byte(n.Log()), "\n")
	parts := bytes.Split(b, []byte("\n"))
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return string(bytes.Join(parts, []byte("\n")))
}

// Cluster is the cluster the node slot belongs to.
func (n *Node) Cluster() *Cluster { return n.c }
