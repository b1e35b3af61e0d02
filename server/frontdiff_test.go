package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast/holdfast/server"
)

// The differential tests send the same bytes over one connection to two
// single-node clusters that differ only in how their listener reads
// requests: through the front, or through net/http alone. The answers, their
// order, whether, when and how (FIN or reset) the connection closes, and the
// state each leaves behind must agree.

// diffTimeouts are the HTTP servers' timeouts in a differential test:
// shorter than a node's own so that a case ends in seconds, and far enough
// apart that which one closed a connection shows in when it closed.
type diffTimeouts struct {
	header, body, read, idle time.Duration
	// slack is how far apart the two closes of one case may be.
	slack time.Duration
	// watch is how long a connection is watched after the last step.
	watch time.Duration
}

// caseTimeouts are the seeded cases' timeouts.
func caseTimeouts() diffTimeouts {
	return diffTimeouts{header: time.Second, body: 2 * time.Second, read: 3 * time.Second, idle: 4 * time.Second,
		slack: 450 * time.Millisecond, watch: 5 * time.Second}
}

// diffPair is the two nodes of a differential test.
type diffPair struct {
	front, plain *testNode
	to           diffTimeouts
	holes        holes
	// sides counts the connections made for setup, side requests and
	// probes, each from an address of its own so that none counts against
	// a case's rate limit.
	sides atomic.Uint32
}

// sideDialer dials from a loopback address no case and no other side
// request uses.
func (p *diffPair) sideDialer() *net.Dialer {
	n := p.sides.Add(1)
	ip := net.IPv4(127, 1, byte(n/250), byte(n%250+1))
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
}

// startDiffPair starts the two nodes alike but for the front.
func startDiffPair(t testing.TB, to diffTimeouts, cfg server.Config) *diffPair {
	t.Helper()
	cfg.BodyTimeout = to.body
	tune := func(hs *http.Server) {
		hs.ReadHeaderTimeout, hs.ReadTimeout, hs.IdleTimeout = to.header, to.read, to.idle
	}
	p := &diffPair{to: to,
		front: startNodeServing(t, "front", "diff-cluster-key", true, io.Discard, cfg, serving{tune: tune}),
		plain: startNodeServing(t, "plain", "diff-cluster-key", true, io.Discard, cfg, serving{plain: true, tune: tune}),
	}
	for _, n := range []*testNode{p.front, p.plain} {
		waitFor(t, n.node.ID()+" to lead", 15*time.Second, func() bool { ok, _ := n.node.Ready(); return ok && n.node.IsLeader() })
	}
	p.holes = holesFor(p.secretsOf(t, p.front))
	return p
}

// secrets are the values a case's placeholders stand for on one node: a
// namespace and a queue with its three tokens, made for the case.
type secrets struct{ ns, q, w, k, r string }

func (p *diffPair) secretsOf(t testing.TB, n *testNode) secrets {
	addr := strings.TrimPrefix(n.url, "http://")
	ns := sideObject(t, p.sideDialer(), addr, rawPost("/lease/namespace", ""))
	q := sideObject(t, p.sideDialer(), addr, rawPost("/queue", ""))
	str := func(m map[string]any, k string) string {
		v, _ := m[k].(string)
		if v == "" {
			t.Fatalf("setup answer %v has no %s", m, k)
		}
		return v
	}
	return secrets{ns: str(ns, "namespace"), q: str(q, "queue_id"), w: str(q, "write_token"), k: str(q, "worker_token"), r: str(q, "read_token")}
}

// holes are placeholders for secrets, each as long as the value it stands
// for, so a request's Content-Length holds once the values are put in.
type holes secrets

func holesFor(s secrets) holes {
	hole := func(name, v string) string { return "{" + name + strings.Repeat("~", max(len(v)-len(name)-2, 0)) + "}" }
	return holes{ns: hole("NS", s.ns), q: hole("Q", s.q), w: hole("W", s.w), k: hole("K", s.k), r: hole("R", s.r)}
}

