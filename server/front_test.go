package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/server"
)

// rawAnswer is one HTTP answer read off a raw connection.
type rawAnswer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

// rawExchange writes req (one or more raw requests) on a new connection in
// the given pieces and reads n answers.
func rawExchange(t *testing.T, addr string, n int, pieces ...string) []rawAnswer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		for i, p := range pieces {
			if i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if _, err := io.WriteString(conn, p); err != nil {
				return
			}
		}
	}()
	br := bufio.NewReader(conn)
	var out []rawAnswer
	for range n {
		resp, err := http.ReadResponse(br, nil)
		for err == nil && resp.StatusCode < 200 { // 100 Continue
			resp, err = http.ReadResponse(br, nil)
		}
		if err != nil {
			t.Fatalf("answer %d of %d: %v", len(out)+1, n, err)
		}
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		a := rawAnswer{status: resp.StatusCode, header: resp.Header, raw: string(b)}
		if err := json.Unmarshal(b, &a.body); err != nil {
			t.Fatalf("answer %d: body %q is not a JSON object: %v", len(out)+1, b, err)
		}
		out = append(out, a)
	}
	return out
}

func rawPost(path, body string, headers ...string) string {
	h := strings.Join(headers, "")
	return fmt.Sprintf("POST %s%s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", server.APIPrefix, path, h, len(body), body)
}

// keys is the sorted field names of an answer's body.
func bodyKeys(m map[string]any) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// startLeader starts one node, serving through its front, and waits for it
// to lead.
func startLeader(t *testing.T) *testNode {
	t.Helper()
	n := startNode(t, "n0", true, io.Discard, server.Config{})
	waitFor(t, "n0 to lead", 15*time.Second, func() bool { ok, _ := n.node.Ready(); return ok && n.node.IsLeader() })
	return n
}

