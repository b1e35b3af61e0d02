package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/testutil"
	"github.com/holdfast/holdfast/server"
)

// testNode is one in-process node: Raft node, server and HTTP listener.
type testNode struct {
	node  *cluster.Node
	srv   *server.Server
	front *server.Front
	url   string
}

// startNode opens a node whose HTTP server listens on a fresh loopback port
// (advertised as its HTTP address). A node that must not bootstrap itself
// gets an unreachable join address and is added with Join on the leader.
func startNode(t testing.TB, id string, bootstrap bool, logs io.Writer, cfg server.Config) *testNode {
	t.Helper()
	return startNodeWithKey(t, id, "mcp-test-cluster-key", bootstrap, logs, cfg)
}

// startNodeWithKey is startNode with the node's own cluster key.
func startNodeWithKey(t testing.TB, id, key string, bootstrap bool, logs io.Writer, cfg server.Config) *testNode {
	t.Helper()
	return startNodeServing(t, id, key, bootstrap, logs, cfg, serving{})
}

// serving says how a test node's listener is served.
type serving struct {
	// plain serves it with net/http alone, without the front.
	plain bool
	// tune, when set, adjusts the HTTP server before it serves.
	tune func(*http.Server)
}

// startNodeServing is startNodeWithKey with the listener served as how says.
func startNodeServing(t testing.TB, id, key string, bootstrap bool, logs io.Writer, cfg server.Config, how serving) *testNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	level := hclog.Trace
	if logs == io.Discard {
		level = hclog.Off // nothing formatted for nobody (benchmarks count allocations)
	}
	logger := hclog.New(&hclog.LoggerOptions{Name: id, Level: level, Output: logs})
	c := cluster.Config{
		NodeID:        id,
		DataDir:       t.TempDir(),
		RaftBind:      "127.0.0.1:0",
		HTTPAdvertise: ln.Addr().String(),
		// The key is what proves a forwarding node to the leader, so the
		// client's address travels with a forwarded call.
		ClusterKey:         key,
		Logger:             logger,
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		SweepInterval:      20 * time.Millisecond,
		ProposeTimeout:     5 * time.Second,
	}
	if !bootstrap {
		c.Join = []string{"127.0.0.1:9"}
	}
	n, err := cluster.Open(c)
	if err != nil {
		_ = ln.Close()
		t.Fatalf("open %s: %v", id, err)
	}
	cfg.Node, cfg.Logger = n, logger
	srv := server.New(cfg)
	hs := srv.HTTPServer()
	if how.tune != nil {
		how.tune(hs)
	}
	var front *server.Front
	if how.plain {
		go func() { _ = hs.Serve(ln) }()
	} else {
		front = srv.NewFront(ln, hs)
		go func() { _ = hs.Serve(front) }()
	}
	t.Cleanup(func() {
		_ = hs.Close()
		if front != nil {
			front.CloseNow()
		}
		srv.Close()
		_ = n.Kill()
	})
	return &testNode{node: n, srv: srv, front: front, url: "http://" + ln.Addr().String()}
}

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startCluster forms a three-node cluster and returns its nodes, leader first.
func startCluster(t testing.TB, logs io.Writer) []*testNode {
	t.Helper()
	nodes := []*testNode{startNode(t, "n0", true, logs, server.Config{})}
	waitFor(t, "n0 to lead", 15*time.Second, func() bool {
		ok, _ := nodes[0].node.Ready()
		return nodes[0].node.IsLeader() && ok
	})
	for _, id := range []string{"n1", "n2"} {
		n := startNode(t, id, false, logs, server.Config{})
		err := nodes[0].node.Join(context.Background(), cluster.JoinRequest{NodeID: id, RaftAddr: n.node.RaftAddr(), HTTPAddr: n.node.HTTPAddr(), Fresh: true})
		if err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes[1:] {
		waitFor(t, n.node.ID()+" to know the leader's HTTP address", 15*time.Second, func() bool {
			ok, _ := n.node.Ready()
			_, addr := n.node.Leader()
			return ok && addr != "" && !n.node.IsLeader()
		})
	}
	return nodes
}

func connect(t *testing.T, url string) *mcp.ClientSession {
	t.Helper()
	return connectFrom(t, url, nil)
}

// connectFrom connects an MCP client whose connections leave from localIP
// (any loopback address when nil).
func connectFrom(t *testing.T, url string, localIP net.IP) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := &mcp.StreamableClientTransport{Endpoint: url + server.MCPPath, DisableStandaloneSSE: true}
	if localIP != nil {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: localIP}}
		tr.HTTPClient = &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "holdfast-test", Version: "1"}, nil)
	cs, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// result is a tool result's structured content, numbers kept exact.
type result map[string]any

func (r result) str(k string) string { s, _ := r[k].(string); return s }

func (r result) num(k string) int64 {
	n, ok := r[k].(json.Number)
	if !ok {
		return -1
	}
	v, _ := n.Int64()
	return v
}

func (r result) obj(k string) result {
	m, _ := r[k].(map[string]any)
	return result(m)
}

func asResult(t *testing.T, v any) result {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return m
}

