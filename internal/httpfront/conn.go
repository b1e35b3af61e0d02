package httpfront

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"
)

// bufSize is a connection's buffer between requests.
const bufSize = 4 << 10

// Connection states, for Shutdown: only an idle connection (waiting for a
// request) is closed under a client's feet.
const (
	connIdle int32 = iota
	connBusy
	connClosed
)

// Request is a request the front serves, valid until its handler returns.
type Request struct {
	c       *conn
	rt      *route
	params  [maxParams]string
	values  [maxHeaders]string
	present uint16
	head    int
	bodyLen int
	// Body is the request's body, whole once Serve is called.
	Body []byte
	// Close says the client asked to close the connection after the answer.
	Close bool
	// Start is when the request's head was whole.
	Start time.Time

	answered, handedOver bool
}

// Route is the index in Config.Routes of the request's route.
func (r *Request) Route() int { return r.rt.position }

// Param returns a path parameter of the route ("" if it has none of name).
func (r *Request) Param(name string) string {
	for i, p := range r.rt.params {
		if p == name {
			return r.params[i]
		}
	}
	return ""
}

// Header returns the value of a header named in Config.Headers and
// whether the request has it.
func (r *Request) Header(name string) (string, bool) {
	for i, h := range r.c.f.cfg.Headers {
		if h == name {
			if r.present&(1<<i) == 0 {
				return "", false
			}
			return r.values[i], true
		}
	}
	return "", false
}

// RemoteAddr is the client's address.
func (r *Request) RemoteAddr() net.Addr { return r.c.nc.RemoteAddr() }

// Field is a header field of an answer.
type Field struct{ Name, Value string }

// Reply writes the answer as net/http writes a handler's answer with
// these header fields (given in net/http's order: sorted by name): the
// status line, the fields, Connection: close when the connection closes
// after it, Date and Content-Length. It reports whether the write failed.
func (r *Request) Reply(status int, fields []Field, body []byte) error {
	if r.answered || r.handedOver {
		return errors.New("httpfront: the request was answered or handed over already")
	}
	r.answered = true
	c := r.c
	now := time.Now()
	out := append(c.out[:0], "HTTP/1.1 "...)
	out = strconv.AppendInt(out, int64(status), 10)
	out = append(out, ' ')
	out = append(out, http.StatusText(status)...)
	out = append(out, "\r\n"...)
	for _, fl := range fields {
		out = append(out, fl.Name...)
		out = append(out, ": "...)
		out = append(out, fl.Value...)
		out = append(out, "\r\n"...)
	}
	if r.Close {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, c.f.dateOf(now)...)
	out = append(out, "Content-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, "\r\n\r\n"...)
	out = append(out, body...)
	err := c.write(out, after(r.Start, c.f.cfg.Server.WriteTimeout), now)
	if err != nil {
		r.Close = true
	}
	if cap(out) <= bufSize {
		c.out = out[:0]
	}
	return err
}

// HandOver gives the request, unanswered, and its connection to net/http
// once the handler returns.
func (r *Request) HandOver() {
	if !r.answered {
		r.handedOver = true
	}
}

// conn is one connection the front serves.
type conn struct {
	f        *Front
	nc       net.Conn
	h        ConnHandler
	accepted time.Time
	state    atomic.Int32
	// buf holds the bytes read and not yet served: the current request
	// starts at buf[0].
	buf []byte
	out []byte
	// rd and wd are the deadlines set on nc, never later than the ones
	// in force (see fill and write).
	rd, wd time.Time
	req    Request
	head   headParser
	// bound is the context Request.Bounded gives.
	bound callDeadline
}

// serve answers the connection's requests until it closes or is handed
// over.
func (c *conn) serve() {
	defer c.f.untrack(c)
	defer func() {
		if rec := recover(); rec != nil {
			c.f.cfg.Logger.Error("front panic", "panic", rec)
			_ = c.nc.Close()
		}
	}()
	// The first request's clock starts at accept; a later one's once its
	// first four bytes are there.
	t0 := c.accepted
	for first := true; ; first = false {
		if first {
			// A connection that sends nothing is idle, for Shutdown, and
			// is closed without an answer when its header timeout passes
			// or it ends, as net/http closes it.
			if err := c.await(1, after(t0, c.f.headerTimeout())); err != nil {
				_ = c.nc.Close()
				return
			}
		} else {
			answered := time.Now()
			if err := c.await(4, after(answered, c.f.idleTimeout())); err != nil {
				_ = c.nc.Close() // net/http closes it without an answer too
				return
			}
			t0 = time.Now()
			// After a POST, net/http skips the CR and LF bytes among the
			// next four.
			skip := 0
			for skip < 4 && (c.buf[skip] == '\r' || c.buf[skip] == '\n') {
				skip++
			}
			c.consume(skip)
		}
		if !c.state.CompareAndSwap(connIdle, connBusy) {
			_ = c.nc.Close() // Shutdown closed it
			return
		}
		if !c.serveOne(t0) {
			return
		}
		if c.f.closing.Load() || !c.state.CompareAndSwap(connBusy, connIdle) {
			_ = c.nc.Close()
			return
		}
	}
}

// serveOne reads, admits and answers one request, or hands it over; it
// reports whether the connection may serve another (if not, it is closed
// or handed over).
func (c *conn) serveOne(t0 time.Time) bool {
	r := &c.req
	*r = Request{c: c, values: r.values}
	if !c.readHead(t0, r) || !c.h.Admit(r) {
		c.handOver(t0)
		return false
	}
	need := r.head + r.bodyLen
	if need > cap(c.buf) {
		grown := make([]byte, len(c.buf), need)
		copy(grown, c.buf)
		c.buf = grown
	}
	by := c.f.bodyDeadline(t0, r.Start)
	for len(c.buf) < need {
		if err := c.fill(by); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			r.Close = true
			c.h.BodyFailed(r, err)
			c.f.served.Add(1)
			_ = c.nc.Close()
			return false
		}
	}
	r.Body = c.buf[r.head:need:need]
	c.h.Serve(r)
	switch {
	case r.handedOver:
		c.handOver(t0)
		return false
	case !r.answered:
		c.f.cfg.Logger.Error("front handler returned without an answer", "route", r.rt.path)
		_ = c.nc.Close()
		return false
	}
	c.f.served.Add(1)
	if r.Close {
		_ = c.nc.Close()
		return false
	}
	c.consume(need)
	if cap(c.buf) > bufSize && len(c.buf) <= bufSize {
		small := make([]byte, len(c.buf), bufSize)
		copy(small, c.buf)
		c.buf = small
	}
	return true
}

