package client

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// refusedAddr is a loopback address nothing listens on.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := l.Addr().String()
	l.Close()
	return a
}

// node is a test server counting the requests it receives.
type node struct {
	*httptest.Server
	hits atomic.Int64
}

func newNode(t *testing.T, h func(n int64, w http.ResponseWriter, r *http.Request)) *node {
	t.Helper()
	n := &node{}
	n.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h(n.hits.Add(1), w, r)
	}))
	t.Cleanup(n.Close)
	return n
}

func answer(w http.ResponseWriter, status int, retryAfter, body string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write([]byte(body))
}

const notApplied = `{"ok":false,"outcome":"not_applied","error":"no leader"}`
const unknownOutcome = `{"ok":false,"outcome":"unknown","error":"result lost"}`

// hangUp reads the request and closes the connection without an answer: the
// outcome of the request is unknown to the client.
func hangUp(w http.ResponseWriter, _ *http.Request) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func mustNew(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var post = Request{Method: http.MethodPost, Path: APIPrefix + "/lease", Body: []byte(`{}`)}

func TestFailoverOnRefusedAndNotApplied(t *testing.T) {
	busy := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusServiceUnavailable, "5", notApplied)
	})
	good := newNode(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/json" || r.Header.Get("Authorization") != "Bearer tok" {
			answer(w, http.StatusBadRequest, "", `{"ok":false}`)
			return
		}
		answer(w, http.StatusCreated, "", `{"ok":true}`)
	})
	c := mustNew(t, Config{Addrs: []string{refusedAddr(t), busy.Listener.Addr().String(), good.URL}, Timeout: 10 * time.Second})
	req := post
	req.Token = "tok"
	start := time.Now()
	resp, err := c.Do(context.Background(), req)
	if err != nil || resp.Status != http.StatusCreated || resp.Addr != good.URL {
		t.Fatalf("Do = %v, %v; want 201 from %s", resp, err, good.URL)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("failover within one round waited %v (Retry-After is for the next round)", d)
	}
	// The next call starts at the address that answered.
	resp, err = c.Do(context.Background(), req)
	if err != nil || resp.Addr != good.URL || busy.hits.Load() != 1 {
		t.Fatalf("second Do = %v, %v after %d hits on the busy node; want straight to %s", resp, err, busy.hits.Load(), good.URL)
	}
}

func TestRetryAfterBetweenRounds(t *testing.T) {
	n := newNode(t, func(hit int64, w http.ResponseWriter, _ *http.Request) {
		if hit == 1 {
			answer(w, http.StatusServiceUnavailable, "1", notApplied)
			return
		}
		answer(w, http.StatusOK, "", `{"ok":true}`)
	})
	c := mustNew(t, Config{Addrs: []string{n.URL}, Timeout: 10 * time.Second})
	start := time.Now()
	resp, err := c.Do(context.Background(), post)
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("Do = %v, %v", resp, err)
	}
	if d := time.Since(start); d < 900*time.Millisecond {
		t.Fatalf("second attempt after %v, before the node's Retry-After of 1 s", d)
	}
}

func TestUnknownOutcomeNotRepeated(t *testing.T) {
	a := newNode(t, func(_ int64, w http.ResponseWriter, r *http.Request) { hangUp(w, r) })
	b := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, "", `{"ok":true}`) })
	c := mustNew(t, Config{Addrs: []string{a.URL, b.URL}, Timeout: 5 * time.Second})
	resp, err := c.Do(context.Background(), post)
	if !errors.Is(err, ErrUnknown) || resp != nil {
		t.Fatalf("Do = %v, %v; want ErrUnknown", resp, err)
	}
	if a.hits.Load() != 1 || b.hits.Load() != 0 {
		t.Fatalf("hits a=%d b=%d: a request of unknown outcome was sent again", a.hits.Load(), b.hits.Load())
	}

	// The same for a 503 "unknown": answered to the caller, not repeated.
	u := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusServiceUnavailable, "1", unknownOutcome)
	})
	c = mustNew(t, Config{Addrs: []string{u.URL, b.URL}, Timeout: 5 * time.Second})
	resp, err = c.Do(context.Background(), post)
	if err != nil || resp.Outcome() != "unknown" || b.hits.Load() != 0 {
		t.Fatalf("Do = %v, %v (b hits %d); want the 503 unknown, not repeated", resp, err, b.hits.Load())
	}
}