// call runs a tool and checks isError and http_status. It also checks that
// the text content carries the same JSON as the structured content.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any, wantStatus int) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", tool, err)
	}
	r := asResult(t, res.StructuredContent)
	if got := r.num(server.HTTPStatusField); got != int64(wantStatus) {
		t.Fatalf("%s: http_status %d, want %d: %v", tool, got, wantStatus, r)
	}
	if res.IsError != (wantStatus >= 300) {
		t.Fatalf("%s: isError %v with http_status %d", tool, res.IsError, wantStatus)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content items", tool, len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content is %T", tool, res.Content[0])
	}
	if tr := asResult(t, json.RawMessage(text.Text)); fmt.Sprint(tr) != fmt.Sprint(r) {
		t.Fatalf("%s: text content %s differs from structured content %v", tool, text.Text, r)
	}
	if ok, _ := r["ok"].(bool); ok != (wantStatus < 300) {
		t.Fatalf("%s: ok %v with http_status %d", tool, r["ok"], wantStatus)
	}
	return r
}

// TestMCP runs the MCP endpoint of a follower of a three-node cluster:
// tool list, lease flow, queue flow, protocol errors, the Origin and size
// guards, and that no secret given as an argument reaches a log line.
func TestMCP(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	nodes := startCluster(t, logs)
	follower := nodes[1]
	cs := connect(t, follower.url)
	var secrets []string // every secret value sent or received

	t.Run("tools", func(t *testing.T) { testToolList(t, cs) })
	t.Run("lease flow", func(t *testing.T) { secrets = append(secrets, testLeaseFlow(t, cs)...) })
	t.Run("queue flow", func(t *testing.T) { secrets = append(secrets, testQueueFlow(t, cs)...) })
	t.Run("slots and checkpoints", func(t *testing.T) { secrets = append(secrets, testCheckpointFlow(t, cs)...) })
	t.Run("waiting calls", func(t *testing.T) { testWaitingCalls(t, cs) })
	t.Run("protocol errors", func(t *testing.T) { testProtocolErrors(t, cs) })
	t.Run("strict arguments", func(t *testing.T) { testStrictArguments(t, follower.url, nodes[0].url) })
	t.Run("origin", func(t *testing.T) { testOrigin(t, follower.url) })
	t.Run("body limit", func(t *testing.T) { testBodyLimit(t, follower.url) })
	t.Run("client address reaches the leader", func(t *testing.T) { testClientAddress(t, follower.url) })
	t.Run("leader answers directly", func(t *testing.T) {
		r := call(t, connect(t, nodes[0].url), "create_lease_namespace", nil, http.StatusOK)
		if !strings.HasPrefix(r.str("namespace"), "ns_") {
			t.Fatalf("namespace %v", r)
		}
	})

	t.Run("forwarded to the leader", func(t *testing.T) {
		// The follower cannot propose: its tool calls reached the leader
		// over the peer link it opened.
		if !regexp.MustCompile(`n0\.http: peer link opened: from=n1`).MatchString(logs.String()) {
			t.Fatal("the leader logged no peer link from the follower")
		}
	})
	t.Run("secrets not logged", func(t *testing.T) {
		if len(secrets) < 8 {
			t.Fatalf("only %d secrets collected", len(secrets))
		}
		out := logs.String()
		if !strings.Contains(out, "route="+server.MCPPath) {
			t.Fatal("no MCP request was logged: the check would prove nothing")
		}
		for _, s := range secrets {
			if s == "" {
				t.Fatal("an empty secret was collected")
			}
			if strings.Contains(out, s) {
				t.Errorf("secret %.8s… appears in the logs", s)
			}
		}
	})
}