// fill puts a node's secrets where the holes are.
func (h holes) fill(s secrets, b []byte) []byte {
	for _, pair := range [][2]string{{h.ns, s.ns}, {h.q, s.q}, {h.w, s.w}, {h.k, s.k}, {h.r, s.r}} {
		if len(pair[0]) != len(pair[1]) {
			panic(fmt.Sprintf("hole %q and value of length %d differ in length", pair[0], len(pair[1])))
		}
		b = bytes.ReplaceAll(b, []byte(pair[0]), []byte(pair[1]))
	}
	return b
}

// Requests with holes for the secrets.

func (h holes) bearer(tok string) string { return "Authorization: Bearer " + tok + "\r\n" }

func (h holes) enqueue(key string) string {
	return rawPost("/queue/"+h.q+"/jobs", fmt.Sprintf(`{"job_key":%q,"payload":{"n":1}}`, key), h.bearer(h.w))
}

func (h holes) claim(body string) string {
	return rawPost("/queue/"+h.q+"/claim", body, h.bearer(h.k))
}

func (h holes) acquire(key string, more string) string {
	return rawPost("/lease", fmt.Sprintf(`{"namespace":%q,"key":%q,"ttl_seconds":30%s}`, h.ns, key, more))
}

func (h holes) readQueue() string {
	return fmt.Sprintf("GET %s/queue/%s HTTP/1.1\r\nHost: x\r\n%s\r\n", server.APIPrefix, h.q, h.bearer(h.r))
}

// diffStep is one thing a case does, at a time from its start.
type diffStep struct {
	at time.Duration
	// send is written on the case's connection.
	send string
	// side is a request sent alone on a connection of its own; its answer
	// joins the transcript.
	side string
	// close closes the case's connection.
	close bool
}

// diffCase is one differential case.
type diffCase struct {
	name  string
	steps func(h holes) []diffStep
	// noTail leaves out the normal request that follows the last send;
	// closingTail makes it ask for the connection to close.
	noTail, closingTail bool
	// probeAt is when the state is read, from the case's start (default:
	// once the connection is watched no more).
	probeAt time.Duration
	// from is the client's address (default 127.0.0.1): cases that count
	// the rate limit each come from their own.
	from string
	// racyEnd marks a case whose client may still be sending when the
	// server closes: whether the client then sees a FIN or a reset is a
	// race between them, so the two count as one.
	racyEnd bool
}

// transcript is what one node did with a case.
type transcript struct {
	answers []string
	end     string
	endAt   time.Duration
	side    []string
	state   []string
}

// run plays c against both nodes at once and returns their transcripts.
func (p *diffPair) run(t *testing.T, c diffCase) (front, plain transcript) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); front = p.play(t, p.front, c) }()
	go func() { defer wg.Done(); plain = p.play(t, p.plain, c) }()
	wg.Wait()
	return front, plain
}

// play runs c on one node.
func (p *diffPair) play(t *testing.T, n *testNode, c diffCase) transcript {
	addr := strings.TrimPrefix(n.url, "http://")
	s := p.secretsOf(t, n)
	steps := c.steps(p.holes)
	if !c.noTail {
		for i := len(steps) - 1; i >= 0; i-- {
			if steps[i].send != "" {
				tail := p.holes.enqueue("tail")
				if c.closingTail {
					tail = withHeader(tail, "Connection: close\r\n")
				}
				steps[i].send += tail
				break
			}
		}
	}
	from := c.from
	if from == "" {
		from = "127.0.0.1"
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Errorf("dial %s from %s: %v", addr, from, err)
		return transcript{}
	}
	defer conn.Close()
	start := time.Now()
	last := steps[len(steps)-1].at
	var tr transcript
	var sides sync.WaitGroup
	sides.Add(1)
	go func() {
		defer sides.Done()
		for _, st := range steps {
			time.Sleep(time.Until(start.Add(st.at)))
			switch {
			case st.send != "":
				_, _ = conn.Write(p.holes.fill(s, []byte(st.send)))
			case st.side != "":
				tr.side = append(tr.side, sideAnswer(p.sideDialer(), addr, p.holes.fill(s, []byte(st.side))))
			case st.close:
				_ = conn.Close()
			}
		}
	}()
	tr.answers, tr.end, tr.endAt = watchAnswers(conn, start, start.Add(last+p.to.watch))
	sides.Wait()
	probeAt := c.probeAt
	if probeAt == 0 {
		probeAt = time.Since(start)
	}
	time.Sleep(time.Until(start.Add(probeAt)))
	// The state the case left: who holds the keys it used, and its queue.
	for _, key := range []string{"k", "w"} {
		probe := strings.Replace(p.holes.acquire(key, ""), `"ttl_seconds":30`, `"ttl_seconds":60`, 1)
		tr.state = append(tr.state, key+": "+sideAnswer(p.sideDialer(), addr, p.holes.fill(s, []byte(probe))))
	}
	tr.state = append(tr.state, "queue: "+sideAnswer(p.sideDialer(), addr, p.holes.fill(s, []byte(p.holes.readQueue()))))
	return tr
}

