//go:build unix

package devcluster

import (
	"encoding/json"
	"errors"
	"flag"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/testutil"
)

// envFakeNode makes this test binary a fake node (see fakeNodeMain).
const envFakeNode = "DEVCLUSTER_TEST_FAKE_NODE"

// fakeNodeMain stands in for `holdfast serve` in the fast tests: at its
// --http-addr it answers /cluster/status with the dev cluster's nodes (from
// ports.json in its working directory, the dev directory) and /readyz with
// 200, or 503 while the file <node id>.unready exists there; it exits 0 on
// SIGTERM.
func fakeNodeMain(args []string) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	id := fs.String("node-id", "", "")
	httpAddr := fs.String("http-addr", "", "")
	fs.String("data-dir", "", "")
	fs.String("raft-addr", "", "")
	fs.Int("bootstrap-expect", 0, "")
	fs.String("join", "", "")
	if len(args) == 0 || args[0] != "serve" || fs.Parse(args[1:]) != nil {
		return 2
	}
	b, err := os.ReadFile(PortsFile)
	if err != nil {
		return 1
	}
	p, err := parsePorts(b)
	if err != nil {
		return 1
	}
	type voter struct {
		member
		Voter bool `json:"voter"`
	}
	var st struct {
		Nodes []voter `json:"nodes"`
	}
	for _, m := range p.Nodes {
		st.Nodes = append(st.Nodes, voter{m, true})
	}
	status, err := json.Marshal(st)
	if err != nil {
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if _, err := os.Stat(*id + ".unready"); err == nil {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready"))
	})
	mux.HandleFunc("/cluster/status", func(w http.ResponseWriter, _ *http.Request) { w.Write(status) })
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go http.Serve(ln, mux)
	<-sigs
	return 0
}

// fakeRun is Run in this process over fake nodes.
type fakeRun struct {
	dir            string
	exe            string // a link to this test binary: the nodes' executable
	stdout, stderr testutil.SyncBuffer
	sigs           chan os.Signal
	ran            chan error
}

// runFake runs a cluster of n fake nodes with a short restart pause; a
// node exiting twice within a minute is left down. The cleanup stops it.
func runFake(t *testing.T, n int) *fakeRun {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	r := &fakeRun{dir: filepath.Join(tmp, "dev"), exe: filepath.Join(tmp, "holdfast"), sigs: make(chan os.Signal, 1), ran: make(chan error, 1)}
	if err := os.Symlink(self, r.exe); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Nodes: n, Dir: r.dir, Executable: r.exe, Env: append(os.Environ(), envFakeNode+"=1"),
		Stdout: &r.stdout, Stderr: &r.stderr, Signals: r.sigs,
		RestartDelay: 50 * time.Millisecond, CrashLimit: 2, CrashWindow: time.Minute}
	go func() { r.ran <- Run(cfg) }()
	t.Cleanup(func() {
		select {
		case r.sigs <- syscall.SIGTERM:
		default:
		}
		select {
		case <-r.ran:
		case <-time.After(20 * time.Second):
			t.Error("Run did not return within 20 s of a signal")
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", r.stdout.String(), r.stderr.String())
		}
	})
	waitOutput(t, &r.stdout, "every node is ready", 20*time.Second)
	return r
}

// kill kills node id with SIGKILL.
func (r *fakeRun) kill(t *testing.T, id string) {
	t.Helper()
	if err := syscall.Kill(readPids(t, r.dir)[id], syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s: %v", id, err)
	}
}

// running fails the test if Run has returned.
func (r *fakeRun) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.ran:
		r.ran <- err
		t.Fatalf("Run returned %v", err)
	default:
	}
}

// TestRestartedNodeIsReadyAgain: a restarted node is named once it answers
// 200 on /readyz, not before.
func TestRestartedNodeIsReadyAgain(t *testing.T) {
	r := runFake(t, 3)
	gate := filepath.Join(r.dir, "n2.unready")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r.kill(t, "n2")
	waitOutput(t, &r.stderr, "restarted n2 (pid", 10*time.Second)
	time.Sleep(5 * pollInterval) // several probes, each answered 503
	if strings.Contains(r.stderr.String(), "ready again") {
		t.Fatalf("a node answering 503 on /readyz is called ready:\n%s", r.stderr.String())
	}
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, &r.stderr, "holdfast dev: n2 is ready again, ", 10*time.Second)
	if n := strings.Count(r.stderr.String(), "ready again"); n != 1 {
		t.Errorf("%d ready-again lines, want 1:\n%s", n, r.stderr.String())
	}
	r.running(t)
}

// TestAllDownEndsRun: once every node is left down, one for exiting too
// often and the others for failing to start again, Run returns an error
// naming each instead of waiting for a signal; not while a node may still
// come back.
func TestAllDownEndsRun(t *testing.T) {
	r := runFake(t, 3)
	r.kill(t, "n1")
	waitOutput(t, &r.stderr, "restarted n1 (pid", 10*time.Second)
	r.kill(t, "n1")
	waitOutput(t, &r.stderr, "n1 exited (signal: killed), 2 times within 1m0s: leaving it down", 10*time.Second)
	if err := os.Remove(r.exe); err != nil { // no node can be started again
		t.Fatal(err)
	}
	r.kill(t, "n2")
	waitOutput(t, &r.stderr, "n2 could not be restarted", 10*time.Second)
	r.running(t) // n3 still serves
	r.kill(t, "n3")
	select {
	case err := <-r.ran:
		r.ran <- err // for the cleanup
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		for _, want := range []string{
			"n1 (left down after it exited 2 times within 1m0s, last signal: killed; log " + filepath.Join(r.dir, "n1.log") + ")",
			"n2 (could not be restarted: start n2 (" + r.exe + "): ",
			"n3 (could not be restarted: ",
			"run holdfast dev again",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("Run returned %q, without %q", msg, want)
			}
		}
		if !errors.Is(err, ErrAllDown) {
			t.Errorf("Run returned %v, not ErrAllDown", err)
		}
		for _, want := range []string{"n1 exited (signal: killed); the others keep serving;", "n3 exited (signal: killed); no other node is running;"} {
			if !strings.Contains(r.stderr.String(), want) {
				t.Errorf("no %q in:\n%s", want, r.stderr.String())
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still waits with every node down")
	}
}
