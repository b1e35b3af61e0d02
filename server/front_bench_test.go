package server

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

// BenchmarkRequestHead reads the head of an enqueue: as the front does, and
// as net/http's server does (http.ReadRequest is the part of it that can be
// run alone; the server adds its connection bookkeeping).
func BenchmarkRequestHead(b *testing.B) {
	b.Run("front", func(b *testing.B) {
		f := &Front{routes: []apiRouteSpec{{path: "/queue/:queue_id/jobs"}}}
		var req frontRequest
		b.ReportAllocs()
		for b.Loop() {
			if r, err := f.parseHead(enqueueRequest, &req); r == nil || err != nil {
				b.Fatal(r, err)
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
// so no request means one thing to the front and another to net/http.
func FuzzFrontHead(f *testing.F) {
	f.Add(enqueueRequest)
	f.Add([]byte("POST /services/v1/lease HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"))
	f.Add([]byte("POST /services/v1/queue/q/jobs/j/ack HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX-Holdfast-Timeout: 5\r\n\r\n"))
	f.Add([]byte("POST /services/v1/queue/q/jobs HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"))
	front := &Front{}
	for _, r := range (&Server{}).apiRoutes() {
		front.routes = append(front.routes, apiRouteSpec{path: r.path, waits: r.waits})
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var fr frontRequest
		got, err := front.parseHead(in, &fr)
		if got == nil || err != nil {
			return // incomplete, or handed to net/http
		}
		req, herr := http.ReadRequest(bufio.NewReader(bytes.NewReader(in)))
		if herr != nil {
			t.Fatalf("the front serves %q, which net/http refuses: %v", in, herr)
		}
		if req.Method != http.MethodPost || req.ContentLength != int64(got.bodyLen) || req.URL.RawQuery != "" ||
			req.URL.Path != APIPrefix+expand(got.route.path, got.params) {
			t.Fatalf("%q: front POST %s %v (length %d), net/http %s %s (length %d)", in, got.route.path, got.params, got.bodyLen,
				req.Method, req.URL, req.ContentLength)
		}
		for name, v := range map[string]string{"Content-Type": got.ctype, "Authorization": got.auth, "X-Holdfast-Timeout": got.timeout} {
			if name == "Content-Type" && len(req.Header.Values(name)) == 0 {
				continue // the front's default for an absent header is never read: ContentLength decides
			}
			if req.Header.Get(name) != v || len(req.Header.Values(name)) > 1 {
				t.Fatalf("%q: %s is %q to the front, %q to net/http", in, name, v, req.Header.Values(name))
			}
		}
		if req.Close != got.close || len(req.TransferEncoding) > 0 || req.Header.Get("Expect") != "" || req.Header.Get("Upgrade") != "" {
			t.Fatalf("%q: framing differs: net/http close=%v te=%v, front close=%v", in, req.Close, req.TransferEncoding, got.close)
		}
	})
}

// expand fills a route template with its parameters.
func expand(tmpl string, p [3]string) string {
	r := strings.NewReplacer(":queue_id", p[0], ":job_id", p[1], ":action", p[2])
	return r.Replace(tmpl)
}