func testToolList(t *testing.T, cs *mcp.ClientSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"create_lease_namespace", "acquire_lease", "renew_lease", "release_lease", "complete_lease", "checkpoint_lease",
		"create_agent_queue", "enqueue_agent_queue_job", "claim_agent_queue_job", "read_agent_queue", "read_agent_queue_job",
		"ack_agent_queue_job", "release_agent_queue_job", "renew_agent_queue_job", "retry_agent_queue_job"}
	readOnly := map[string]bool{"create_lease_namespace": true, "read_agent_queue": true, "read_agent_queue_job": true}
	var names []string
	tools := map[string]*mcp.Tool{}
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		tools[tool.Name] = tool
		a := tool.Annotations
		if a == nil || a.DestructiveHint == nil || a.OpenWorldHint == nil {
			t.Fatalf("%s: annotations not all set: %+v", tool.Name, a)
		}
		if *a.OpenWorldHint || a.ReadOnlyHint != readOnly[tool.Name] || (a.ReadOnlyHint && *a.DestructiveHint) {
			t.Errorf("%s: annotations %+v", tool.Name, *a)
		}
		if len(tool.Description) < 200 || !strings.Contains(tool.Description, "http_status") {
			t.Errorf("%s: description does not state the contract: %q", tool.Name, tool.Description)
		}
		s := asResult(t, tool.InputSchema)
		if s.str("type") != "object" || s["additionalProperties"] != false {
			t.Errorf("%s: input schema %v", tool.Name, s)
		}
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	prop := func(tool, arg string) result {
		t.Helper()
		p := asResult(t, tools[tool].InputSchema).obj("properties").obj(arg)
		if p == nil {
			t.Fatalf("%s has no argument %s", tool, arg)
		}
		return p
	}
	required := func(tool string) []string {
		var out []string
		list, _ := asResult(t, tools[tool].InputSchema)["required"].([]any)
		for _, r := range list {
			out = append(out, r.(string))
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		tool, arg          string
		min, max, def      int64
		pattern            string
		matches, nonsenses string
	}{
		{tool: "acquire_lease", arg: "ttl_seconds", min: 1, max: 86400, def: 60},
		{tool: "renew_lease", arg: "ttl_seconds", min: 1, max: 86400, def: 60},
		{tool: "claim_agent_queue_job", arg: "visibility_timeout", min: 30, max: 900, def: 60},
		{tool: "renew_agent_queue_job", arg: "visibility_timeout", min: 30, max: 900, def: 60},
		{tool: "release_agent_queue_job", arg: "delay_seconds", min: 0, max: 900, def: 0},
		{tool: "claim_agent_queue_job", arg: "wait_seconds", min: 0, max: 20, def: 0},
		{tool: "acquire_lease", arg: "wait_seconds", min: 0, max: 60, def: 0},
		{tool: "read_agent_queue_job", arg: "wait_seconds", min: 0, max: 60, def: 0},
		{tool: "acquire_lease", arg: "request_id", pattern: "x", matches: "0b7c6a8e-3f2d-4c1b-9a8e-7d6c5b4a3f2e", nonsenses: "short"},
		{tool: "claim_agent_queue_job", arg: "request_id", pattern: "x", matches: strings.Repeat("a", 32), nonsenses: strings.Repeat("a", 31)},
		{tool: "acquire_lease", arg: "namespace", pattern: "x", matches: "ns_" + strings.Repeat("A", 43), nonsenses: "ns_short"},
		{tool: "renew_lease", arg: "owner_token", pattern: "x", matches: "own_" + strings.Repeat("b", 43), nonsenses: "own_"},
		{tool: "enqueue_agent_queue_job", arg: "job_key", pattern: "x", matches: "report:42", nonsenses: ":report"},
		{tool: "enqueue_agent_queue_job", arg: "queue_id", pattern: "x", matches: strings.Repeat("a", 32), nonsenses: strings.Repeat("A", 32)},
		{tool: "enqueue_agent_queue_job", arg: "write_token", pattern: "x", matches: strings.Repeat("0", 64), nonsenses: strings.Repeat("0", 63)},
		{tool: "claim_agent_queue_job", arg: "worker_token", pattern: "x", matches: strings.Repeat("f", 64), nonsenses: strings.Repeat("g", 64)},
		{tool: "read_agent_queue", arg: "read_token", pattern: "x", matches: strings.Repeat("1", 64), nonsenses: ""},
		{tool: "read_agent_queue_job", arg: "job_id", pattern: "x", matches: strings.Repeat("9", 32), nonsenses: strings.Repeat("9", 33)},
		{tool: "ack_agent_queue_job", arg: "receipt", pattern: "x", matches: strings.Repeat("e", 64), nonsenses: strings.Repeat("e", 65)},
	} {
		p := prop(c.tool, c.arg)
		if c.pattern == "" {
			if p.str("type") != "integer" || p.num("minimum") != c.min || p.num("maximum") != c.max || p.num("default") != c.def {
				t.Errorf("%s.%s schema %v", c.tool, c.arg, p)
			}
			continue
		}
		re, err := regexp.Compile(p.str("pattern"))
		if err != nil || p.str("type") != "string" || !re.MatchString(c.matches) || re.MatchString(c.nonsenses) {
			t.Errorf("%s.%s schema %v (%v)", c.tool, c.arg, p, err)
		}
	}
	for tool, want := range map[string][]string{
		"create_lease_namespace":  nil,
		"acquire_lease":           {"key"},
		"complete_lease":          {"key", "owner_token", "result"},
		"checkpoint_lease":        {"checkpoint", "key", "owner_token"},
		"create_agent_queue":      nil,
		"enqueue_agent_queue_job": {"job_key", "payload", "queue_id", "write_token"},
		"claim_agent_queue_job":   {"queue_id", "worker_token"},
		"read_agent_queue_job":    {"job_id", "queue_id", "read_token"},
		"renew_agent_queue_job":   {"job_id", "queue_id", "receipt", "worker_token"},
		"retry_agent_queue_job":   {"job_id", "queue_id", "write_token"},
	} {
		if got := required(tool); !slices.Equal(got, want) {
			t.Errorf("%s requires %v, want %v", tool, got, want)
		}
	}
	for tool, words := range map[string][]string{
		"acquire_lease":           {"fencing_token", "highest", "409", "retry_after_seconds", "conflict", "secret"},
		"renew_lease":             {"lost", "fencing token"},
		"claim_agent_queue_job":   {"at-least-once", "receipt", "idempotent", "job: null"},
		"ack_agent_queue_job":     {"409", "superseded"},
		"create_agent_queue":      {"write_token", "worker_token", "read_token", "429"},
		"retry_agent_queue_job":   {"failed", "attempts 0", "write token", "409", "job_status"},
		"release_agent_queue_job": {"delay_seconds", "available_at_timestamp"},
	} {
		for _, w := range words {
			if !strings.Contains(tools[tool].Description, w) {
				t.Errorf("%s: description lacks %q", tool, w)
			}
		}
	}
}

