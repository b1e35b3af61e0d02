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
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/holdfast/holdfast/cluster"
)

const (
	develBuild = "holdfast (devel) commit 0123456789abcdef0123456789abcdef01234567 go1.26.8"
	oldBuild   = "holdfast v1.4.0 commit fedcba9876543210fedcba9876543210fedcba98+dirty go1.26.8"
)

// TestWriteStatusTable: the table has a row per member with what it
// reports of itself, and a line per problem under it.
func TestWriteStatusTable(t *testing.T) {
	n1 := &cluster.Status{NodeID: "n1", State: "follower", LeaderID: "n2", Term: 7, AppliedIndex: 41, Ready: true,
		HTTPAddr: "127.0.0.1:7070", Member: true, Formed: true, Level: 2, BuildVersion: develBuild, ActiveLevel: 2,
		Storage: cluster.StorageStatus{OK: true}}
	n2 := &cluster.Status{NodeID: "n2", State: "leader", LeaderID: "n2", Term: 7, AppliedIndex: 1042, Ready: false,
		HTTPAddr: "127.0.0.1:7080", Member: true, Formed: true, Level: 2, BuildVersion: develBuild, ActiveLevel: 2,
		ClockSkewed: true, ClockOffsetMs: 1500,
		Storage: cluster.StorageStatus{Faults: []cluster.StorageFault{{Kind: "raft-log", Error: "no space left on device"}}}}
	views := []memberView{
		{Member: cluster.Member{ID: "n1", HTTPAddr: "127.0.0.1:7070", Voter: true, Level: 2, BuildVersion: develBuild}, self: n1},
		{Member: cluster.Member{ID: "n2", HTTPAddr: "127.0.0.1:7080", Voter: true, Level: 2, BuildVersion: develBuild}, self: n2},
		{Member: cluster.Member{ID: "n3", HTTPAddr: "127.0.0.1:7090", Voter: true, Level: 1, BuildVersion: oldBuild},
			err: fmt.Errorf("get: %w", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})},
		{Member: cluster.Member{ID: "n4", Voter: false}, err: errors.New("no HTTP address known for it")},
	}
	var out bytes.Buffer
	if err := writeStatusTable(&out, n1, views); err != nil {
		t.Fatal(err)
	}
	want := `leader n2, term 7, active level 2 (as n1 at 127.0.0.1:7070 sees it)
NODE  ADDRESS         ROLE      READY  APPLIED  LEVEL  VERSION
n1    127.0.0.1:7070  follower  yes    41       2      (devel) 0123456
n2    127.0.0.1:7080  leader    no     1042     2      (devel) 0123456
n3    127.0.0.1:7090  ?         ?      ?        1      v1.4.0 fedcba9+dirty
n4    -               ?         ?      ?        -      -
n2: cannot write its raft-log: no space left on device
n2: clock off the cluster's by 1500 ms: it will not lead
n3: no answer: connection refused
n4: no answer: no HTTP address known for it
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}

	// A node outside any cluster is its only row, saying so.
	alone := &cluster.Status{NodeID: "n9", State: "follower", HTTPAddr: "127.0.0.1:7100", Level: 2, BuildVersion: "custom build"}
	out.Reset()
	if err := writeStatusTable(&out, alone, []memberView{{Member: cluster.Member{ID: "n9", HTTPAddr: "127.0.0.1:7100", Level: 2, BuildVersion: "custom build"}, self: alone}}); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.HasPrefix(s, "no leader, term 0") || !strings.Contains(s, "custom build") ||
		!strings.HasSuffix(s, "n9: has not formed or joined a cluster yet\n") {
		t.Errorf("a node outside any cluster:\n%s", s)
	}
}

// fakeStatusNode serves *st at /cluster/status (404 elsewhere), encoded
// as each request comes, and sets st.HTTPAddr to its address.
func fakeStatusNode(t *testing.T, st *cluster.Status) {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != cluster.StatusPath {
			http.NotFound(w, r)
			return
		}
		b, err := json.Marshal(st)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	t.Cleanup(s.Close)
	st.HTTPAddr = s.Listener.Addr().String()
}

// statusCluster starts fake nodes n1 (a follower, the one to ask) and n2
// (the leader), with n3 a member nothing answers for; it returns n1's
// status and n2's address.
func statusCluster(t *testing.T) (n1 *cluster.Status, n2Addr string) {
	t.Helper()
	n2 := &cluster.Status{NodeID: "n2", State: "leader", LeaderID: "n2", Term: 3, AppliedIndex: 12, Ready: true, Member: true, Formed: true,
		Level: 2, BuildVersion: develBuild, ActiveLevel: 2, Storage: cluster.StorageStatus{OK: true}}
	fakeStatusNode(t, n2)
	n1 = &cluster.Status{NodeID: "n1", State: "follower", LeaderID: "n2", LeaderHTTPAddr: n2.HTTPAddr, Term: 3, AppliedIndex: 11, Ready: true,
		Member: true, Formed: true, Level: 2, BuildVersion: develBuild, ActiveLevel: 2, Storage: cluster.StorageStatus{OK: true}}
	fakeStatusNode(t, n1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := l.Addr().String()
	l.Close()
	n1.Nodes = []cluster.Member{
		{ID: "n1", HTTPAddr: n1.HTTPAddr, Voter: true, Level: 2, BuildVersion: develBuild},
		{ID: "n2", HTTPAddr: n2.HTTPAddr, Voter: true, Level: 2, BuildVersion: develBuild},
		{ID: "n3", HTTPAddr: down, Voter: true, Level: 1, BuildVersion: oldBuild},
	}
	return n1, n2.HTTPAddr
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestClusterStatusOnATerminal: on a terminal, `cluster status` asks every
// member for its own status and prints the table; --json and --field
// print what a pipe gets.
func TestClusterStatusOnATerminal(t *testing.T) {
	n1, n2 := statusCluster(t)
	addr := n1.HTTPAddr
	var stdout, stderr bytes.Buffer
	if code := clusterStatusTo([]string{"--addr", addr}, &stdout, &stderr, true); code != exitOK {
		t.Fatalf("exit %d, stderr %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimRight(stdout.String(), "\n"), "\n")
	want := [][]string{
		{"leader", "n2,", "term", "3,", "active", "level", "2", "(as", "n1", "at", addr, "sees", "it)"},
		{"NODE", "ADDRESS", "ROLE", "READY", "APPLIED", "LEVEL", "VERSION"},
		{"n1", addr, "follower", "yes", "11", "2", "(devel)", "0123456"},
		{"n2", n2, "leader", "yes", "12", "2", "(devel)", "0123456"},
		{"n3", n1.Nodes[2].HTTPAddr, "?", "?", "?", "1", "v1.4.0", "fedcba9+dirty"},
		{"n3:", "no", "answer:", "connection", "refused"},
	}
	if len(lines) != len(want) {
		t.Fatalf("the table:\n%s", stdout.String())
	}
	for i, w := range want {
		got := strings.Fields(lines[i])
		if len(got) != len(w) {
			t.Fatalf("line %d is %q, want the fields %q", i+1, lines[i], w)
		}
		for j := range w {
			if got[j] != w[j] {
				t.Errorf("line %d is %q, want the fields %q", i+1, lines[i], w)
			}
		}
	}
	// The columns line up: each row's role starts under ROLE.
	col := strings.Index(lines[1], "ROLE")
	for _, l := range lines[2:5] {
		if l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("row %q does not line up with %q", l, lines[1])
		}
	}

	for _, args := range [][]string{{"--json"}, {"--field", "leader_id"}} {
		stdout.Reset()
		if code := clusterStatusTo(append([]string{"--addr", addr}, args...), &stdout, &stderr, true); code != exitOK {
			t.Fatalf("%v: exit %d, stderr %s", args, code, stderr.String())
		}
		if args[0] == "--field" && stdout.String() != "n2\n" || args[0] == "--json" && !json.Valid(stdout.Bytes()) {
			t.Errorf("%v on a terminal printed %q", args, stdout.String())
		}
	}
}

// TestClusterStatusPipedIsJSON: anything but a terminal gets the node's
// JSON answer as it came, with or without --json.
func TestClusterStatusPipedIsJSON(t *testing.T) {
	n1, _ := statusCluster(t)
	addr, body := n1.HTTPAddr, mustJSON(t, n1)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if isTerminal(w) {
		t.Fatal("a pipe is taken for a terminal")
	}
	var stderr bytes.Buffer
	for _, args := range [][]string{nil, {"--json"}} {
		var stdout bytes.Buffer
		if code := clusterStatusTo(append([]string{"--addr", addr}, args...), &stdout, &stderr, isTerminal(w)); code != exitOK {
			t.Fatalf("exit %d, stderr %s", code, stderr.String())
		}
		if stdout.String() != string(body)+"\n" {
			t.Errorf("%v: printed %q, want the answer %q", args, stdout.String(), body)
		}
	}
	w.Close()
}

// TestIsTerminal: neither a buffer, a pipe nor /dev/null is a terminal.
func TestIsTerminal(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, out := range map[string]io.Writer{"a buffer": &bytes.Buffer{}, "a pipe": w, os.DevNull: null} {
		if isTerminal(out) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
}

// TestShortReason: the usual reasons a member gives no answer are said in
// a few words; any other error whole.
func TestShortReason(t *testing.T) {
	refused := fmt.Errorf("get status: %w", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	for _, tc := range []struct {
		err  error
		want string
	}{
		{refused, "connection refused"},
		{fmt.Errorf("get status: %w", context.DeadlineExceeded), "timed out"},
		{&net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}, "timed out"},
		{errors.New("HTTP 500: internal error"), "HTTP 500: internal error"},
	} {
		if got := shortReason(tc.err); got != tc.want {
			t.Errorf("shortReason(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// TestShortVersion: a build's version is cut to its module version and
// short commit; other forms are kept whole.
func TestShortVersion(t *testing.T) {
	for in, want := range map[string]string{
		develBuild:                        "(devel) 0123456",
		oldBuild:                          "v1.4.0 fedcba9+dirty",
		"holdfast (no build information)": "holdfast (no build information)",
		"":                                "-",
	} {
		if got := shortVersion(in); got != want {
			t.Errorf("shortVersion(%q) = %q, want %q", in, got, want)
		}
	}
	if got := shortVersion(versionInfo()); strings.HasPrefix(got, "holdfast ") {
		t.Errorf("shortVersion of this binary's own version %q is %q", versionInfo(), got)
	}
}