// A read that loses its answer has changed nothing: it fails over like a
// refused connection and never reports an unknown outcome.
func TestReadNeverUnknown(t *testing.T) {
	a := newNode(t, func(_ int64, w http.ResponseWriter, r *http.Request) { hangUp(w, r) })
	b := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, "", `{"ok":true}`) })
	c := mustNew(t, Config{Addrs: []string{a.URL, b.URL}, Timeout: 5 * time.Second})
	resp, err := c.Do(context.Background(), Request{Method: http.MethodGet, Path: "/cluster/status"})
	if err != nil || resp.Status != http.StatusOK || b.hits.Load() != 1 {
		t.Fatalf("Do = %v, %v; want the 200 from b", resp, err)
	}
	c = mustNew(t, Config{Addrs: []string{a.URL}, Timeout: time.Second})
	if _, err := c.Do(context.Background(), Request{Method: http.MethodGet, Path: "/cluster/status"}); err == nil || errors.Is(err, ErrUnknown) {
		t.Fatalf("a read whose answers are lost: %v; want an error that is not an unknown outcome", err)
	}
}

func TestRepeatableAfterUnknown(t *testing.T) {
	a := newNode(t, func(_ int64, w http.ResponseWriter, r *http.Request) { hangUp(w, r) })
	b := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, "", `{"ok":true}`) })
	c := mustNew(t, Config{Addrs: []string{a.URL, b.URL}, Timeout: 5 * time.Second})
	req := post
	req.Repeatable = true
	resp, err := c.Do(context.Background(), req)
	if err != nil || resp.Status != http.StatusOK || b.hits.Load() != 1 {
		t.Fatalf("Do = %v, %v; want the repeat's 200 from b", resp, err)
	}
}

// When time runs out after an attempt of unknown outcome, the answer says
// unknown, even if later attempts certainly did nothing.
func TestUnknownWinsAtTimeout(t *testing.T) {
	a := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusServiceUnavailable, "", unknownOutcome)
	})
	b := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusServiceUnavailable, "", notApplied)
	})
	c := mustNew(t, Config{Addrs: []string{a.URL, b.URL}, Timeout: 1500 * time.Millisecond})
	req := post
	req.Repeatable = true
	start := time.Now()
	resp, err := c.Do(context.Background(), req)
	if err != nil || resp.Outcome() != "unknown" {
		t.Fatalf("Do = %v, %v; want the 503 unknown", resp, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Do took %v with a 1.5 s timeout", d)
	}
	if b.hits.Load() < 1 {
		t.Fatal("the repeatable request never reached the second node")
	}
}

