package httpfront

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// enqueueRequest is a typical enqueue as the Go HTTP client sends it.
var enqueueRequest = []byte("POST /services/v1/queue/0123456789abcdef0123456789abcdef/jobs HTTP/1.1\r\n" +
	"Host: 127.0.0.1:7070\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: 290\r\n" +
	"Authorization: Bearer wr_0123456789abcdefghijklmnopqrstuvwxyzABCDEFG\r\n" +
	"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n" +
	`{"job_key":"k1","payload":"` + string(bytes.Repeat([]byte("a"), 254)) + `"}`)

// testRoutes are routes of the kind the front serves in holdfast.
func testRoutes() []string {
	return []string{"/services/v1/lease", "/services/v1/lease/acquire", "/services/v1/lease/renew", "/services/v1/queue",
		"/services/v1/queue/:queue_id/jobs", "/services/v1/queue/:queue_id/claim",
		"/services/v1/queue/:queue_id/jobs/:job_id/retry", "/services/v1/queue/:queue_id/jobs/:job_id/:action"}
}

// parser is a front that only parses: nothing is listened on.
func parser() *Front {
	cfg := Config{Routes: testRoutes(), Headers: []string{"Content-Type", "Authorization", "X-Holdfast-Timeout"},
		Refuse: []string{"X-Holdfast-Forwarded-By"}, BodyLimit: 64 << 10}
	return &Front{cfg: cfg, router: newRouter(cfg.Routes)}
}

// parseWhole parses a whole head at once.
func (f *Front) parseWhole(in []byte, req *Request) verdict {
	var p headParser
	p.reset()
	*req = Request{c: &conn{f: f}}
	return f.parse(&p, in, req)
}

// BenchmarkRequestHead reads the head of an enqueue: as the front does, and
// as net/http's server does (http.ReadRequest is the part of it that can be
// run alone; the server adds its connection bookkeeping).
func BenchmarkRequestHead(b *testing.B) {
	b.Run("front", func(b *testing.B) {
		f := parser()
		var req Request
		b.ReportAllocs()
		for b.Loop() {
			if v := f.parseWhole(enqueueRequest, &req); v != served {
				b.Fatal(v)
			}
		}
	})
	b.Run("net-http", func(b *testing.B) {
		rd := bytes.NewReader(enqueueRequest)
		br := bufio.NewReader(rd)
		b.ReportAllocs()
		for b.Loop() {
			rd.Reset(enqueueRequest)
			br.Reset(rd)
			if _, err := http.ReadRequest(br); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// FuzzFrontHead checks the front's reading of a request head against
// net/http's: whatever head the front serves, net/http reads as the same
// request (method, path, Content-Length, and the headers the handlers read),
// so no request means one thing to the front and another to net/http. The
// head is also fed in two pieces, split where the fuzzer says, and must be
// read the same way.
func FuzzFrontHead(f *testing.F) {
	f.Add(enqueueRequest, 7)
	f.Add([]byte("POST /services/v1/lease HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"), 30)
	f.Add([]byte("POST /services/v1/queue/q/jobs/j/ack HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX-Holdfast-Timeout: 5\r\n\r\n"), 1)
	f.Add([]byte("POST /services/v1/queue/q/jobs HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"), 50)
	f.Add([]byte("POST /services/v1/queue/q/jobs/j/retry HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"), 0)
	front := parser()
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		var whole Request
		got := front.parseWhole(in, &whole)
		if cut > 0 && cut < len(in) {
			var p headParser
			p.reset()
			var piecewise Request
			piecewise.c = whole.c
			v := front.parse(&p, in[:cut], &piecewise)
			if v == more {
				v = front.parse(&p, in, &piecewise)
			}
			if v != got || (v == served && (piecewise.head != whole.head || piecewise.bodyLen != whole.bodyLen || piecewise.rt != whole.rt)) {
				t.Fatalf("%q read whole: %v; in two pieces at %d: %v", in, got, cut, v)
			}
		}
		if got != served {
			return // incomplete, or handed to net/http
		}
		req, herr := http.ReadRequest(bufio.NewReader(bytes.NewReader(in)))
		if herr != nil {
			t.Fatalf("the front serves %q, which net/http refuses: %v", in, herr)
		}
		if req.Method != http.MethodPost || req.ContentLength != int64(whole.bodyLen) || req.URL.RawQuery != "" ||
			req.URL.Path != expand(whole.rt, whole.params) {
			t.Fatalf("%q: front POST %s %v (length %d), net/http %s %s (length %d)", in, whole.rt.path, whole.params, whole.bodyLen,
				req.Method, req.URL, req.ContentLength)
		}
		for _, name := range front.cfg.Headers {
			v, ok := whole.Header(name)
			if ok != (len(req.Header.Values(name)) > 0) || req.Header.Get(name) != v || len(req.Header.Values(name)) > 1 {
				t.Fatalf("%q: %s is %q to the front, %q to net/http", in, name, v, req.Header.Values(name))
			}
		}
		if req.Close != whole.Close || len(req.TransferEncoding) > 0 || req.Header.Get("Expect") != "" || req.Header.Get("Upgrade") != "" {
			t.Fatalf("%q: framing differs: net/http close=%v te=%v, front close=%v", in, req.Close, req.TransferEncoding, whole.Close)
		}
	})
}

// expand fills a route's template with its parameters.
func expand(rt *route, params [maxParams]string) string {
	p := 0
	segs := make([]string, len(rt.segs))
	for i, s := range rt.segs {
		segs[i] = s
		if s[0] == ':' {
			segs[i] = params[p]
			p++
		}
	}
	return "/" + strings.Join(segs, "/")
}