// readHead reads a request head the front serves; it reports false for
// anything else, however it ends (net/http's to read and judge).
func (c *conn) readHead(t0 time.Time, r *Request) bool {
	by := after(t0, c.f.headerTimeout())
	c.head.reset()
	for {
		switch c.f.parse(&c.head, c.buf, r) {
		case served:
			r.Start = time.Now()
			return true
		case handOver:
			return false
		}
		if len(c.buf) >= c.f.headLimit() || c.fill(by) != nil {
			return false
		}
	}
}

// await reads until n bytes are buffered.
func (c *conn) await(n int, by time.Time) error {
	if len(c.buf) < n {
		yieldBeforeRead()
	}
	for len(c.buf) < n {
		if err := c.fill(by); err != nil {
			return err
		}
	}
	return nil
}

// yieldBeforeRead lets the goroutines that are ready to run go first before
// a connection that has answered reads its next request. A client sends its
// next request only once it has read the answer, so a read made at once
// finds nothing: it costs a system call that fails, and parks the goroutine
// until the poller wakes it. The answers of one committed entry are written
// by many goroutines made ready together; once they have run, most clients
// have sent again and the read finds the request.
func yieldBeforeRead() { runtime.Gosched() }

// consume drops the first n buffered bytes.
func (c *conn) consume(n int) {
	rest := copy(c.buf, c.buf[n:])
	c.buf = c.buf[:rest]
}

// fill reads more bytes, failing once by passes (never, if by is zero).
//
// Setting a deadline costs a timer update, so the one set on the
// connection is moved only when it must be: it may be earlier than by (an
// earlier phase's), and a read it ends early is simply read again with the
// right one.
func (c *conn) fill(by time.Time) error {
	if len(c.buf) == cap(c.buf) {
		c.buf = append(c.buf, 0)[:len(c.buf)]
	}
	for {
		if by.IsZero() != c.rd.IsZero() || c.rd.After(by) {
			c.setRead(by)
		}
		n, err := c.nc.Read(c.buf[len(c.buf):cap(c.buf)])
		c.buf = c.buf[:len(c.buf)+n]
		switch {
		case n > 0:
			return nil
		case err == nil:
			err = io.ErrNoProgress
		case errors.Is(err, os.ErrDeadlineExceeded) && !by.IsZero() && time.Now().Before(by):
			c.setRead(by)
			continue
		}
		return err
	}
}

func (c *conn) setRead(t time.Time) {
	_ = c.nc.SetReadDeadline(t)
	c.rd = t
}

// write writes b whole, failing once by passes, with the deadline kept as
// fill keeps it.
func (c *conn) write(b []byte, by, now time.Time) error {
	for {
		if by.IsZero() != c.wd.IsZero() || c.wd.After(by) || (!c.wd.IsZero() && !c.wd.After(now)) {
			_ = c.nc.SetWriteDeadline(by)
			c.wd = by
		}
		n, err := c.nc.Write(b)
		if err == nil {
			return nil
		}
		b = b[n:]
		now = time.Now()
		if !errors.Is(err, os.ErrDeadlineExceeded) || by.IsZero() || !now.Before(by) {
			return err
		}
	}
}

// handOver gives the connection, with the request read so far from its
// first byte, to net/http.
func (c *conn) handOver(t0 time.Time) {
	if !c.state.CompareAndSwap(connBusy, connClosed) { // Shutdown closed it first
		_ = c.nc.Close()
		return
	}
	// net/http sets its own deadlines (moved back by the time spent here).
	_ = c.nc.SetDeadline(time.Time{})
	rc := &replayConn{Conn: c.nc, pending: c.buf}
	rc.shift.Store(int64(time.Since(t0)))
	c.buf = nil
	c.f.handedOver.Add(1)
	select {
	case c.f.handoff <- rc:
	case <-c.f.done:
		_ = c.nc.Close()
	}
}