func TestAllRefusedBoundedByTimeout(t *testing.T) {
	a, b := refusedAddr(t), refusedAddr(t)
	c := mustNew(t, Config{Addrs: []string{a, b}, Timeout: time.Second})
	start := time.Now()
	resp, err := c.Do(context.Background(), post)
	if err == nil || errors.Is(err, ErrUnknown) || resp != nil {
		t.Fatalf("Do = %v, %v; want a connection error, not an unknown outcome", resp, err)
	}
	// Every address is named with its error, and the error still says
	// what kind it is.
	var op *net.OpError
	if msg := err.Error(); !strings.Contains(msg, a+": ") || !strings.Contains(msg, b+": ") || !strings.Contains(msg, "refused") || !errors.As(err, &op) {
		t.Errorf("the error %q does not name both nodes and their errors", msg)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 4*time.Second {
		t.Fatalf("Do gave up after %v with a 1 s timeout", d)
	}
}

func TestOnceIsOneAttempt(t *testing.T) {
	busy := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusServiceUnavailable, "1", notApplied)
	})
	c := mustNew(t, Config{Addrs: []string{busy.URL, refusedAddr(t)}, Timeout: 10 * time.Second})
	resp, err := c.Do(context.Background(), Request{Method: http.MethodGet, Path: "/readyz", Once: true})
	if err != nil || resp.Status != http.StatusServiceUnavailable || busy.hits.Load() != 1 {
		t.Fatalf("Once = %v, %v after %d hits; want the one 503", resp, err, busy.hits.Load())
	}
	c = mustNew(t, Config{Addrs: []string{refusedAddr(t)}, Timeout: 10 * time.Second})
	start := time.Now()
	if _, err := c.Do(context.Background(), Request{Method: http.MethodGet, Path: "/readyz", Once: true}); err == nil || errors.Is(err, ErrUnknown) || time.Since(start) > 2*time.Second {
		t.Fatalf("Once to a refused address: %v after %v; want the dial error at once", err, time.Since(start))
	}
}

func TestOperatorKeyOnlyOnOperatorCalls(t *testing.T) {
	var keys []string
	n := newNode(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		keys = append(keys, r.Header.Get("X-Holdfast-Cluster-Key"))
		answer(w, http.StatusOK, "", `{}`)
	})
	c := mustNew(t, Config{Addrs: []string{n.URL}, ClusterKey: "k"})
	c.Do(context.Background(), Request{Method: http.MethodGet, Path: "/cluster/status"})
	c.Do(context.Background(), Request{Method: http.MethodGet, Path: "/cluster/settings", Operator: true})
	if len(keys) != 2 || keys[0] != "" || keys[1] != "k" {
		t.Fatalf("cluster key headers %q; want only on the operator call", keys)
	}
}

func TestTLSWithCAFile(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, http.StatusOK, "", `{"tls":true}`)
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	// An address without a scheme uses https once a CA file is given.
	c := mustNew(t, Config{Addrs: []string{srv.Listener.Addr().String()}, CAFile: ca})
	resp, err := c.Do(context.Background(), Request{Method: http.MethodGet, Path: "/cluster/status"})
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("Do over TLS = %v, %v", resp, err)
	}
	// Set-up mistakes end the call after one round, not at its timeout
	// (30 s here): another round cannot mend them.
	quick := func(what string, c *Client, want string) {
		t.Helper()
		start := time.Now()
		_, err := c.Do(context.Background(), post)
		if err == nil || errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want an error saying %q, not an unknown outcome", what, err, want)
		}
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("%s: the call took %v, as long as its timeout", what, d)
		}
	}
	// Plain HTTP to the TLS node: the error says to give the CA file.
	quick("plain HTTP to a TLS node", mustNew(t, Config{Addrs: []string{srv.Listener.Addr().String()}, Timeout: 30 * time.Second}), "--ca-file")
	// Without the CA the certificate is refused (nothing was sent).
	quick("HTTPS without the CA", mustNew(t, Config{Addrs: []string{srv.URL}, Timeout: 30 * time.Second}), "certificate")
	// HTTPS to a plain node.
	plain := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) { answer(w, http.StatusOK, "", `{}`) })
	quick("HTTPS to a plain node", mustNew(t, Config{Addrs: []string{plain.Listener.Addr().String()}, CAFile: ca, Timeout: 30 * time.Second}), "HTTP response to HTTPS client")
}

func TestConfigErrors(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no address":   {Addrs: []string{" ", ""}},
		"bad scheme":   {Addrs: []string{"ftp://x"}},
		"missing CA":   {Addrs: []string{"a:1"}, CAFile: "/nonexistent/ca.pem"},
		"half a pair":  {Addrs: []string{"a:1"}, CertFile: "/x.pem"},
		"missing pair": {Addrs: []string{"a:1"}, CertFile: "/x.pem", KeyFile: "/y.pem"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted %+v", name, cfg)
		}
	}
	if got := SplitAddrs(" a:1, ,b:2,"); len(got) != 2 || got[0] != "a:1" || got[1] != "b:2" {
		t.Errorf("SplitAddrs = %q", got)
	}
}

