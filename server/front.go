package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/internal/jsonenc"
)

// The front serves the API's common writes on plain HTTP itself and hands
// every other request to net/http, connection and all.
//
// It reads each request of a connection into one buffer. A request it
// serves is an HTTP/1.1 POST to one of the API's leader routes (apiRoutes)
// whose path has no query, escape or empty segment, framed by exactly one
// Content-Length of at most frontBodyLimit, with one Host and none of the
// headers that change framing or meaning (Transfer-Encoding, Expect,
// Upgrade, the peers' forwarding headers), every line ending in CRLF, and no
// wait_seconds in its body. It runs the same handler, through the same
// checks, as gin's router would, and writes the same status, headers and
// body. The first request that is anything else, or that the service would
// forward as a REST request, is handed over unanswered: net/http reads the
// connection from that request's first byte, as if it had accepted it, and
// keeps it. So whatever the front does not serve behaves exactly as before,
// and a request is answered by one server only.
//
// What the front saves per request is net/http's: the header map, the
// goroutine that reads ahead to notice a client leaving (a waiting request
// is handed over, so it keeps that), the deadlines set and cleared around
// every request, and the copies between buffered readers and writers.

// frontBodyLimit is the largest body the front reads; larger ones go to
// net/http, which applies apiBodyLimit.
const frontBodyLimit = 64 << 10

// frontHeaderLimit is the largest request head (request line and headers)
// the front reads; a longer one goes to net/http, which applies
// MaxHeaderBytes.
const frontHeaderLimit = 16 << 10

// frontBufSize is a connection's buffer between requests.
const frontBufSize = 4 << 10

// Front is a net.Listener for net/http that takes the connections of an
// underlying listener, serves the API's common requests on them itself and
// yields a connection to net/http once it holds a request the front does
// not serve.
type Front struct {
	s      *Server
	hs     *http.Server
	ln     net.Listener
	routes []apiRouteSpec

	handoff chan net.Conn
	done    chan struct{}
	doneErr error

	mu      sync.Mutex
	conns   map[*frontConn]struct{}
	closing atomic.Bool

	date atomic.Pointer[frontDate]

	served, handedOff atomic.Uint64
}

// Counts returns how many requests the front has answered and how many
// connections it has handed to net/http.
func (f *Front) Counts() (served, handedOff uint64) {
	return f.served.Load(), f.handedOff.Load()
}

// frontDate is the Date header of the current second.
type frontDate struct {
	unix int64
	line []byte
}

// NewFront returns the front of hs on ln: serve it with hs.Serve(front).
func (s *Server) NewFront(ln net.Listener, hs *http.Server) *Front {
	f := &Front{s: s, hs: hs, ln: ln, routes: s.apiRoutes(), handoff: make(chan net.Conn), done: make(chan struct{}),
		conns: make(map[*frontConn]struct{})}
	go f.acceptLoop()
	return f
}

// acceptLoop takes every connection of the underlying listener.
func (f *Front) acceptLoop() {
	var delay time.Duration
	for {
		conn, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || f.closing.Load() {
				f.doneErr = err
				close(f.done)
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			f.s.log.Warn("accept failed; retrying", "error", err, "delay", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		fc := &frontConn{f: f, conn: conn, buf: make([]byte, 0, frontBufSize)}
		if !f.track(fc) {
			_ = conn.Close()
			continue
		}
		go fc.serve()
	}
}

// track records a connection; it refuses one once the front is closing.
func (f *Front) track(fc *frontConn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing.Load() {
		return false
	}
	f.conns[fc] = struct{}{}
	return true
}

func (f *Front) untrack(fc *frontConn) {
	f.mu.Lock()
	delete(f.conns, fc)
	f.mu.Unlock()
}

// Accept returns the next connection handed to net/http.
func (f *Front) Accept() (net.Conn, error) {
	select {
	case c := <-f.handoff:
		return c, nil
	case <-f.done:
		return nil, f.doneErr
	}
}

// Close closes the underlying listener: no connection is accepted after it.
func (f *Front) Close() error { return f.ln.Close() }

// Addr is the underlying listener's address.
func (f *Front) Addr() net.Addr { return f.ln.Addr() }

// Shutdown closes the front's idle connections, lets each request it is
// serving finish and closes that connection after its answer, and waits
// for them until ctx ends; then it closes what is left. Call it with
// http.Server.Shutdown, which does the same for the connections net/http
// holds.
func (f *Front) Shutdown(ctx context.Context) error {
	f.closing.Store(true)
	_ = f.ln.Close()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		f.mu.Lock()
		for fc := range f.conns {
			if fc.state.CompareAndSwap(connIdle, connClosed) {
				_ = fc.conn.Close()
			}
		}
		n := len(f.conns)
		f.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			f.closeAll()
			return fmt.Errorf("front: %d connections still serving a request: %w", n, ctx.Err())
		case <-tick.C:
		}
	}
}

