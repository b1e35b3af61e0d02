package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/testutil"
)

// TestPeerLossIsLoggedOnceAMinute: a peer that fails several times a second
// is logged once when lost, once a minute after with the count, and once
// when its heartbeats resume; other lines pass unchanged.
func TestPeerLossIsLoggedOnceAMinute(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := &testutil.SyncBuffer{}
	base := hclog.New(&hclog.LoggerOptions{Output: out, Level: hclog.Trace})
	p := newPeerLogs(base, func() time.Time { return now })
	h, _, _ := testHealth(t)
	var log hclog.Logger = quietLogger{base, h, p}.Named("raft")

	peer := raft.Server{ID: "n2", Address: "127.0.0.1:7081"}
	dial := errors.New("dial tcp 127.0.0.1:7081: connect: connection refused")
	lines := func() int { return strings.Count(out.String(), "\n") }
	for i := range 200 { // 50 s at 4 lines a second
		switch i % 3 {
		case 0:
			log.Error("failed to heartbeat to", "peer", peer.Address, "backoff time", time.Second, "error", dial)
		case 1:
			log.Error("failed to appendEntries to", "peer", peer, "error", dial)
		default:
			log.Warn("failed to contact", "server-id", peer.ID, "time", time.Second)
		}
		now = now.Add(250 * time.Millisecond)
	}
	if n := lines(); n != 1 || !strings.Contains(out.String(), "lost contact with a peer") || !strings.Contains(out.String(), "peer=127.0.0.1:7081") ||
		!strings.Contains(out.String(), "connection refused") {
		t.Fatalf("50 s of failures logged %d lines, want 1 naming the peer and the error:\n%s", n, out.String())
	}
	for range 60 { // 15 s more: past the minute
		log.Error("failed to heartbeat to", "peer", peer.Address, "error", dial)
		now = now.Add(250 * time.Millisecond)
	}
	if n := lines(); n != 2 || !strings.Contains(out.String(), "still no contact with a peer") || !strings.Contains(out.String(), "failures=240") {
		t.Fatalf("after a minute: %d lines, want 2, the second with the count:\n%s", n, out.String())
	}
	log.Info("entering leader state", "leader", "n1")
	if n := lines(); n != 3 {
		t.Fatalf("another line was held back:\n%s", out.String())
	}
	p.back("n2")
	if n := lines(); n != 4 || !strings.Contains(out.String(), "peer reachable again") || !strings.Contains(out.String(), "failures=260") {
		t.Fatalf("after the peer came back: %d lines:\n%s", n, out.String())
	}
	p.back("n2") // once only
	log.Error("failed to heartbeat to", "peer", peer.Address, "error", dial)
	if n := lines(); n != 5 || strings.Count(out.String(), "lost contact with a peer") != 2 {
		t.Fatalf("a new loss after the return: %d lines:\n%s", n, out.String())
	}
}