func TestAnswerOverMaxBodyIsAnError(t *testing.T) {
	big := strings.Repeat("x", 5<<20)
	n := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusOK, "", big)
	})
	c := mustNew(t, Config{Addrs: []string{n.URL}, Timeout: 10 * time.Second})
	get := Request{Method: http.MethodGet, Path: "/cluster/snapshot", Once: true}
	if resp, err := c.Do(context.Background(), get); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("a 5 MiB answer with the default bound: %v, %v; want an error, not a cut answer", resp, err)
	}
	get.MaxBody = 6 << 20
	if resp, err := c.Do(context.Background(), get); err != nil || len(resp.Body) != len(big) {
		t.Fatalf("a 5 MiB answer with MaxBody 6 MiB: %v; want it whole", err)
	}
}

// TestDeadlineBeforeTheRequestIsNotUnknown: a node that accepts connections
// but never completes a TLS handshake keeps every attempt from writing its
// request, so when the deadline cuts the attempt short nothing can have
// taken effect: the error must not be an unknown outcome.
func TestDeadlineBeforeTheRequestIsNotUnknown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var held []net.Conn // held open, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, conn)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
	})
	c := mustNew(t, Config{Addrs: []string{"https://" + ln.Addr().String()}, Timeout: 500 * time.Millisecond})
	_, err = c.Do(context.Background(), post)
	if err == nil || errors.Is(err, ErrUnknown) {
		t.Fatalf("Do against a silent TLS endpoint: %v; want a failure that is not an unknown outcome", err)
	}
}

// TestTimeoutHeaderLetsTheNodeAnswerFirst: every attempt says how much of the
// call's time is left, and a node that uses all of it but the margin to
// answer "not applied" (as one waiting for a leader does) gets that answer
// through: the call ends with the 503, not with an unknown outcome.
func TestTimeoutHeaderLetsTheNodeAnswerFirst(t *testing.T) {
	var budgets []int64
	var mu sync.Mutex
	n := newNode(t, func(_ int64, w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.ParseInt(r.Header.Get(TimeoutHeader), 10, 64)
		if err != nil || ms < 1 {
			answer(w, http.StatusBadRequest, "", `{"ok":false}`)
			return
		}
		mu.Lock()
		budgets = append(budgets, ms)
		mu.Unlock()
		time.Sleep(time.Duration(ms)*time.Millisecond - min(time.Duration(ms)*time.Millisecond/5, 250*time.Millisecond))
		answer(w, http.StatusServiceUnavailable, "", notApplied)
	})
	c := mustNew(t, Config{Addrs: []string{n.URL}, Timeout: 1500 * time.Millisecond})
	resp, err := c.Do(context.Background(), post)
	if err != nil || resp.Outcome() != "not_applied" {
		t.Fatalf("Do = %v, %v; want the 503 not_applied", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(budgets) == 0 || budgets[0] > 1500 || budgets[0] < 1000 {
		t.Fatalf("X-Holdfast-Timeout values %v; the first should be what is left of 1500 ms", budgets)
	}
	for i := 1; i < len(budgets); i++ {
		if budgets[i] >= budgets[i-1] || budgets[i] < minAttempt.Milliseconds() {
			t.Fatalf("X-Holdfast-Timeout values %v: each attempt should get less, and none less than %v", budgets, minAttempt)
		}
	}
}

// TestStorageRefusalFailsOver: a 507 "storage" says nothing was written
// (outcome not_applied), so the call moves to the next node; a 507 for a
// cluster limit has no outcome and is the answer.
func TestStorageRefusalFailsOver(t *testing.T) {
	full := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusInsufficientStorage, "2", `{"ok":false,"error":"storage","outcome":"not_applied","node_id":"n1","storage":"raft-log"}`)
	})
	good := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusCreated, "", `{"ok":true}`)
	})
	c := mustNew(t, Config{Addrs: []string{full.URL, good.URL}, Timeout: 10 * time.Second})
	resp, err := c.Do(context.Background(), post)
	if err != nil || resp.Status != http.StatusCreated || full.hits.Load() != 1 {
		t.Fatalf("Do = %v, %v after %d hits on the full node; want 201 from the next node", resp, err, full.hits.Load())
	}

	limit := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusInsufficientStorage, "", `{"ok":false,"error":"limit_reached","setting":"max_queues","limit":10}`)
	})
	other := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		answer(w, http.StatusCreated, "", `{"ok":true}`)
	})
	c = mustNew(t, Config{Addrs: []string{limit.URL, other.URL}, Timeout: 10 * time.Second})
	resp, err = c.Do(context.Background(), post)
	if err != nil || resp.Status != http.StatusInsufficientStorage || other.hits.Load() != 0 {
		t.Fatalf("Do = %v, %v, %d hits on the other node; want the limit's 507, not sent again", resp, err, other.hits.Load())
	}
}