// CloseNow closes the listener and every connection the front holds, as
// http.Server.Close does for net/http's.
func (f *Front) CloseNow() {
	f.closing.Store(true)
	_ = f.ln.Close()
	f.closeAll()
}

func (f *Front) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for fc := range f.conns {
		fc.state.Store(connClosed)
		_ = fc.conn.Close()
	}
}

// dateLine is "Date: <now in HTTP format>\r\n", formatted once a second.
func (f *Front) dateLine(now time.Time) []byte {
	sec := now.Unix()
	if d := f.date.Load(); d != nil && d.unix == sec {
		return d.line
	}
	line := []byte("Date: " + now.UTC().Format(http.TimeFormat) + "\r\n")
	f.date.Store(&frontDate{unix: sec, line: line})
	return line
}

// Connection states, for Shutdown: only an idle connection (waiting for a
// request) is closed under a client's feet.
const (
	connIdle int32 = iota
	connBusy
	connClosed
)

// frontConn is one connection the front serves.
type frontConn struct {
	f     *Front
	conn  net.Conn
	state atomic.Int32
	buf   []byte // the bytes read and not yet served
	out   []byte // the answer being written
	body  []byte // a job answer's body, before out
	// readBy and writeBy are the deadlines last set on the connection.
	readBy, writeBy time.Time
	// req and call are the request being served, kept between requests.
	req  frontRequest
	call frontCall
	// bound is the context of the calls bounded by the request timeout
	// alone, reused from call to call.
	bound callDeadline
}

// errHandOff ends the front's reading of a connection: net/http takes it.
var errHandOff = errors.New("handed to net/http")

// serve answers the connection's requests until it closes or is handed
// over.
func (fc *frontConn) serve() {
	defer fc.f.untrack(fc)
	defer fc.bound.stop()
	defer func() {
		if rec := recover(); rec != nil {
			fc.f.s.log.Error("front panic", "panic", rec)
			_ = fc.conn.Close()
		}
	}()
	for {
		req, err := fc.readRequest()
		var short *shortBody
		switch {
		case errors.Is(err, errHandOff):
			fc.handOff()
			return
		case errors.As(err, &short):
			// Answered as bufferBody answers it; what is left of the body
			// is never read.
			req.close = true
			refusal := fc.f.s.bodyReadFailure(short.err, apiBodyLimit)
			fc.answer(req, &refusal)
			_ = fc.conn.Close()
			return
		case err != nil:
			_ = fc.conn.Close()
			return
		}
		keep := fc.answer(req, nil)
		if fc.call.handedOff {
			// Unanswered, and still whole at the start of the buffer.
			fc.handOff()
			return
		}
		if !keep || fc.f.closing.Load() || !fc.state.CompareAndSwap(connBusy, connIdle) {
			_ = fc.conn.Close()
			return
		}
	}
}

// handOff gives the connection, with every byte read so far, to net/http.
func (fc *frontConn) handOff() {
	if !fc.state.CompareAndSwap(connBusy, connClosed) { // Shutdown closed it first
		_ = fc.conn.Close()
		return
	}
	// net/http sets its own deadlines; the front's must not linger.
	_ = fc.conn.SetDeadline(time.Time{})
	c := &replayConn{Conn: fc.conn, pending: fc.buf}
	fc.buf = nil
	fc.f.handedOff.Add(1)
	select {
	case fc.f.handoff <- c:
	case <-fc.f.done:
		_ = fc.conn.Close()
	}
}