// TestFrontAnswersAsNetHTTP sends the same requests to one node through
// the front and through net/http alone and checks that the answers agree:
// status, headers but Date, and the body (byte for byte where it holds no
// fresh id or token, else its fields).
func TestFrontAnswersAsNetHTTP(t *testing.T) {
	n := startLeader(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := n.srv.HTTPServer()
	go func() { _ = plain.Serve(ln) }()
	t.Cleanup(func() { _ = plain.Close() })
	frontAddr, plainAddr := strings.TrimPrefix(n.url, "http://"), ln.Addr().String()

	q := rawExchange(t, frontAddr, 1, rawPost("/queue", ""))[0]
	if q.status != http.StatusCreated {
		t.Fatalf("create queue: %d %s", q.status, q.raw)
	}
	id, write, worker := q.body["queue_id"].(string), q.body["write_token"].(string), q.body["worker_token"].(string)
	auth := func(tok string) string { return "Authorization: Bearer " + tok + "\r\n" }
	ns := rawExchange(t, frontAddr, 1, rawPost("/lease/namespace", ""))[0].body["namespace"].(string)

	cases := []struct {
		name  string
		req   func(i int) string
		exact bool // the body holds nothing fresh: byte for byte
	}{
		{"enqueue", func(i int) string {
			return rawPost("/queue/"+id+"/jobs", fmt.Sprintf(`{"job_key":"k%d","payload":{"n":1}}`, i), auth(write))
		}, false},
		{"enqueue again (deduplicated)", func(int) string {
			return rawPost("/queue/"+id+"/jobs", `{"job_key":"same","payload":1}`, auth(write))
		}, false},
		{"enqueue, unknown field", func(int) string {
			return rawPost("/queue/"+id+"/jobs", `{"job_key":"k","payload":1,"extra":2}`, auth(write))
		}, true},
		{"enqueue, no token", func(int) string { return rawPost("/queue/"+id+"/jobs", `{"job_key":"k","payload":1}`) }, true},
		{"enqueue, worker token", func(int) string {
			return rawPost("/queue/"+id+"/jobs", `{"job_key":"k","payload":1}`, auth(worker))
		}, true},
		{"enqueue, bad queue id", func(int) string { return rawPost("/queue/nope/jobs", `{"job_key":"k","payload":1}`, auth(write)) }, true},
		{"enqueue, not JSON", func(int) string { return rawPost("/queue/"+id+"/jobs", `{"job_key":`, auth(write)) }, true},
		{"enqueue, empty body", func(int) string { return rawPost("/queue/"+id+"/jobs", ``, auth(write)) }, true},
		{"enqueue, text body", func(int) string {
			return strings.Replace(rawPost("/queue/"+id+"/jobs", `{}`, auth(write)), "application/json", "text/plain", 1)
		}, true},
		{"claim", func(int) string { return rawPost("/queue/"+id+"/claim", `{"visibility_timeout":60}`, auth(worker)) }, false},
		{"ack, wrong receipt", func(int) string {
			return rawPost("/queue/"+id+"/jobs/j_nope/ack", `{"receipt":"r"}`, auth(worker))
		}, true},
		{"unknown job action", func(int) string { return rawPost("/queue/"+id+"/jobs/j/frob", `{}`, auth(worker)) }, true},
		{"bad caller timeout", func(int) string {
			return rawPost("/queue/"+id+"/jobs", `{"job_key":"k","payload":1}`, auth(write), "X-Holdfast-Timeout: soon\r\n")
		}, true},
		{"acquire", func(i int) string {
			return rawPost("/lease", fmt.Sprintf(`{"namespace":%q,"key":"k%d","ttl_seconds":30}`, ns, i))
		}, false},
		{"acquire, held", func(int) string {
			return rawPost("/lease/acquire", fmt.Sprintf(`{"namespace":%q,"key":"held","ttl_seconds":30}`, ns))
		}, false},
		{"release, wrong owner", func(int) string {
			return rawPost("/lease/release", fmt.Sprintf(`{"namespace":%q,"key":"held","owner_token":"x"}`, ns))
		}, true},
		{"renew, missing field", func(int) string { return rawPost("/lease/renew", fmt.Sprintf(`{"namespace":%q}`, ns)) }, true},
	}
	for i, tc := range cases {
		if strings.Contains(tc.name, "again") || strings.Contains(tc.name, "held") {
			rawExchange(t, plainAddr, 1, tc.req(0)) // the first of two alike
		}
		a := rawExchange(t, frontAddr, 1, tc.req(2*i))[0]
		b := rawExchange(t, plainAddr, 1, tc.req(2*i+1))[0]
		if a.status != b.status {
			t.Errorf("%s: front %d %s, net/http %d %s", tc.name, a.status, a.raw, b.status, b.raw)
			continue
		}
		a.header.Del("Date")
		b.header.Del("Date")
		if fmt.Sprint(a.header) != fmt.Sprint(b.header) {
			t.Errorf("%s: headers differ: front %v, net/http %v", tc.name, a.header, b.header)
		}
		if tc.exact && a.raw != b.raw {
			t.Errorf("%s: bodies differ:\nfront    %s\nnet/http %s", tc.name, a.raw, b.raw)
		}
		if !tc.exact && bodyKeys(a.body) != bodyKeys(b.body) {
			t.Errorf("%s: fields differ:\nfront    %s\nnet/http %s", tc.name, a.raw, b.raw)
		}
	}
	if served, _ := n.front.Counts(); served < uint64(len(cases)) {
		t.Errorf("the front served %d requests, want at least %d", served, len(cases))
	}
}

// TestFrontHandsOverWhatItDoesNotServe checks that requests the front does
// not serve reach net/http on the same connection, after those it served,
// and that pipelined, split and closing requests are answered in order.
func TestFrontHandsOverWhatItDoesNotServe(t *testing.T) {
	n := startLeader(t)
	addr := strings.TrimPrefix(n.url, "http://")
	q := rawExchange(t, addr, 1, rawPost("/queue", ""))[0].body
	id, write, worker := q["queue_id"].(string), q["write_token"].(string), q["worker_token"].(string)
	auth := func(tok string) string { return "Authorization: Bearer " + tok + "\r\n" }
	enq := func(k string) string {
		return rawPost("/queue/"+id+"/jobs", fmt.Sprintf(`{"job_key":%q,"payload":1}`, k), auth(write))
	}
	chunked := fmt.Sprintf("POST %s/queue/%s/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
		server.APIPrefix, id, write, len(`{"job_key":"c","payload":1}`), `{"job_key":"c","payload":1}`)
	read := fmt.Sprintf("GET %s/queue/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", server.APIPrefix, id, q["read_token"])
	waiting := rawPost("/queue/"+id+"/claim", `{"visibility_timeout":30,"wait_seconds":1}`, auth(worker))

	cases := []struct {
		name   string
		pieces []string
		want   []int
		handed bool
	}{
		{"pipelined, then a read", []string{enq("p1") + enq("p2") + read}, []int{201, 201, 200}, true},
		{"split into pieces", func() []string { r := enq("s1"); return []string{r[:10], r[10:60], r[60:]} }(), []int{201}, false},
		{"chunked body", []string{chunked}, []int{201}, true},
		{"expect continue", []string{strings.Replace(enq("e1"), "Host: x\r\n", "Host: x\r\nExpect: 100-continue\r\n", 1)}, []int{201}, true},
		{"HTTP/1.0", []string{strings.Replace(enq("h1"), "HTTP/1.1", "HTTP/1.0", 1)}, []int{201}, true},
		{"query string", []string{strings.Replace(enq("q1"), "/jobs HTTP", "/jobs?x=1 HTTP", 1)}, []int{201}, true},
		{"escaped path", []string{strings.Replace(enq("x1"), "/jobs HTTP", "/job%73 HTTP", 1)}, []int{201}, true},
		{"waiting claim", []string{waiting}, []int{200}, true},
		{"no Host", []string{strings.Replace(enq("n1"), "Host: x\r\n", "", 1)}, nil, true},
		{"two lengths", []string{strings.Replace(enq("l1"), "Host: x\r\n", "Host: x\r\nContent-Length: 3\r\n", 1)}, nil, true},
		{"bare LF", []string{strings.ReplaceAll(enq("b1"), "\r\n", "\n")}, []int{201}, true},
	}
	for _, tc := range cases {
		_, before := n.front.Counts()
		if tc.want == nil {
			// net/http refuses these itself with a plain-text 400.
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = io.WriteString(conn, tc.pieces[0])
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil || resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %v %v, want net/http's 400", tc.name, resp, err)
			}
			_ = conn.Close()
		} else {
			got := rawExchange(t, addr, len(tc.want), tc.pieces...)
			for i, a := range got {
				if a.status != tc.want[i] {
					t.Errorf("%s: answer %d is %d %s, want %d", tc.name, i+1, a.status, a.raw, tc.want[i])
				}
			}
		}
		_, after := n.front.Counts()
		if handed := after > before; handed != tc.handed {
			t.Errorf("%s: handed to net/http %v, want %v", tc.name, handed, tc.handed)
		}
	}

	// Connection: close is answered in kind and the connection ends.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, strings.Replace(enq("c1"), "Host: x\r\n", "Host: x\r\nConnection: close\r\n", 1))
	all, _ := io.ReadAll(conn)
	if !bytes.HasPrefix(all, []byte("HTTP/1.1 201 Created\r\n")) || !bytes.Contains(all, []byte("\r\nConnection: close\r\n")) {
		t.Errorf("Connection: close answered %q", all)
	}
}