func testLeaseFlow(t *testing.T, cs *mcp.ClientSession) []string {
	ns := call(t, cs, "create_lease_namespace", nil, http.StatusOK).str("namespace")
	key, fp := "invoice:2026-09-05", "charge-order-501"
	args := map[string]any{"namespace": ns, "key": key, "ttl_seconds": 60, "fingerprint": fp}

	held := call(t, cs, "acquire_lease", args, http.StatusCreated)
	owner, fence := held.str("owner_token"), held.num("fencing_token")
	if held.str("status") != "held" || !strings.HasPrefix(owner, "own_") || fence < 1 || held.num("ttl_seconds") != 60 {
		t.Fatalf("acquire: %v", held)
	}

	busy := call(t, cs, "acquire_lease", args, http.StatusConflict)
	if busy.str("status") != "held" || busy.num("fencing_token") != fence || busy.num("retry_after_seconds") < 1 || busy["owner_token"] != nil {
		t.Fatalf("second caller: %v", busy)
	}
	other := map[string]any{"namespace": ns, "key": key, "fingerprint": "another-input"}
	if r := call(t, cs, "acquire_lease", other, http.StatusConflict); r.str("status") != "conflict" {
		t.Fatalf("other fingerprint: %v", r)
	}

	own := map[string]any{"namespace": ns, "key": key, "owner_token": owner}
	renew := call(t, cs, "renew_lease", map[string]any{"namespace": ns, "key": key, "owner_token": owner, "ttl_seconds": 120}, http.StatusOK)
	if renew.str("status") != "held" || renew.num("fencing_token") != fence || renew.num("ttl_seconds") != 120 {
		t.Fatalf("renew: %v", renew)
	}
	done := call(t, cs, "complete_lease", map[string]any{"namespace": ns, "key": key, "owner_token": owner,
		"result": map[string]any{"receipt_id": 4817, "api_key": "sk-not-stored"}}, http.StatusOK)
	if done.str("status") != "completed" || done.num("fencing_token") != fence {
		t.Fatalf("complete: %v", done)
	}
	reuse := call(t, cs, "acquire_lease", args, http.StatusOK)
	if reuse.str("status") != "completed" || reuse["owner_token"] != nil || reuse.obj("result").num("receipt_id") != 4817 ||
		reuse.obj("result").str("api_key") != "[redacted]" {
		t.Fatalf("completed result reused: %v", reuse)
	}
	if r := call(t, cs, "renew_lease", own, http.StatusConflict); r.str("status") != "lost" {
		t.Fatalf("renew after complete: %v", r)
	}

	// A stale owner: A releases (or pauses past expiry), B acquires with a
	// higher fencing token, and A can neither renew nor complete.
	key2 := "invoice:2026-09-06"
	a := call(t, cs, "acquire_lease", map[string]any{"namespace": ns, "key": key2}, http.StatusCreated)
	aOwn := map[string]any{"namespace": ns, "key": key2, "owner_token": a.str("owner_token")}
	if r := call(t, cs, "release_lease", aOwn, http.StatusOK); r.str("status") != "released" {
		t.Fatalf("release: %v", r)
	}
	b := call(t, cs, "acquire_lease", map[string]any{"namespace": ns, "key": key2}, http.StatusCreated)
	if b.num("fencing_token") <= a.num("fencing_token") {
		t.Fatalf("fencing token did not grow: %d then %d", a.num("fencing_token"), b.num("fencing_token"))
	}
	if r := call(t, cs, "renew_lease", aOwn, http.StatusConflict); r.str("status") != "lost" {
		t.Fatalf("stale renew: %v", r)
	}
	aDone := map[string]any{"namespace": ns, "key": key2, "owner_token": a.str("owner_token"), "result": "late"}
	if r := call(t, cs, "complete_lease", aDone, http.StatusConflict); r.str("status") != "lost" {
		t.Fatalf("stale complete: %v", r)
	}
	// The service layer's own validation answers as a tool result: a
	// namespaced key may not hold control characters.
	if r := call(t, cs, "acquire_lease", map[string]any{"namespace": ns, "key": "bad\x01key"}, http.StatusBadRequest); r.str("field") != "key" {
		t.Fatalf("invalid key: %v", r)
	}
	return []string{ns, key, key2, fp, owner, a.str("owner_token"), b.str("owner_token")}
}