// replayConn is a connection whose first reads return bytes already read.
type replayConn struct {
	net.Conn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// frontRequest is a request the front serves.
type frontRequest struct {
	route   apiRouteSpec
	params  [3]string // queue_id, job_id, action
	head    int       // length of the request head in the buffer
	bodyLen int
	body    []byte
	ctype   string
	auth    string
	timeout string
	hasTO   bool
	close   bool
}

// deadline is now plus the first of the timeouts that is set, as net/http
// falls back from one timeout to another; none set is no deadline.
func deadline(now time.Time, timeouts ...time.Duration) time.Time {
	for _, d := range timeouts {
		if d > 0 {
			return now.Add(d)
		}
	}
	return time.Time{}
}

// setReadBy sets the read deadline when it moves by more than a second, so
// a busy connection does not reset a timer on every request.
func (fc *frontConn) setReadBy(t time.Time) {
	if d := t.Sub(fc.readBy); d > time.Second || d < -time.Second {
		_ = fc.conn.SetReadDeadline(t)
		fc.readBy = t
	}
}

// yieldBeforeRead lets the goroutines that are ready to run go first before
// a connection that has answered reads its next request. A client sends its
// next request only once it has read the answer, so a read made at once
// finds nothing: it costs a system call that fails, and parks the goroutine
// until the poller wakes it. The answers of one committed entry are written
// by many goroutines made ready together; once they have run, most clients
// have sent again and the read finds the request.
func yieldBeforeRead() { runtime.Gosched() }

// fill reads more bytes into the buffer.
func (fc *frontConn) fill() error {
	if len(fc.buf) == cap(fc.buf) {
		fc.buf = append(fc.buf, 0)[:len(fc.buf)]
	}
	n, err := fc.conn.Read(fc.buf[len(fc.buf):cap(fc.buf)])
	fc.buf = fc.buf[:len(fc.buf)+n]
	if n > 0 {
		return nil
	}
	if err == nil {
		err = errors.New("empty read")
	}
	return err
}

// readRequest reads the next request the front serves, or returns
// errHandOff for one it does not (or another error: the connection is
// closed without an answer, as net/http closes a connection that ends or
// times out before a request is whole).
func (fc *frontConn) readRequest() (*frontRequest, error) {
	srv := fc.f.hs
	fc.setReadBy(deadline(time.Now(), srv.IdleTimeout, srv.ReadTimeout))
	if len(fc.buf) == 0 {
		yieldBeforeRead()
	}
	for len(fc.buf) == 0 {
		if err := fc.fill(); err != nil {
			return nil, err
		}
	}
	if !fc.state.CompareAndSwap(connIdle, connBusy) {
		return nil, net.ErrClosed
	}
	var req *frontRequest
	for {
		var err error
		req, err = fc.f.parseHead(fc.buf, &fc.req)
		if err != nil {
			return nil, err
		}
		if req != nil {
			break
		}
		if len(fc.buf) >= frontHeaderLimit {
			return nil, errHandOff
		}
		fc.setReadBy(deadline(time.Now(), srv.ReadHeaderTimeout, srv.ReadTimeout))
		if err := fc.fill(); err != nil {
			return nil, err
		}
	}
	need := req.head + req.bodyLen
	if need > cap(fc.buf) {
		grown := make([]byte, len(fc.buf), need)
		copy(grown, fc.buf)
		fc.buf = grown
	}
	if len(fc.buf) < need {
		fc.setReadBy(time.Now().Add(fc.f.s.cfg.BodyTimeout))
		for len(fc.buf) < need {
			if err := fc.fill(); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return req, &shortBody{err}
			}
		}
	}
	req.body = fc.buf[req.head:need:need]
	// A body that may name wait_seconds goes to net/http, which notices a
	// client that leaves while it waits.
	if req.route.waits && bytes.Contains(req.body, []byte("wait_seconds")) {
		return nil, errHandOff
	}
	return req, nil
}

// shortBody is a body that ended or stalled before its Content-Length.
type shortBody struct{ err error }

func (e *shortBody) Error() string { return "request body: " + e.err.Error() }

// answer runs the request's handler and writes its answer. It reports
// whether the connection may serve another request.
func (fc *frontConn) answer(req *frontRequest, refusal *reply) bool {
	s := fc.f.s
	start := time.Now()
	c := &fc.call
	*c = frontCall{fc: fc, req: req}
	if refusal != nil {
		c.Reply(*refusal)
	} else {
		c.serve(start)
	}
	if c.handedOff {
		return false
	}
	fc.f.served.Add(1)
	route := APIPrefix + req.route.path
	m := s.metrics.series(http.MethodPost, route, c.status)
	m.count.Inc()
	m.latency.Observe(time.Since(start).Seconds())
	if s.log.IsDebug() {
		s.log.Debug("request", "method", http.MethodPost, "route", route, "status", c.status,
			"duration_ms", time.Since(start).Milliseconds(), "forwarded", false)
	}
	if refusal != nil {
		return false
	}
	// The request's bytes are served: keep what follows it.
	rest := copy(fc.buf, fc.buf[req.head+len(req.body):])
	fc.buf = fc.buf[:rest]
	if cap(fc.buf) > frontBufSize && rest <= frontBufSize {
		small := make([]byte, rest, frontBufSize)
		copy(small, fc.buf)
		fc.buf = small
	}
	return c.wrote && !req.close
}

// frontCall is a call the front serves.
type frontCall struct {
	fc        *frontConn
	req       *frontRequest
	ctx       context.Context
	status    int
	wrote     bool
	handedOff bool
}