// TestBadAddressIsRefusedUpFront: an address no request can be built for is
// an error of New (a usage error), not an attempt whose outcome is unknown.
func TestBadAddressIsRefusedUpFront(t *testing.T) {
	for _, a := range []string{"127.0.0.1:abc", "127.0.0.1 18000", "127.0.0.1:18000:1", "127.0.0.1:0", "127.0.0.1:70000", "http://:7070", "ftp://127.0.0.1:7070"} {
		if _, err := New(Config{Addrs: []string{a}}); err == nil || !strings.Contains(err.Error(), "address") {
			t.Errorf("New(%q) = %v; want an error naming the address", a, err)
		}
	}
	for _, a := range []string{"127.0.0.1:7070", "localhost:7070", "[::1]:7070", "http://127.0.0.1:7070/", "https://node.example.internal", "10.0.0.1"} {
		if _, err := New(Config{Addrs: []string{a}}); err != nil {
			t.Errorf("New(%q): %v", a, err)
		}
	}
}

// bufSink is a BodySink in memory; fail makes its writes fail.
type bufSink struct {
	bytes.Buffer
	resets int
	fail   error
}

func (s *bufSink) Write(p []byte) (int, error) {
	if s.fail != nil {
		return 0, s.fail
	}
	return s.Buffer.Write(p)
}

func (s *bufSink) Reset() error { s.resets++; s.Buffer.Reset(); return nil }

// TestAnswerIntoASink: a 200 answer streams into Request.Into (from its
// start, Reset first) and not into Response.Body; an answer over MaxBody
// is an error; a sink that cannot keep the answer ends the call at once,
// without asking another node.
func TestAnswerIntoASink(t *testing.T) {
	big := strings.Repeat("x", 5<<20)
	var calls atomic.Int64
	n := newNode(t, func(_ int64, w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		answer(w, http.StatusOK, "", big)
	})
	c := mustNew(t, Config{Addrs: []string{n.URL, n.URL}, Timeout: 10 * time.Second})
	sink := &bufSink{}
	get := Request{Method: http.MethodGet, Path: "/cluster/snapshot", MaxBody: 6 << 20, Into: sink}
	resp, err := c.Do(context.Background(), get)
	if err != nil || len(resp.Body) != 0 || sink.String() != big || sink.resets != 1 {
		t.Fatalf("into a sink: %v; body %d bytes, sink %d bytes after %d resets", err, len(resp.Body), sink.Len(), sink.resets)
	}
	get.MaxBody = 1 << 20
	if _, err := c.Do(context.Background(), get); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("an answer over MaxBody into a sink: %v", err)
	}
	calls.Store(0)
	get.MaxBody, sink.fail = 6<<20, errors.New("disk full")
	var se *SinkError
	if _, err := c.Do(context.Background(), get); !errors.As(err, &se) || calls.Load() != 1 {
		t.Fatalf("a failing sink: %v after %d calls; want a SinkError after one", err, calls.Load())
	}
}