// testCheckpointFlow: acquire_lease with slots, and checkpoint_lease: a
// stale owner stores nothing, the holder's progress reaches the next grant.
func testCheckpointFlow(t *testing.T, cs *mcp.ClientSession) []string {
	ns := call(t, cs, "create_lease_namespace", nil, http.StatusOK).str("namespace")
	// Both need cluster level 2, which a new cluster reaches once its
	// configuration has settled.
	deadline := time.Now().Add(40 * time.Second)
	var a result
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "acquire_lease", Arguments: map[string]any{"namespace": ns, "key": "crawl", "slots": 2}})
		cancel()
		if err != nil {
			t.Fatalf("acquire_lease: %v", err)
		}
		if a = asResult(t, res.StructuredContent); a.num(server.HTTPStatusField) != http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if a.num(server.HTTPStatusField) != http.StatusCreated || a.num("slots") != 2 || a.num("held") != 1 {
		t.Fatalf("acquire with slots: %v", a)
	}
	b := call(t, cs, "acquire_lease", map[string]any{"namespace": ns, "key": "crawl", "slots": 2}, http.StatusCreated)
	if b.num("fencing_token") <= a.num("fencing_token") || b.num("held") != 2 {
		t.Fatalf("second slot: %v", b)
	}
	if r := call(t, cs, "acquire_lease", map[string]any{"namespace": ns, "key": "crawl", "slots": 2}, http.StatusConflict); r.str("status") != "held" {
		t.Fatalf("third owner of two slots: %v", r)
	}
	if r := call(t, cs, "acquire_lease", map[string]any{"namespace": ns, "key": "crawl"}, http.StatusConflict); r.str("field") != "slots" {
		t.Fatalf("another slot count: %v", r)
	}

	first := call(t, cs, "acquire_lease", map[string]any{"namespace": ns, "key": "job", "ttl_seconds": 1}, http.StatusCreated)
	stale := map[string]any{"namespace": ns, "key": "job", "owner_token": first.str("owner_token")}
	stale["checkpoint"] = map[string]any{"step": 1}
	if r := call(t, cs, "checkpoint_lease", stale, http.StatusOK); r.str("status") != "checkpointed" || r.num("fencing_token") != first.num("fencing_token") {
		t.Fatalf("checkpoint: %v", r)
	}
	time.Sleep(1100 * time.Millisecond)
	next := call(t, cs, "acquire_lease", map[string]any{"namespace": ns, "key": "job"}, http.StatusCreated)
	if next.obj("checkpoint").num("step") != 1 || next.num("checkpoint_fencing_token") != first.num("fencing_token") {
		t.Fatalf("the next grant: %v", next)
	}
	stale["checkpoint"] = map[string]any{"step": 99}
	if r := call(t, cs, "checkpoint_lease", stale, http.StatusConflict); r.str("status") != "lost" {
		t.Fatalf("checkpoint by a stale owner: %v", r)
	}
	return []string{ns, a.str("owner_token"), b.str("owner_token"), first.str("owner_token"), next.str("owner_token")}
}

