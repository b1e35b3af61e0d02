//go:build unix

package main

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
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/devcluster"
	"github.com/holdfast/holdfast/internal/testutil"
	"github.com/holdfast/holdfast/test/harness"
)

// TestDevCommandUsage checks the exit codes of what devCommand refuses
// before it starts anything.
func TestDevCommandUsage(t *testing.T) {
	notDev := t.TempDir()
	keep := filepath.Join(notDev, "notes.txt")
	if err := os.WriteFile(keep, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-h"}, 0, "Usage: holdfast dev"},
		{[]string{"--nodes", "2"}, 2, "--nodes must be 1, 3 or 5, not 2"},
		{[]string{"--nodes", "0"}, 2, "--nodes must be 1, 3 or 5, not 0"},
		{[]string{"--nodes", "three"}, 2, "invalid value"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
		{[]string{"--dir", notDev, "extra"}, 2, "unexpected arguments"},
		{[]string{"--clean", "--dir", notDev}, 2, "does not look like a holdfast dev directory"},
		{[]string{"--dir", notDev}, 2, "does not look like a holdfast dev directory"},
	} {
		var stdout, stderr bytes.Buffer
		code := devCommand(tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("dev %v: exit %d, stderr %q; want exit %d with %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != "keep" {
		t.Errorf("a refused --clean touched %s: %q %v", keep, b, err)
	}
}

// devBuildHoldfast builds the holdfast binary of this module into dir.
func devBuildHoldfast(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := harness.Build(ctx, dir, harness.BuildOptions{Name: "hfdev-under-test"})
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func devGet(t *testing.T, c *http.Client, method, url string, body string) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestDevEndToEnd runs the real `holdfast dev --nodes 3`, uses the cluster
// it prints and stops it with SIGINT.
func TestDevEndToEnd(t *testing.T) {
	tmp := t.TempDir()
	bin := devBuildHoldfast(t, tmp)
	dir := filepath.Join(tmp, "dev")

	cmd := exec.Command(bin, "dev", "--nodes", "3", "--dir", dir)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOLDFAST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, which the cleanup kills whole if anything is
	// left, after the nodes' groups (each node runs in a group of its own).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		select {
		case <-done:
		default:
			if b, err := os.ReadFile(filepath.Join(dir, devcluster.PidsFile)); err == nil {
				for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
					_, p, _ := strings.Cut(line, " ")
					if pid, err := strconv.Atoi(p); err == nil && pid > 1 {
						_ = syscall.Kill(-pid, syscall.SIGKILL)
					}
				}
			}
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("holdfast dev (pid %d) still running after SIGKILL", cmd.Process.Pid)
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
		}
	})

	exportRE := regexp.MustCompile(`(?m)^export HOLDFAST_ADDR=(\S+)$`)
	var addrs []string
	for deadline := time.Now().Add(90 * time.Second); addrs == nil; {
		if m := exportRE.FindStringSubmatch(stdout.String()); m != nil {
			addrs = strings.Split(m[1], ",")
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no export line within 90s")
		}
		select {
		case <-done:
			t.Fatalf("holdfast dev exited (%v) before printing the export line", cmd.ProcessState)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Logf("ready after %v", time.Since(start).Round(time.Millisecond))
	if len(addrs) != 3 {
		t.Fatalf("export line lists %v", addrs)
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	leaders := 0
	for i, a := range addrs {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Fatalf("%s is not a loopback address", a)
		}
		if code, body := devGet(t, client, http.MethodGet, "http://"+a+"/readyz", ""); code != http.StatusOK {
			t.Fatalf("/readyz of %s: %d %s", a, code, body)
		}
		code, body := devGet(t, client, http.MethodGet, "http://"+a+"/cluster/status", "")
		var st struct {
			NodeID string            `json:"node_id"`
			State  string            `json:"state"`
			Nodes  []json.RawMessage `json:"nodes"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &st) != nil {
			t.Fatalf("/cluster/status of %s: %d %s", a, code, body)
		}
		if want := fmt.Sprintf("n%d", i+1); st.NodeID != want || len(st.Nodes) != 3 {
			t.Errorf("%s: node %s with %d members, want %s with 3", a, st.NodeID, len(st.Nodes), want)
		}
		if st.State == "leader" {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d leaders, want 1", leaders)
	}
	if code, body := devGet(t, client, http.MethodPost, "http://"+addrs[2]+"/services/v1/lease/namespace", "{}"); code != http.StatusOK && code != http.StatusCreated {
		t.Errorf("mint a namespace: %d %s", code, body)
	} else {
		var ns struct {
			Namespace string `json:"namespace"`
		}
		_ = json.Unmarshal(body, &ns)
		lease := fmt.Sprintf(`{"namespace":%q,"key":"dev","ttl_seconds":60,"fingerprint":"fp"}`, ns.Namespace)
		if code, body := devGet(t, client, http.MethodPost, "http://"+addrs[1]+"/services/v1/lease", lease); code != http.StatusCreated {
			t.Errorf("acquire a lease: %d %s", code, body)
		}
	}

	b, err := os.ReadFile(filepath.Join(dir, devcluster.PidsFile))
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		_, p, _ := strings.Cut(line, " ")
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("pids line %q", line)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 3 {
		t.Fatalf("pids file: %q", b)
	}

	stopAt := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		t.Fatal("holdfast dev still running 40s after SIGINT")
	}
	t.Logf("stopped %v after SIGINT", time.Since(stopAt).Round(time.Millisecond))
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("holdfast dev exited with %d after SIGINT", code)
	}
	if !strings.HasSuffix(stdout.String(), "stopped\n") {
		t.Errorf("stdout does not end with stopped:\n%s", stdout.String())
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node pid %d still exists: %v", pid, err)
		}
	}
	for _, a := range addrs {
		if c, err := net.DialTimeout("tcp", a, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections", a)
		}
	}
}