// TestFrontShutdown checks that Shutdown closes idle connections and lets
// a request in progress finish.
func TestFrontShutdown(t *testing.T) {
	n := startLeader(t)
	addr := strings.TrimPrefix(n.url, "http://")
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	busy, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// Half a request: the connection is serving it.
	req := rawPost("/queue", "{}")
	_, _ = io.WriteString(busy, req[:len(req)-1])
	time.Sleep(100 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- n.front.Shutdown(ctx)
	}()
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("idle connection: read %v, want EOF", err)
	}
	_, _ = io.WriteString(busy, req[len(req)-1:])
	_ = busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("request in progress during shutdown: %v %v", resp, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Error("the listener still accepts after shutdown")
	}
}

// flakyListener fails its first Accept, as a listener out of file
// descriptors does, then accepts from the real one.
type flakyListener struct {
	net.Listener
	failed bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed {
		l.failed = true
		return nil, fmt.Errorf("accept: %w", syscall.EMFILE)
	}
	return l.Listener.Accept()
}

// TestFrontRetriesAFailedAccept checks that an accept error other than a
// closed listener is waited out, not the end of the server.
func TestFrontRetriesAFailedAccept(t *testing.T) {
	n := startLeader(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := n.srv.HTTPServer()
	front := n.srv.NewFront(&flakyListener{Listener: ln}, hs)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(front) }()
	t.Cleanup(func() { _ = hs.Close(); front.CloseNow() })
	a := rawExchange(t, ln.Addr().String(), 1, rawPost("/queue", ""))[0]
	if a.status != http.StatusCreated {
		t.Fatalf("after a failed accept: %d %s", a.status, a.raw)
	}
	select {
	case err := <-served:
		t.Fatalf("the server stopped: %v", err)
	default:
	}
}