func testQueueFlow(t *testing.T, cs *mcp.ClientSession) []string {
	q := call(t, cs, "create_agent_queue", nil, http.StatusCreated)
	qid := q.str("queue_id")
	w, k, rd := q.str("write_token"), q.str("worker_token"), q.str("read_token")
	if len(qid) != 32 || len(w) != 64 || len(k) != 64 || len(rd) != 64 || q.obj("counts").num("total") != 0 {
		t.Fatalf("create: %v", q)
	}
	job := map[string]any{"queue_id": qid, "write_token": w, "job_key": "report:42", "payload": map[string]any{"report_id": 42}}
	e1 := call(t, cs, "enqueue_agent_queue_job", job, http.StatusCreated)
	jobID := e1.str("job_id")
	if e1["deduplicated"] != false || len(jobID) != 32 || e1.obj("job").str("status") != "pending" {
		t.Fatalf("enqueue: %v", e1)
	}
	if e2 := call(t, cs, "enqueue_agent_queue_job", job, http.StatusOK); e2["deduplicated"] != true || e2.str("job_id") != jobID {
		t.Fatalf("duplicate enqueue: %v", e2)
	}
	changed := map[string]any{"queue_id": qid, "write_token": w, "job_key": "report:42", "payload": nil}
	if r := call(t, cs, "enqueue_agent_queue_job", changed, http.StatusConflict); r.str("job_id") != jobID {
		t.Fatalf("same key, other payload: %v", r)
	}

	worker := map[string]any{"queue_id": qid, "worker_token": k}
	c := call(t, cs, "claim_agent_queue_job", map[string]any{"queue_id": qid, "worker_token": k, "visibility_timeout": 30}, http.StatusOK).obj("job")
	receipt := c.str("receipt")
	if c.str("job_id") != jobID || c.str("status") != "claimed" || c.num("attempts") != 1 || len(receipt) != 64 || c.obj("payload").num("report_id") != 42 {
		t.Fatalf("claim: %v", c)
	}
	if r := call(t, cs, "claim_agent_queue_job", worker, http.StatusOK); r["job"] != nil {
		t.Fatalf("claim of an empty queue: %v", r)
	}
	rcpt := map[string]any{"queue_id": qid, "worker_token": k, "job_id": jobID, "receipt": receipt}
	renewed := call(t, cs, "renew_agent_queue_job", map[string]any{"queue_id": qid, "worker_token": k, "job_id": jobID, "receipt": receipt, "visibility_timeout": 120}, http.StatusOK)
	if renewed.obj("job").num("attempts") != 1 {
		t.Fatalf("renew: %v", renewed)
	}
	wrong := map[string]any{"queue_id": qid, "worker_token": k, "job_id": jobID, "receipt": strings.Repeat("0", 64)}
	if r := call(t, cs, "ack_agent_queue_job", wrong, http.StatusConflict); r.str("reason") != "superseded" {
		t.Fatalf("ack with another receipt: %v", r)
	}
	for range 2 { // an ack may be repeated with its receipt
		if r := call(t, cs, "ack_agent_queue_job", rcpt, http.StatusOK); r.obj("job").str("status") != "completed" {
			t.Fatalf("ack: %v", r)
		}
	}
	if r := call(t, cs, "release_agent_queue_job", rcpt, http.StatusConflict); r.str("reason") != "completed" {
		t.Fatalf("release after ack: %v", r)
	}
	retry := map[string]any{"queue_id": qid, "write_token": w, "job_id": jobID}
	if r := call(t, cs, "retry_agent_queue_job", retry, http.StatusConflict); r.str("job_status") != "completed" {
		t.Fatalf("retry of a completed job: %v", r)
	}
	if r := call(t, cs, "retry_agent_queue_job", map[string]any{"queue_id": qid, "write_token": k, "job_id": jobID}, http.StatusForbidden); r.str("error") == "" {
		t.Fatalf("retry with the worker token: %v", r)
	}
	// A release with a delay: the job waits, and claims pass it by.
	second := call(t, cs, "enqueue_agent_queue_job", map[string]any{"queue_id": qid, "write_token": w, "job_key": "report:43", "payload": 43}, http.StatusCreated).str("job_id")
	c2 := call(t, cs, "claim_agent_queue_job", worker, http.StatusOK).obj("job")
	delayed := call(t, cs, "release_agent_queue_job", map[string]any{"queue_id": qid, "worker_token": k, "job_id": second, "receipt": c2.str("receipt"), "delay_seconds": 600}, http.StatusOK).obj("job")
	if delayed.str("status") != "pending" || delayed.num("available_at_timestamp") < c2.num("updated_at_timestamp")+599 {
		t.Fatalf("release with a delay: %v", delayed)
	}
	if r := call(t, cs, "claim_agent_queue_job", worker, http.StatusOK); r["job"] != nil {
		t.Fatalf("claim during the delay: %v", r)
	}
	if r := call(t, cs, "retry_agent_queue_job", map[string]any{"queue_id": qid, "write_token": w, "job_id": second}, http.StatusConflict); r.str("job_status") != "pending" {
		t.Fatalf("retry of a pending job: %v", r)
	}

	counts := call(t, cs, "read_agent_queue", map[string]any{"queue_id": qid, "read_token": rd}, http.StatusOK)
	if n := counts.obj("counts"); counts.str("queue_id") != qid || n.num("completed") != 1 || n.num("total") != 2 || n.num("pending") != 1 {
		t.Fatalf("read queue: %v", counts)
	}
	one := call(t, cs, "read_agent_queue_job", map[string]any{"queue_id": qid, "read_token": rd, "job_id": jobID}, http.StatusOK).obj("job")
	if one.str("status") != "completed" || one.str("job_key") != "report:42" || one["receipt"] != nil || one.num("attempts") != 1 {
		t.Fatalf("read job: %v", one)
	}
	if r := call(t, cs, "read_agent_queue", map[string]any{"queue_id": qid, "read_token": w}, http.StatusForbidden); r.str("error") == "" {
		t.Fatalf("read with the write token: %v", r)
	}
	if r := call(t, cs, "read_agent_queue", map[string]any{"queue_id": strings.Repeat("a", 32), "read_token": rd}, http.StatusNotFound); r.str("error") == "" {
		t.Fatalf("unknown queue: %v", r)
	}
	return []string{w, k, rd, receipt}
}

func testProtocolErrors(t *testing.T, cs *mcp.ClientSession) {
	secret := strings.Repeat("c", 63) // one short of a token
	for _, c := range []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"ttl below range", "acquire_lease", map[string]any{"key": strings.Repeat("k", 40), "ttl_seconds": 0}, `"ttl_seconds" must be an integer from 1 to 86400`},
		{"ttl not an integer", "acquire_lease", map[string]any{"key": strings.Repeat("k", 40), "ttl_seconds": 1.5}, `"ttl_seconds"`},
		{"ttl a string", "acquire_lease", map[string]any{"key": strings.Repeat("k", 40), "ttl_seconds": "60"}, `"ttl_seconds"`},
		{"missing key", "acquire_lease", map[string]any{"ttl_seconds": 60}, `"key" is required`},
		{"unknown argument", "acquire_lease", map[string]any{"key": strings.Repeat("k", 40), "owner": "x"}, `unknown argument "owner"`},
		{"bad job key", "enqueue_agent_queue_job", map[string]any{"queue_id": strings.Repeat("a", 32), "write_token": strings.Repeat("a", 64), "job_key": "-x", "payload": 1}, `"job_key" must be 1 to 64`},
		{"bad token", "claim_agent_queue_job", map[string]any{"queue_id": strings.Repeat("a", 32), "worker_token": secret}, `"worker_token" must be 64 lowercase hex`},
		{"visibility above range", "claim_agent_queue_job", map[string]any{"queue_id": strings.Repeat("a", 32), "worker_token": strings.Repeat("a", 64), "visibility_timeout": 901}, `"visibility_timeout" must be an integer from 30 to 900`},
		{"missing payload", "enqueue_agent_queue_job", map[string]any{"queue_id": strings.Repeat("a", 32), "write_token": strings.Repeat("a", 64), "job_key": "k"}, `"payload" is required`},
		{"unknown tool", "drop_everything", nil, "unknown tool"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
			var werr *jsonrpc.Error
			if !errors.As(err, &werr) || werr.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("want an invalid-params protocol error, got result %+v, error %v", res, err)
			}
			if !strings.Contains(werr.Message, c.want) || strings.Contains(werr.Message, secret) {
				t.Fatalf("message %q, want it to contain %q and no argument value", werr.Message, c.want)
			}
		})
	}
}

