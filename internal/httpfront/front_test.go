package httpfront

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// testHandler serves what the front reads in these tests: a request with
// "X-Mode: refuse" is not admitted, one with "X-Mode: hand-over" is handed
// over once read, and any other is answered "front <route> <params>
// <body>". BodyFailed answers 408 with the error.
type testHandler struct {
	mu     sync.Mutex
	failed []error
}

func (h *testHandler) Admit(r *Request) bool {
	mode, _ := r.Header("X-Mode")
	return mode != "refuse"
}

func (h *testHandler) Serve(r *Request) {
	if mode, _ := r.Header("X-Mode"); mode == "hand-over" {
		r.HandOver()
		return
	}
	body := fmt.Sprintf("front %d %s %s", r.Route(), r.Param("id"), r.Body)
	_ = r.Reply(http.StatusOK, []Field{{Name: "Content-Type", Value: "text/plain"}}, []byte(body))
}

func (h *testHandler) BodyFailed(r *Request, err error) {
	h.mu.Lock()
	h.failed = append(h.failed, err)
	h.mu.Unlock()
	_ = r.Reply(http.StatusRequestTimeout, nil, []byte("body failed"))
}

// startFront serves a front on a loopback port, with a net/http server
// behind it that answers "net/http <method> <path>".
func startFront(t *testing.T, h *testHandler) (*Front, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = fmt.Fprintf(w, "net/http %s %s", r.Method, r.URL.Path)
		}),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       10 * time.Second,
	}
	f := NewFront(Config{
		Listener: ln, Server: hs, Routes: []string{"/a", "/q/:id/jobs"}, Headers: []string{"X-Mode"},
		Refuse: []string{"X-Peer"}, BodyLimit: 1 << 10, BodyTimeout: 5 * time.Second,
		NewConn: func(net.Addr) ConnHandler { return h },
	})
	go func() { _ = hs.Serve(f) }()
	t.Cleanup(func() { _ = hs.Close(); f.CloseNow() })
	return f, ln.Addr().String()
}

func post(path, body string, headers ...string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: h\r\n%sContent-Length: %d\r\n\r\n%s", path, strings.Join(headers, ""), len(body), body)
}

// exchange writes raw on a new connection and reads n answers' bodies, then
// whether the connection was closed after them.
func exchange(t *testing.T, addr, raw string, n int) (bodies []string, closed bool) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	for range n {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d of %d: %v", len(bodies)+1, n, err)
		}
		b, _ := io.ReadAll(resp.Body)
		bodies = append(bodies, string(b))
	}
	_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err = br.ReadByte()
	return bodies, errors.Is(err, io.EOF)
}

func TestFrontServesWhatItMayAndHandsOverTheRest(t *testing.T) {
	h := &testHandler{}
	f, addr := startFront(t, h)
	cases := []struct {
		name   string
		raw    string
		want   []string
		closed bool
	}{
		{"served, pipelined", post("/a", "x") + post("/q/7/jobs", "y"), []string{"front 0  x", "front 1 7 y"}, false},
		{"a literal route and a parameter", post("/q/jobs/jobs", ""), []string{"front 1 jobs "}, false},
		{"a GET after a served POST", post("/a", "x") + "GET /a HTTP/1.1\r\nHost: h\r\n\r\n", []string{"front 0  x", "net/http GET /a"}, false},
		{"CRLF between POSTs", post("/a", "1") + "\r\n" + post("/a", "2"), []string{"front 0  1", "front 0  2"}, false},
		{"not admitted", post("/a", "x", "X-Mode: refuse\r\n") + post("/a", "y"), []string{"net/http POST /a", "net/http POST /a"}, false},
		{"handed over once read", post("/a", "x", "X-Mode: hand-over\r\n"), []string{"net/http POST /a"}, false},
		{"a refused header", post("/a", "x", "X-Peer: n1\r\n"), []string{"net/http POST /a"}, false},
		{"a header twice", post("/a", "x", "X-Mode: a\r\nX-Mode: b\r\n"), []string{"net/http POST /a"}, false},
		{"an unknown route", post("/b", "x"), []string{"net/http POST /b"}, false},
		{"a body over the limit", post("/a", strings.Repeat("x", 1<<10+1)), []string{"net/http POST /a"}, false},
		{"Connection: close", post("/a", "x", "Connection: close\r\n") + post("/a", "y"), []string{"front 0  x"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, closed := exchange(t, addr, tc.raw, len(tc.want))
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || closed != tc.closed {
				t.Errorf("answers %q closed %v, want %q closed %v", got, closed, tc.want, tc.closed)
			}
		})
	}
	if served, handed := f.Counts(); served == 0 || handed == 0 {
		t.Errorf("served %d, handed over %d", served, handed)
	}
}