// watchAnswers reads answers off conn until it closes or until.
func watchAnswers(conn net.Conn, start, until time.Time) (answers []string, end string, endAt time.Duration) {
	_ = conn.SetReadDeadline(until)
	br := bufio.NewReader(conn)
	for {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return answers, endOf(err), time.Since(start)
		}
		body, err := io.ReadAll(resp.Body)
		answers = append(answers, normalAnswer(resp, body))
		if err != nil {
			return answers, "mid-body: " + endOf(err), time.Since(start)
		}
	}
}

// endOf names how a connection's reading ended.
func endOf(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, net.ErrClosed):
		return "closed by the client"
	case errors.As(err, &ne) && ne.Timeout():
		return "open"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF): // ReadResponse's EOF
		return "closed (FIN)"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	}
	return "unreadable: " + err.Error()
}

// sideAnswer sends raw alone on a new connection and returns its answer.
func sideAnswer(d *net.Dialer, addr string, raw []byte) string {
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return "dial: " + err.Error()
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := conn.Write(raw); err != nil {
		return "write: " + err.Error()
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return "read: " + endOf(err)
	}
	body, _ := io.ReadAll(resp.Body)
	return normalAnswer(resp, body)
}

// sideObject sends a request alone and decodes its answer's JSON object.
func sideObject(t testing.TB, d *net.Dialer, addr, raw string) map[string]any {
	t.Helper()
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// normalAnswer is an answer with what differs between two nodes by nature
// taken out: the Date, the Content-Length (which follows the body), and the
// values of fresh secrets, ids, tokens and times.
func normalAnswer(resp *http.Response, body []byte) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", resp.Proto, resp.Status)
	keys := make([]string, 0, len(resp.Header))
	for k := range resp.Header {
		if k != "Date" && k != "Content-Length" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " | %s: %s", k, strings.Join(resp.Header[k], ", "))
	}
	var v any
	if json.Unmarshal(body, &v) == nil {
		if out, err := json.Marshal(scrub(v)); err == nil {
			body = out
		}
	}
	fmt.Fprintf(&b, " | %s", body)
	return b.String()
}

// scrub replaces the values that are fresh on every node by their kind.
func scrub(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if volatileField(k) {
				x[k] = fmt.Sprintf("<%T>", e)
			} else {
				x[k] = scrub(e)
			}
		}
	case []any:
		for i, e := range x {
			x[i] = scrub(e)
		}
	}
	return v
}

func volatileField(k string) bool {
	return strings.Contains(k, "token") || strings.Contains(k, "receipt") || strings.HasSuffix(k, "_id") ||
		k == "namespace" || strings.Contains(k, "timestamp") || strings.HasSuffix(k, "_at") || k == "retry_after_seconds"
}

