package server_test

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/testutil"
	"github.com/holdfast/holdfast/server"
)

// TestRefusedPeerLinkFallsBackToRESTForwarding: a follower the leader
// does not accept as a peer (here: another cluster key) gets no link, and
// forwards its clients' requests as REST requests instead; they are still
// answered.
func TestRefusedPeerLinkFallsBackToRESTForwarding(t *testing.T) {
	logs := &testutil.SyncBuffer{}
	leader := startNodeWithKey(t, "n0", "key-of-n0", true, logs, server.Config{})
	waitFor(t, "n0 to lead", 15*time.Second, func() bool {
		ok, _ := leader.node.Ready()
		return leader.node.IsLeader() && ok
	})
	follower := startNodeWithKey(t, "n1", "key-of-n1", false, logs, server.Config{})
	if err := leader.node.Join(context.Background(), cluster.JoinRequest{NodeID: "n1", RaftAddr: follower.node.RaftAddr(), HTTPAddr: follower.node.HTTPAddr(), Fresh: true}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "n1 to know the leader", 15*time.Second, func() bool {
		ok, _ := follower.node.Ready()
		_, addr := follower.node.Leader()
		return ok && addr != ""
	})
	var ns string
	waitFor(t, "a namespace", 5*time.Second, func() bool {
		code, body := restPost(t, follower.url+server.APIPrefix+"/lease/namespace", "{}")
		if m := regexp.MustCompile(`"namespace":"(ns_[^"]+)"`).FindStringSubmatch(body); code == http.StatusOK && m != nil {
			ns = m[1]
			return true
		}
		return false
	})
	// The first operation may find the link's refusal out (and then be
	// answered 503 not_applied); once it is known, requests are forwarded
	// as REST requests.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := restPost(t, follower.url+server.APIPrefix+"/lease", `{"namespace":"`+ns+`","key":"fallback","ttl_seconds":30}`)
		if code == http.StatusCreated {
			break
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "not_applied") || time.Now().After(deadline) {
			t.Fatalf("acquire through a follower without a link: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// On a connection of its own, an acquire first reaches the follower's
	// front, which does not forward: it hands the request, unanswered, to
	// net/http, whose router forwards it.
	_, before := follower.front.Counts()
	a := rawExchange(t, strings.TrimPrefix(follower.url, "http://"), 1,
		rawPost("/lease", `{"namespace":"`+ns+`","key":"fallback-2","ttl_seconds":30}`))[0]
	if _, after := follower.front.Counts(); a.status != http.StatusCreated || after != before+1 {
		t.Errorf("a new connection's acquire through the follower: %d %s, handed over %d times (want once)", a.status, a.raw, after-before)
	}
	out := logs.String()
	if !strings.Contains(out, "the leader refused a peer link; forwarding REST requests instead") {
		t.Fatal("the follower did not log the refused link")
	}
	if strings.Contains(out, "peer link opened") {
		t.Fatal("the leader opened a link for a node with another cluster key")
	}
}

// restPost posts a JSON body to url and returns the status and body.
func restPost(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