// testStrictArguments sends tool calls as raw JSON-RPC, since an SDK client
// cannot send duplicate names or invalid UTF-8, and checks that the SDK
// hands such arguments over unchanged and that each is refused with an
// invalid-params error naming the argument and the rule, not the value.
func testStrictArguments(t *testing.T, urls ...string) {
	const secret = "S3CRET"
	key := func(s string) string { return `"` + secret + s + strings.Repeat("Qz8", 12) + `"` }
	ns := `"ns_` + strings.Repeat("A", 43) + `"`
	q := `"queue_id":"` + strings.Repeat("a", 32) + `","write_token":"` + strings.Repeat("a", 64) + `","job_key":"k"`
	owner := `"owner_token":"own_` + strings.Repeat("b", 43) + `"`
	for _, c := range []struct {
		name, tool, args, want string
	}{
		{"duplicate key", "acquire_lease", `{"key":` + key("a") + `,"key":` + key("b") + `}`, `argument "key" is given more than once`},
		{"escaped duplicate key", "acquire_lease", `{"key":` + key("a") + `,"\u006bey":` + key("b") + `}`, `argument "key" is given more than once`},
		{"upper-case KEY", "acquire_lease", `{"KEY":` + key("a") + `}`, `unknown argument "KEY"`},
		{"case variant beside key", "acquire_lease", `{"key":` + key("a") + `,"Key":` + key("b") + `}`, `unknown argument "Key"`},
		{"invalid UTF-8 in key", "acquire_lease", `{"namespace":` + ns + `,"key":"` + secret + "\xff" + `"}`, `argument "key" must be valid UTF-8`},
		{"lone surrogate in fingerprint", "acquire_lease", `{"key":` + key("a") + `,"fingerprint":"` + secret + `\udc00"}`, `argument "fingerprint" must be valid UTF-8`},
		{"invalid UTF-8 in a name", "acquire_lease", `{"key":` + key("a") + `,"` + secret + "\xff" + `":1}`, "argument names must be valid UTF-8"},
		{"duplicate inside payload", "enqueue_agent_queue_job", `{` + q + `,"payload":{"` + secret + `":1,"` + secret + `":2}}`, `argument "payload" holds an object with a duplicate member name`},
		{"invalid UTF-8 inside payload", "enqueue_agent_queue_job", `{` + q + `,"payload":["` + secret + "\x80" + `"]}`, `argument "payload" must be valid UTF-8`},
		{"duplicate inside result", "complete_lease", `{"namespace":` + ns + `,"key":` + key("a") + `,` + owner + `,"result":{"a":{"` + secret + `":1,"` + secret + `":1}}}`, `argument "result" holds an object with a duplicate member name`},
		{"duplicate on a tool without arguments", "create_lease_namespace", `{"x":1,"x":2}`, `argument "x" is given more than once`},
	} {
		body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + c.tool + `","arguments":` + c.args + `}}`
		for _, url := range urls {
			code, out := post(t, url, strings.NewReader(body), nil)
			var resp struct {
				Result json.RawMessage `json:"result"`
				Error  *struct {
					Code    int64  `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(out), &resp); err != nil || code != http.StatusOK {
				t.Fatalf("%s via %s: HTTP %d %q (%v)", c.name, url, code, out, err)
			}
			switch {
			case resp.Error == nil:
				t.Errorf("%s via %s: accepted, result %s", c.name, url, resp.Result)
			case resp.Error.Code != jsonrpc.CodeInvalidParams || !strings.Contains(resp.Error.Message, c.want):
				t.Errorf("%s via %s: error %d %q, want %d containing %q", c.name, url, resp.Error.Code, resp.Error.Message, jsonrpc.CodeInvalidParams, c.want)
			case strings.Contains(resp.Error.Message, secret):
				t.Errorf("%s via %s: message %q echoes a value", c.name, url, resp.Error.Message)
			}
		}
	}
}

// post sends a raw MCP request.
func post(t *testing.T, url string, body io.Reader, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+server.MCPPath, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const listTools = `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`

func testOrigin(t *testing.T, url string) {
	if code, body := post(t, url, strings.NewReader(listTools), nil); code != http.StatusOK || !strings.Contains(body, "acquire_lease") {
		t.Fatalf("without Origin: %d %s", code, body)
	}
	for _, h := range []map[string]string{
		{"Origin": "https://evil.example"},
		{"Origin": url},
		{"Origin": "null"},
		{"Sec-Fetch-Site": "cross-site"},
		{"Host": "rebound.example:7070"}, // DNS rebinding onto a loopback listener
	} {
		code, body := post(t, url, strings.NewReader(listTools), h)
		if code != http.StatusForbidden || strings.Contains(body, "acquire_lease") || (h["Host"] == "" && !strings.Contains(body, `"ok":false`)) {
			t.Errorf("%v: %d %s", h, code, body)
		}
	}
}

func testBodyLimit(t *testing.T, url string) {
	// A valid request padded with whitespace to just over 1 MiB, sent with
	// and without a Content-Length.
	big := listTools + strings.Repeat(" ", 1<<20)
	for _, body := range []io.Reader{strings.NewReader(big), io.MultiReader(strings.NewReader(big))} {
		code, out := post(t, url, body, nil)
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(out, `"ok":false`) {
			t.Fatalf("oversized body: %d %.200s", code, out)
		}
	}
	fits := listTools + strings.Repeat(" ", 1<<19)
	if code, out := post(t, url, strings.NewReader(fits), nil); code != http.StatusOK {
		t.Fatalf("body under the limit: %d %.200s", code, out)
	}
}

// TestMCPRateLimited checks that /mcp shares the per-address request limit.
func TestMCPRateLimited(t *testing.T) {
	n := startNode(t, "solo", true, io.Discard, server.Config{RateLimit: 0.001, RateBurst: 2})
	waitFor(t, "a leader", 15*time.Second, func() bool { ok, _ := n.node.Ready(); return n.node.IsLeader() && ok })
	for i := 0; i < 2; i++ {
		if code, body := post(t, n.url, strings.NewReader(listTools), nil); code != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	if code, body := post(t, n.url, strings.NewReader(listTools), nil); code != http.StatusTooManyRequests || !strings.Contains(body, "retry_after_seconds") {
		t.Fatalf("third request: %d %s", code, body)
	}
}

// testClientAddress checks that create_agent_queue on a follower counts the
// queue quota against the MCP client's address, not the follower's: a
// client on 127.0.0.2 uses up its 20 queues while 127.0.0.1 (the
// follower's own address) still has room.
func testClientAddress(t *testing.T, url string) {
	other := connectFrom(t, url, net.ParseIP("127.0.0.2"))
	for i := 0; i < 20; i++ {
		call(t, other, "create_agent_queue", nil, http.StatusCreated)
	}
	if r := call(t, other, "create_agent_queue", nil, http.StatusTooManyRequests); r.num("retry_after_seconds") < 1 {
		t.Fatalf("21st queue: %v", r)
	}
	resp, err := http.Post(url+server.APIPrefix+"/queue", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("a queue for 127.0.0.1 after 127.0.0.2 used its quota: %d %s", resp.StatusCode, b)
	}
}

// testWaitingCalls: a waiting claim answers when a job arrives; one the
// client cancels stops waiting and takes no job (through a follower, so the
// cancellation crosses the peer link).
func testWaitingCalls(t *testing.T, cs *mcp.ClientSession) {
	q := call(t, cs, "create_agent_queue", nil, http.StatusCreated)
	qid, w, k, rd := q.str("queue_id"), q.str("write_token"), q.str("worker_token"), q.str("read_token")
	enqueue := func(key string) string {
		return call(t, cs, "enqueue_agent_queue_job", map[string]any{"queue_id": qid, "write_token": w, "job_key": key, "payload": key}, http.StatusCreated).str("job_id")
	}
	claimArgs := map[string]any{"queue_id": qid, "worker_token": k, "wait_seconds": 20}

	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "claim_agent_queue_job", Arguments: claimArgs})
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond)
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("a cancelled waiting claim answered")
	}
	time.Sleep(500 * time.Millisecond) // the cancellation travels
	first := enqueue("first")
	c := call(t, cs, "claim_agent_queue_job", map[string]any{"queue_id": qid, "worker_token": k}, http.StatusOK).obj("job")
	if c.str("job_id") != first || c.num("attempts") != 1 {
		t.Fatalf("a claim after a cancelled wait: %v (the cancelled wait took the job?)", c)
	}

	done := make(chan result, 1)
	go func() { done <- call(t, cs, "claim_agent_queue_job", claimArgs, http.StatusOK) }()
	time.Sleep(300 * time.Millisecond)
	second := enqueue("second")
	select {
	case r := <-done:
		if r.obj("job").str("job_id") != second {
			t.Fatalf("the waiting claim: %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting claim did not answer within 10 s of the enqueue")
	}
	ack := map[string]any{"queue_id": qid, "worker_token": k, "job_id": first, "receipt": c.str("receipt")}
	awaited := make(chan result, 1)
	go func() {
		awaited <- call(t, cs, "read_agent_queue_job", map[string]any{"queue_id": qid, "read_token": rd, "job_id": first, "wait_seconds": 20}, http.StatusOK)
	}()
	time.Sleep(300 * time.Millisecond)
	call(t, cs, "ack_agent_queue_job", ack, http.StatusOK)
	select {
	case r := <-awaited:
		if r.obj("job").str("status") != "completed" {
			t.Fatalf("the awaited job: %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the awaited read did not answer within 10 s of the ack")
	}
}