// differences lists how two transcripts of a case differ.
func (p *diffPair) differences(c diffCase, a, b transcript) []string {
	if c.racyEnd {
		for _, tr := range []*transcript{&a, &b} {
			tr.end = strings.NewReplacer("mid-body: ", "", "reset", "closed (FIN)").Replace(tr.end)
		}
	}
	var out []string
	if len(a.answers) != len(b.answers) {
		out = append(out, fmt.Sprintf("%d answers through the front, %d through net/http", len(a.answers), len(b.answers)))
	}
	for i := range min(len(a.answers), len(b.answers)) {
		if a.answers[i] != b.answers[i] {
			out = append(out, fmt.Sprintf("answer %d:\n  front    %s\n  net/http %s", i+1, a.answers[i], b.answers[i]))
		}
	}
	for i := len(b.answers); i < len(a.answers); i++ {
		out = append(out, fmt.Sprintf("answer %d only through the front: %s", i+1, a.answers[i]))
	}
	for i := len(a.answers); i < len(b.answers); i++ {
		out = append(out, fmt.Sprintf("answer %d only through net/http: %s", i+1, b.answers[i]))
	}
	if a.end != b.end {
		out = append(out, fmt.Sprintf("the connection ended %q at %v through the front, %q at %v through net/http", a.end, a.endAt.Round(time.Millisecond), b.end, b.endAt.Round(time.Millisecond)))
	} else if strings.HasPrefix(a.end, "closed") || a.end == "reset" {
		if d := a.endAt - b.endAt; d > p.to.slack || d < -p.to.slack {
			out = append(out, fmt.Sprintf("the connection closed at %v through the front, at %v through net/http", a.endAt.Round(time.Millisecond), b.endAt.Round(time.Millisecond)))
		}
	}
	if !slices.Equal(a.side, b.side) {
		out = append(out, fmt.Sprintf("side answers:\n  front    %q\n  net/http %q", a.side, b.side))
	}
	if !slices.Equal(a.state, b.state) {
		out = append(out, fmt.Sprintf("state left:\n  front    %q\n  net/http %q", a.state, b.state))
	}
	return out
}

// trickle sends s in pieces of n bytes, one every gap, from start.
func trickle(s string, n int, start, gap time.Duration) []diffStep {
	var steps []diffStep
	for i := 0; i < len(s); i += n {
		steps = append(steps, diffStep{at: start + time.Duration(len(steps))*gap, send: s[i:min(i+n, len(s))]})
	}
	return steps
}

// withHeader inserts header lines after a request's Host line.
func withHeader(req, lines string) string {
	return strings.Replace(req, "Host: x\r\n", "Host: x\r\n"+lines, 1)
}

