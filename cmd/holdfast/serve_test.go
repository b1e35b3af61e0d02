package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/test/faultfs"
)

func TestFlagsAndEnvironment(t *testing.T) {
	t.Setenv("HOLDFAST_DATA_DIR", "/env/data")
	t.Setenv("HOLDFAST_HTTP_ADDR", "127.0.0.1:9999")
	t.Setenv("HOLDFAST_BOOTSTRAP_EXPECT", "3")
	t.Setenv("HOLDFAST_SWEEP_INTERVAL", "250ms")
	c, err := parseServeFlags([]string{"--http-addr", "127.0.0.1:8080", "--join", "a:1, b:2,,"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.dataDir != "/env/data" || c.bootstrapExpect != 3 || c.sweepInterval != 250*time.Millisecond {
		t.Fatalf("environment not applied: %+v", c)
	}
	if c.httpAddr != "127.0.0.1:8080" {
		t.Fatalf("a flag on the command line must win over the environment, got %s", c.httpAddr)
	}
	if got := client.SplitAddrs(c.join); len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Fatalf("join list %q", got)
	}
	if c.raftAddr != "127.0.0.1:7071" || c.rateLimit != 1000 {
		t.Fatalf("defaults wrong: %+v", c)
	}

	t.Setenv("HOLDFAST_BOOTSTRAP_EXPECT", "three")
	if _, err := parseServeFlags(nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "HOLDFAST_BOOTSTRAP_EXPECT") {
		t.Fatalf("a bad environment value must name its variable: %v", err)
	}
	t.Setenv("HOLDFAST_BOOTSTRAP_EXPECT", "")
	if _, err := parseServeFlags([]string{"extra"}, &bytes.Buffer{}); err == nil {
		t.Fatal("a stray argument was accepted")
	}
}

func TestPeerAddrOverrides(t *testing.T) {
	m, err := parsePeerAddrs("n1=127.0.0.1:1, n2=127.0.0.1:2")
	if err != nil || len(m) != 2 || m["n2"] != "127.0.0.1:2" {
		t.Fatalf("parsePeerAddrs: %v %v", m, err)
	}
	for _, bad := range []string{"n1", "=127.0.0.1:1", "n1=", "n1=nohostport"} {
		if _, err := parsePeerAddrs(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// startAs resolves the node id of c started with --node-id flag ("" for
// none) and wants id.
func startAs(t *testing.T, c *serveConfig, flag, want string) {
	t.Helper()
	c.nodeID = flag
	if id, err := c.resolveNodeID(""); err != nil || id != want {
		t.Fatalf("start with --node-id %q: %q, %v; want %q", flag, id, err, want)
	}
}

func TestNodeIDIsGeneratedOnceAndKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	c := &serveConfig{dataDir: dir}
	first, err := c.resolveNodeID("")
	if err != nil || !strings.HasPrefix(first, "node-") || len(first) != len("node-")+12 {
		t.Fatalf("generated id %q, %v", first, err)
	}
	startAs(t, c, "", first)
	b, err := os.ReadFile(filepath.Join(dir, "node-id"))
	if err != nil || strings.TrimSpace(string(b)) != first {
		t.Fatalf("node-id file %q, %v", b, err)
	}
	startAs(t, c, first, first)
	c.nodeID = "explicit"
	if id, err := c.resolveNodeID(""); err == nil || !strings.Contains(err.Error(), first) {
		t.Fatalf("another id on a kept one: %q, %v; want a refusal naming %q", id, err, first)
	}
}

// TestNodeIDSurvivesAPowerLoss: the generated id, and the data directory
// made for it, survive a power loss (test/faultfs keeps only what was
// synced), so a restart without --node-id is the same node.
func TestNodeIDSurvivesAPowerLoss(t *testing.T) {
	f, mnt := faultfs.TempMount(t)
	c := &serveConfig{dataDir: filepath.Join(mnt, "srv", "holdfast")}
	first, err := c.resolveNodeID("")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.PowerLoss(); err != nil {
		t.Fatal(err)
	}
	startAs(t, c, "", first)
}

// TestGivenNodeIDIsKept: an id given with --node-id is kept, so a restart
// without the flag is the same node, not a new one on its Raft state.
func TestGivenNodeIDIsKept(t *testing.T) {
	c := &serveConfig{dataDir: filepath.Join(t.TempDir(), "data")}
	startAs(t, c, "n2", "n2")
	startAs(t, c, "", "n2")
}

// TestRaftStateWithoutKeptIDIsRefused: a data dir written by a build that
// did not keep a given id starts only with --node-id, which is then kept.
func TestRaftStateWithoutKeptIDIsRefused(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "raft-log"), 0o700); err != nil {
		t.Fatal(err)
	}
	c := &serveConfig{dataDir: dir}
	if id, err := c.resolveNodeID(""); err == nil || !strings.Contains(err.Error(), "--node-id") {
		t.Fatalf("no id for Raft state: %q, %v; want a refusal naming --node-id", id, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node-id")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused start wrote a node-id file: %v", err)
	}
	startAs(t, c, "n3", "n3")
	startAs(t, c, "", "n3")
}

func TestExamplePayloadIsOnlyDescribed(t *testing.T) {
	d := describePayload(json.RawMessage(examplePayload))
	if !strings.Contains(d, "3 fields") || !strings.Contains(d, "no field executed, no URL followed") {
		t.Fatalf("description %q", d)
	}
	if d := describePayload(json.RawMessage(`[1,2]`)); !strings.HasPrefix(d, "non-object payload of 5 bytes") {
		t.Fatalf("description %q", d)
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "unknown command") {
		t.Fatalf("code %d, stderr %q", code, errOut.String())
	}
	if code := run([]string{"help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "example-worker") {
		t.Fatalf("help: code %d, %q", code, out.String())
	}
}

func TestNodeIDFromHostname(t *testing.T) {
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	for h, want := range map[string]string{"holdfast-2": "holdfast-2", "holdfast-0.holdfast-peers.default.svc.cluster.local": "holdfast-0"} {
		if id, err := hostnameID("", host(h)); err != nil || id != want {
			t.Errorf("host name %q: id %q, %v; want %q", h, id, err, want)
		}
	}
	if _, err := hostnameID("", host(".x")); err == nil {
		t.Error("a host name without a first label gave an id")
	}
	if _, err := hostnameID("", func() (string, error) { return "", errors.New("no uts") }); err == nil || !strings.Contains(err.Error(), "no uts") {
		t.Errorf("a failed host name lookup: %v", err)
	}
	if _, err := hostnameID("n1", host("holdfast-0")); err == nil || !strings.Contains(err.Error(), "--node-id") {
		t.Errorf("--node-id with --node-id-from-hostname: %v", err)
	}
	h, err := os.Hostname()
	if err != nil {
		t.Skip("no host name here:", err)
	}
	c, err := parseServeFlags([]string{"--node-id-from-hostname"}, &bytes.Buffer{})
	if want, _, _ := strings.Cut(h, "."); err != nil || c.nodeID != want {
		t.Fatalf("--node-id-from-hostname on %q: %q, %v", h, c.nodeID, err)
	}
	t.Setenv("HOLDFAST_NODE_ID", "n1")
	if _, err := parseServeFlags([]string{"--node-id-from-hostname"}, &bytes.Buffer{}); err == nil {
		t.Fatal("HOLDFAST_NODE_ID with --node-id-from-hostname was accepted")
	}
}