// serve runs what gin's router would for the request: the caller's
// timeout, the rate limit, the choice between serving here and forwarding
// as a REST request (handed over), then the handler.
func (c *frontCall) serve(start time.Time) {
	s := c.fc.f.s
	defer func() {
		if rec := recover(); rec != nil {
			s.log.Error("handler panic", "route", APIPrefix+c.req.route.path, "panic", rec)
			if !c.wrote {
				c.Reply(errReply(http.StatusInternalServerError, "internal error", nil))
			}
			c.req.close = true
		}
	}()
	ctx := context.Background()
	if c.req.hasTO {
		ms, err := strconv.ParseInt(c.req.timeout, 10, 64)
		if err != nil || ms < 1 || ms > client.MaxTimeoutMillis {
			c.Reply(errReply(http.StatusBadRequest, client.TimeoutHeader+": must be a whole number of milliseconds from 1 to "+strconv.Itoa(client.MaxTimeoutMillis),
				jsonenc.H{"field": client.TimeoutHeader}))
			return
		}
		ctx = s.callerDeadline(ctx, ms, start)
	}
	c.ctx = ctx
	if s.limiter.rate > 0 {
		if ok, wait := s.limiter.allow(c.ClientIP(), start); !ok {
			c.Reply(rateLimited(wait))
			return
		}
	}
	switch addr, bad := s.svc.RESTForwardTarget(ctx, false); {
	case bad != nil:
		c.Reply(errorReply(bad))
		return
	case addr != "":
		c.handedOff = true
		return
	}
	c.req.route.h(c)
}

func (c *frontCall) Header(name string) string {
	switch name {
	case "Content-Type":
		return c.req.ctype
	case "Authorization":
		return c.req.auth
	case client.TimeoutHeader:
		return c.req.timeout
	}
	return ""
}

func (c *frontCall) Param(name string) string {
	switch name {
	case "queue_id":
		return c.req.params[0]
	case "job_id":
		return c.req.params[1]
	case "action":
		return c.req.params[2]
	}
	return ""
}

// Query is never present: a request with a query goes to net/http.
func (c *frontCall) Query(string) (string, bool) { return "", false }

func (c *frontCall) Body(int64) ([]byte, error) { return c.req.body, nil }

func (c *frontCall) ContentLength() int64 { return int64(len(c.req.body)) }

func (c *frontCall) Context() context.Context { return c.ctx }

// Bounded is the call's context bounded by timeout; a call without a
// caller's deadline uses the connection's reused one.
func (c *frontCall) Bounded(timeout time.Duration) (context.Context, context.CancelFunc) {
	if !c.req.hasTO {
		return c.fc.bound.begin(timeout)
	}
	return context.WithTimeout(c.ctx, timeout)
}

func (c *frontCall) ClientIP() string { return remoteIP(c.fc.conn.RemoteAddr().String()) }

func (c *frontCall) ExtendWrite(t time.Time) {
	_ = c.fc.conn.SetWriteDeadline(t)
	c.fc.writeBy = t
}

// Reply writes the answer as net/http writes gin's c.Data: status line,
// Content-Type, Retry-After and WWW-Authenticate when set, Date and
// Content-Length.
func (c *frontCall) Reply(r reply) {
	if c.wrote {
		return
	}
	c.wrote = true
	fc := c.fc
	b, err := r.body(fc.body[:0])
	if err != nil {
		b = []byte(`{"ok":false,"error":"internal error: the answer could not be encoded"}`)
		r.Status = http.StatusInternalServerError
	}
	c.status = r.Status
	now := time.Now()
	out := append(fc.out[:0], "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(r.Status), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(r.Status)...)
	out = append(out, "\r\nContent-Type: application/json; charset=utf-8\r\n"...)
	if r.RetryAfter > 0 {
		out = append(out, "Retry-After: "...)
		out = strconv.AppendInt(out, int64(r.RetryAfter), 10)
		out = append(out, "\r\n"...)
	}
	if r.Bearer {
		out = append(out, "Www-Authenticate: Bearer realm=\"holdfast\"\r\n"...)
	}
	if c.req.close {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, fc.f.dateLine(now)...)
	out = append(out, "Content-Length: "...)
	out = strconv.AppendInt(out, int64(len(b)), 10)
	out = append(out, "\r\n\r\n"...)
	out = append(out, b...)
	if by := deadline(now, fc.f.hs.WriteTimeout); !by.IsZero() && by.Sub(fc.writeBy) > time.Second {
		_ = fc.conn.SetWriteDeadline(by)
		fc.writeBy = by
	}
	if _, err := fc.conn.Write(out); err != nil {
		c.req.close = true
	}
	if cap(out) <= frontBufSize {
		fc.out = out[:0]
	}
	if r.job.j != nil && cap(b) <= frontBufSize {
		fc.body = b[:0]
	}
}