// diffCases are the seeded cases: the framing classes an attacker tries,
// the net/http server's timeouts, limits and tolerances, and waits.
func diffCases() []diffCase {
	big := func(n int) string { return strings.Repeat("a", n) }
	bodyOf := func(n int) string {
		return `{"job_key":"big","payload":"` + big(n-len(`{"job_key":"big","payload":""}`)) + `"}`
	}
	return []diffCase{
		{name: "enqueue", steps: func(h holes) []diffStep { return []diffStep{{send: h.enqueue("a")}} }},
		{name: "three pipelined", steps: func(h holes) []diffStep {
			return []diffStep{{send: h.enqueue("a") + h.enqueue("b") + h.enqueue("a")}}
		}},
		{name: "a hundred pipelined", steps: func(h holes) []diffStep {
			var b strings.Builder
			for i := range 100 {
				b.WriteString(h.enqueue(fmt.Sprint("p", i%7)))
			}
			return []diffStep{{send: b.String()}}
		}},
		{name: "head split in pieces", steps: func(h holes) []diffStep { return trickle(h.enqueue("a"), 40, 0, 30*time.Millisecond) }},
		{name: "CRLF between POSTs", steps: func(h holes) []diffStep { return []diffStep{{send: h.enqueue("a") + "\r\n" + h.enqueue("b")}} }},
		{name: "two CRLFs between POSTs", steps: func(h holes) []diffStep {
			return []diffStep{{send: h.enqueue("a") + "\r\n\r\n" + h.enqueue("b")}}
		}},
		{name: "three CRLFs between POSTs", steps: func(h holes) []diffStep {
			return []diffStep{{send: h.enqueue("a") + "\r\n\r\n\r\n" + h.enqueue("b")}}
		}},
		{name: "bare LF between POSTs", steps: func(h holes) []diffStep { return []diffStep{{send: h.enqueue("a") + "\n" + h.enqueue("b")}} }},
		{name: "CRLF sent late between POSTs", steps: func(h holes) []diffStep {
			return []diffStep{{send: h.enqueue("a") + "\r"}, {at: 200 * time.Millisecond, send: "\n" + h.enqueue("b")}}
		}},
		{name: "CRLF before the first request", steps: func(h holes) []diffStep { return []diffStep{{send: "\r\n" + h.enqueue("a")}} }},
		{name: "bare LF line ends", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.ReplaceAll(h.enqueue("a"), "\r\n", "\n")}}
		}},
		{name: "two equal Content-Lengths", steps: func(h holes) []diffStep {
			r := h.enqueue("a")
			return []diffStep{{send: withHeader(r, "Content-Length: "+contentLength(r)+"\r\n")}}
		}},
		{name: "two different Content-Lengths", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "Content-Length: 3\r\n")}}
		}},
		{name: "Content-Length with a plus", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "Content-Length: ", "Content-Length: +", 1)}}
		}},
		{name: "Content-Length with leading zeros", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "Content-Length: ", "Content-Length: 000", 1)}}
		}},
		{name: "Content-Length list", steps: func(h holes) []diffStep {
			r := h.enqueue("a")
			return []diffStep{{send: strings.Replace(r, "Content-Length: "+contentLength(r), "Content-Length: "+contentLength(r)+", "+contentLength(r), 1)}}
		}},
		{name: "Content-Length too short: the body carries a second request", steps: func(h holes) []diffStep {
			inner := h.enqueue("smuggled")
			outer := rawPost("/queue/"+h.q+"/jobs", `{"job_key":"outer","payload":1}`+inner, h.bearer(h.w))
			return []diffStep{{send: strings.Replace(outer, "Content-Length: "+contentLength(outer), "Content-Length: 31", 1)}}
		}},
		{name: "a second request inside a body", steps: func(h holes) []diffStep {
			return []diffStep{{send: rawPost("/queue/"+h.q+"/jobs", `{"job_key":"x","payload":"`+strings.ReplaceAll(h.enqueue("in"), `"`, `'`)+`"}`, h.bearer(h.w))}}
		}},
		{name: "chunked", steps: func(h holes) []diffStep {
			body := `{"job_key":"c","payload":1}`
			return []diffStep{{send: fmt.Sprintf("POST %s/queue/%s/jobs HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
				server.APIPrefix, h.q, h.bearer(h.w), len(body), body)}}
		}},
		{name: "chunked and Content-Length", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "Transfer-Encoding: chunked\r\n")}}
		}},
		{name: "Transfer-Encoding identity", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "Transfer-Encoding: identity\r\n")}}
		}},
		{name: "Transfer-Encoding gzip, chunked", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "Transfer-Encoding: gzip, chunked\r\n")}}
		}},
		{name: "obs-fold", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "X-Note: one\r\n two\r\n")}}
		}},
		{name: "obs-fold of Content-Type", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "Content-Type: application/json\r\n", "Content-Type:\r\n application/json\r\n", 1)}}
		}},
		{name: "NUL in a header value", steps: func(h holes) []diffStep { return []diffStep{{send: withHeader(h.enqueue("a"), "X-Note: a\x00b\r\n")}} }},
		{name: "NUL in the path", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "/jobs HTTP", "/jobs\x00 HTTP", 1)}}
		}},
		{name: "space before a colon", steps: func(h holes) []diffStep { return []diffStep{{send: withHeader(h.enqueue("a"), "X-Note : a\r\n")}} }},
		{name: "absolute-form target", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "POST /", "POST http://x/", 1)}}
		}},
		{name: "absolute-form target, other host", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "POST /", "POST http://elsewhere:9/", 1)}}
		}},
		{name: "lower-case method", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "POST", "post", 1)}}
		}},
		{name: "HTTP/1.0", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "HTTP/1.1", "HTTP/1.0", 1)}}
		}},
		{name: "HTTP/1.2", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "HTTP/1.1", "HTTP/1.2", 1)}}
		}},
		{name: "no Host", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "Host: x\r\n", "", 1)}}
		}},
		{name: "two Hosts", steps: func(h holes) []diffStep { return []diffStep{{send: withHeader(h.enqueue("a"), "Host: y\r\n")}} }},
		{name: "bad Host", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "Host: x", "Host: x y", 1)}}
		}},
		{name: "query", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "/jobs HTTP", "/jobs?x=1 HTTP", 1)}}
		}},
		{name: "escaped path", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "/jobs HTTP", "/job%73 HTTP", 1)}}
		}},
		{name: "dot segment", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "/jobs HTTP", "/../"+h.q+"/jobs HTTP", 1)}}
		}},
		{name: "trailing slash", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Replace(h.enqueue("a"), "/jobs HTTP", "/jobs/ HTTP", 1)}}
		}},
		{name: "Expect: 100-continue", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "Expect: 100-continue\r\n")}}
		}},
		{name: "Expect: other", steps: func(h holes) []diffStep { return []diffStep{{send: withHeader(h.enqueue("a"), "Expect: tea\r\n")}} }},
		{name: "Upgrade", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "Upgrade: websocket\r\nConnection: Upgrade\r\n")}}
		}},
		{name: "Connection: close", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "Connection: close\r\n")}}
		}},
		{name: "Connection: keep-alive, close", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "Connection: keep-alive, close\r\n")}}
		}},
		{name: "a read after a write", steps: func(h holes) []diffStep { return []diffStep{{send: h.enqueue("a") + h.readQueue()}} }},
		{name: "MCP after a write", steps: func(h holes) []diffStep {
			mcp := strings.Replace(rawPost("", `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`), server.APIPrefix+" ", server.MCPPath+" ", 1)
			return []diffStep{{send: h.enqueue("a") + withHeader(mcp, "Accept: application/json, text/event-stream\r\n")}}
		}},
		{name: "body of the front's limit", steps: func(h holes) []diffStep {
			return []diffStep{{send: rawPost("/queue/"+h.q+"/jobs", bodyOf(64<<10), h.bearer(h.w))}}
		}},
		{name: "body one over the front's limit", steps: func(h holes) []diffStep {
			return []diffStep{{send: rawPost("/queue/"+h.q+"/jobs", bodyOf(64<<10+1), h.bearer(h.w))}}
		}},
		{name: "body of the API's limit", steps: func(h holes) []diffStep {
			return []diffStep{{send: rawPost("/queue/"+h.q+"/jobs", bodyOf(256<<10), h.bearer(h.w))}}
		}},
		{name: "body one over the API's limit", steps: func(h holes) []diffStep {
			return []diffStep{{send: rawPost("/queue/"+h.q+"/jobs", bodyOf(256<<10+1), h.bearer(h.w))}}
		}},
		{name: "head of 16 KiB", steps: func(h holes) []diffStep {
			r := h.enqueue("a")
			return []diffStep{{send: withHeader(r, "X-Pad: "+big(16<<10-len(r)+len(`{"job_key":"a","payload":{"n":1}}`)-len("X-Pad: \r\n"))+"\r\n")}}
		}},
		{name: "head over net/http's limit", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "X-Pad: "+big(21<<10)+"\r\n")}}
		}},
		{name: "many headers", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), strings.Repeat("X-A: b\r\n", 3000))}}
		}},
		{name: "bad X-Holdfast-Timeout", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "X-Holdfast-Timeout: soon\r\n")}}
		}},
		{name: "bad X-Holdfast-Timeout, body late", steps: func(h holes) []diffStep {
			r := withHeader(h.enqueue("a"), "X-Holdfast-Timeout: soon\r\n")
			cut := strings.Index(r, "\r\n\r\n") + 4
			return []diffStep{{send: r[:cut]}, {at: 500 * time.Millisecond, send: r[cut:]}}
		}},
		{name: "bad X-Holdfast-Timeout, body never sent", noTail: true, steps: func(h holes) []diffStep {
			r := withHeader(h.enqueue("a"), "X-Holdfast-Timeout: 0\r\n")
			return []diffStep{{send: r[:strings.Index(r, "\r\n\r\n")+4]}}
		}},
		{name: "two X-Holdfast-Timeouts", steps: func(h holes) []diffStep {
			return []diffStep{{send: withHeader(h.enqueue("a"), "X-Holdfast-Timeout: 900\r\nX-Holdfast-Timeout: x\r\n")}}
		}},
		{name: "idle new connection", noTail: true, steps: func(holes) []diffStep { return []diffStep{{}} }},
		{name: "idle after an answer", steps: func(h holes) []diffStep { return []diffStep{{send: h.enqueue("a")}} }},
		{name: "three bytes after an answer", noTail: true, steps: func(h holes) []diffStep {
			return []diffStep{{send: h.enqueue("a") + "POS"}}
		}},
		{name: "slow head on a new connection", racyEnd: true, steps: func(h holes) []diffStep {
			return trickle(h.enqueue("a"), 8, 0, 100*time.Millisecond)
		}},
		{name: "slow head after an answer", racyEnd: true, steps: func(h holes) []diffStep {
			first := []diffStep{{send: h.enqueue("a")}}
			return append(first, trickle(h.enqueue("b"), 8, 300*time.Millisecond, 100*time.Millisecond)...)
		}},
		{name: "new connection quiet, then a head", steps: func(h holes) []diffStep {
			return []diffStep{{at: 700 * time.Millisecond, send: h.enqueue("a")}}
		}},
		{name: "new connection quiet, then a slow read", racyEnd: true, steps: func(h holes) []diffStep {
			return append([]diffStep{{at: 600 * time.Millisecond, send: "G"}}, trickle(h.readQueue()[1:], 20, 700*time.Millisecond, 150*time.Millisecond)...)
		}},
		{name: "slow body", racyEnd: true, steps: func(h holes) []diffStep {
			r := h.enqueue("a")
			cut := strings.Index(r, "\r\n\r\n") + 4
			return append([]diffStep{{send: r[:cut]}}, trickle(r[cut:], 2, 100*time.Millisecond, 150*time.Millisecond)...)
		}},
		{name: "short body", noTail: true, steps: func(h holes) []diffStep {
			r := h.enqueue("a")
			return []diffStep{{send: r[:len(r)-3]}}
		}},
		{name: "wait_seconds 0 stays", steps: func(h holes) []diffStep {
			return []diffStep{{send: h.claim(`{"visibility_timeout":30,"wait_seconds":0}`)}}
		}},
		{name: "abandoned waiting acquire, escaped name", noTail: true, probeAt: 3 * time.Second, steps: func(h holes) []diffStep {
			holder := strings.Replace(h.acquire("w", ""), `"ttl_seconds":30`, `"ttl_seconds":1`, 1)
			return []diffStep{{side: holder}, {at: 100 * time.Millisecond, send: h.acquire("w", `,"wait\u005fseconds":5`)}, {at: 400 * time.Millisecond, close: true}}
		}},
		{name: "abandoned long-poll claim, escaped name", noTail: true, probeAt: 1500 * time.Millisecond, steps: func(h holes) []diffStep {
			return []diffStep{{send: h.claim(`{"visibility_timeout":30,"wait\u005fseconds":5}`)}, {at: 300 * time.Millisecond, close: true},
				{at: 600 * time.Millisecond, side: h.enqueue("late")}}
		}},
		{name: "abandoned long-poll claim", noTail: true, probeAt: 1500 * time.Millisecond, steps: func(h holes) []diffStep {
			return []diffStep{{send: h.claim(`{"visibility_timeout":30,"wait_seconds":5}`)}, {at: 300 * time.Millisecond, close: true},
				{at: 600 * time.Millisecond, side: h.enqueue("late")}}
		}},
		{name: "waiting claim answered", steps: func(h holes) []diffStep {
			return []diffStep{{send: h.claim(`{"visibility_timeout":30,"wait\u005fseconds":3}`)}, {at: 300 * time.Millisecond, side: h.enqueue("late")}}
		}},
	}
}