// A body that ends before its Content-Length gets the handler's answer to
// that, and the connection is closed.
func TestFrontBodyThatEndsEarly(t *testing.T) {
	h := &testHandler{}
	_, addr := startFront(t, h)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	req := post("/a", "0123456789")
	_, _ = io.WriteString(conn, req[:len(req)-4])
	_ = conn.(*net.TCPConn).CloseWrite()
	all, _ := io.ReadAll(conn)
	if !strings.HasPrefix(string(all), "HTTP/1.1 408 ") || !strings.Contains(string(all), "Connection: close\r\n") {
		t.Fatalf("answer %q", all)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.failed) != 1 || !errors.Is(h.failed[0], io.ErrUnexpectedEOF) {
		t.Fatalf("BodyFailed with %v, want one io.ErrUnexpectedEOF", h.failed)
	}
}

// deadlineConn records the read deadlines set on it.
type deadlineConn struct {
	net.Conn
	reads []time.Time
}

func (d *deadlineConn) SetReadDeadline(t time.Time) error {
	d.reads = append(d.reads, t)
	return nil
}

func (d *deadlineConn) SetWriteDeadline(time.Time) error { return nil }

// A handed-over connection's read deadlines move back by the front's time
// until net/http has read the head; zero stays zero.
func TestReplayMovesDeadlinesUntilSettled(t *testing.T) {
	dc := &deadlineConn{}
	rc := &replayConn{Conn: dc, pending: []byte("GET")}
	rc.shift.Store(int64(2 * time.Second))
	at := time.Unix(100, 0)
	_ = rc.SetReadDeadline(at)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetDeadline(at)
	rc.settle()
	_ = rc.SetReadDeadline(at)
	want := []time.Time{at.Add(-2 * time.Second), {}, at.Add(-2 * time.Second), at}
	if len(dc.reads) != len(want) {
		t.Fatalf("deadlines %v, want %v", dc.reads, want)
	}
	for i := range want {
		if !dc.reads[i].Equal(want[i]) {
			t.Fatalf("deadline %d is %v, want %v", i, dc.reads[i], want[i])
		}
	}
	b := make([]byte, 8)
	if n, _ := rc.Read(b); string(b[:n]) != "GET" {
		t.Fatalf("first read %q, want the bytes the front read", b[:n])
	}
}

func TestRouterPrefersLiteralSegments(t *testing.T) {
	r := newRouter([]string{"/q/:id/jobs/:job/:action", "/q/:id/jobs/:job/retry", "/q/:id", "/lease"})
	var params [maxParams]string
	for path, want := range map[string]string{
		"/q/1/jobs/2/retry": "/q/:id/jobs/:job/retry",
		"/q/1/jobs/2/ack":   "/q/:id/jobs/:job/:action",
		"/q/1":              "/q/:id",
		"/lease":            "/lease",
		"/lease/":           "",
		"/q//jobs/2/ack":    "",
		"/q/./jobs/2/ack":   "",
		"/q/1/jobs":         "",
	} {
		got := ""
		if rt := r.match([]byte(path), &params); rt != nil {
			got = rt.path
		}
		if got != want {
			t.Errorf("%s matches %q, want %q", path, got, want)
		}
	}
}