// contentLength is the Content-Length value of a raw request.
func contentLength(req string) string {
	_, after, _ := strings.Cut(req, "Content-Length: ")
	v, _, _ := strings.Cut(after, "\r\n")
	return v
}

// playAll plays every case at once (they use their own keys, queues and
// addresses; go test's -parallel, the number of CPUs, would run them a
// few at a time) and reports each case's differences as a subtest.
func (p *diffPair) playAll(t *testing.T, cases []diffCase) {
	type result struct{ front, plain transcript }
	results := make([]result, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].front, results[i].plain = p.run(t, c)
		}()
	}
	wg.Wait()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, d := range p.differences(c, results[i].front, results[i].plain) {
				t.Error(d)
			}
		})
	}
}

// TestFrontReadsAsNetHTTP plays every seeded case against a node with the
// front and one without.
func TestFrontReadsAsNetHTTP(t *testing.T) {
	p := startDiffPair(t, caseTimeouts(), server.Config{})
	p.playAll(t, diffCases())
	if served, handed := p.front.front.Counts(); served == 0 || handed == 0 {
		t.Errorf("the front served %d requests and handed %d connections over: both should happen", served, handed)
	}
}

// TestFrontCountsTheRateLimitAsNetHTTP plays cases against a rate limit of
// a burst of 8 that does not refill within a case, each from its own
// address: a request handed to net/http is counted once.
func TestFrontCountsTheRateLimitAsNetHTTP(t *testing.T) {
	p := startDiffPair(t, caseTimeouts(), server.Config{RateLimit: 0.001, RateBurst: 8})
	p.playAll(t, []diffCase{
		{name: "twelve pipelined", from: "127.0.0.2", steps: func(h holes) []diffStep {
			return []diffStep{{send: strings.Repeat(h.enqueue("a"), 12)}}
		}},
		{name: "a wait handed over, then six", from: "127.0.0.3", steps: func(h holes) []diffStep {
			return []diffStep{{send: h.acquire("k", `,"wait_seconds":1`) + strings.Repeat(h.enqueue("a"), 6)}}
		}},
		{name: "a wait handed over, then seven", from: "127.0.0.4", steps: func(h holes) []diffStep {
			return []diffStep{{send: h.acquire("k", `,"wait_seconds":1`) + strings.Repeat(h.enqueue("a"), 7)}}
		}},
	})
}

// fuzzTimeouts are shorter still: a fuzzed request that never ends costs
// the fuzzer a second at most.
func fuzzTimeouts() diffTimeouts {
	return diffTimeouts{header: 300 * time.Millisecond, body: 600 * time.Millisecond, read: 900 * time.Millisecond,
		idle: 1200 * time.Millisecond, slack: 250 * time.Millisecond, watch: 1500 * time.Millisecond}
}

// FuzzFrontAgainstNetHTTP sends fuzzed bytes, with holes for the secrets
// of a namespace and a queue made for each input, followed by a normal
// request that asks to close the connection, to a node with the front and
// one without, and compares what they do as the seeded cases do.
func FuzzFrontAgainstNetHTTP(f *testing.F) {
	p := startDiffPair(f, fuzzTimeouts(), server.Config{})
	h := p.holes
	for _, seed := range []string{
		h.enqueue("a") + "\r\n" + h.enqueue("b"),
		h.acquire("k", `,"wait\u005fseconds":1`),
		h.claim(`{"visibility_timeout":30}`) + withHeader(h.enqueue("b"), "Content-Length: 3\r\n"),
		strings.Replace(h.enqueue("a"), "Content-Length: ", "Content-Length: 00", 1) + h.readQueue(),
		withHeader(h.acquire("w", ""), "X-Holdfast-Timeout: 0\r\n") + h.enqueue("c"),
		strings.Replace(h.enqueue("a"), "/jobs", "/jobs/x/ack", 1),
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c := diffCase{name: "fuzzed", closingTail: true, racyEnd: true, steps: func(holes) []diffStep { return []diffStep{{send: string(in)}} }}
		a, b := p.run(t, c)
		for _, d := range p.differences(c, a, b) {
			t.Error(d)
		}
	})
}
