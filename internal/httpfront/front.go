package httpfront

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Config configures a Front.
type Config struct {
	// Listener is where the connections come from.
	Listener net.Listener
	// Server is the net/http server that gets what the front does not
	// answer: serve it with Server.Serve(front). Its timeouts apply to what
	// the front answers; NewFront wraps its ConnState hook, so set that
	// before.
	Server *http.Server
	// Routes are the path templates of the POST routes the front may
	// serve, with ":name" for a parameter segment.
	Routes []string
	// Headers are the request headers the handler reads (at most 8); a
	// request with one of them twice goes to net/http.
	Headers []string
	// Refuse are headers whose presence sends a request to net/http.
	Refuse []string
	// BodyLimit is the largest body the front reads; a request with a
	// larger one goes to net/http.
	BodyLimit int
	// BodyTimeout bounds how long a body may take to arrive once its head
	// has, in place of Server.ReadTimeout: set it to the read deadline the
	// net/http handlers of the same routes set before they read the body.
	// Zero leaves the body to ReadTimeout, counted from the request's start.
	BodyTimeout time.Duration
	// NewConn returns the handler of a new connection's requests.
	NewConn func(remote net.Addr) ConnHandler
	// Logger logs panics and accept failures.
	Logger hclog.Logger
}

// ConnHandler serves the requests of one connection, one after another.
type ConnHandler interface {
	// Admit is called once a request's head is read, before its body: it
	// returns false to hand the request to net/http, unanswered, in which
	// case nothing it did may be seen by anyone.
	Admit(r *Request) bool
	// Serve answers the request, body read, with r.Reply, or hands it to
	// net/http with r.HandOver before doing anything anyone could see.
	Serve(r *Request)
	// BodyFailed answers, with r.Reply, a request whose body did not
	// arrive whole: err is io.ErrUnexpectedEOF, a timeout or a read error.
	// The connection is closed after the answer.
	BodyFailed(r *Request, err error)
}

// Front is a net.Listener for an http.Server: it takes the connections of
// the underlying listener, answers the requests it serves, and yields each
// connection to net/http once it holds a request it does not.
type Front struct {
	cfg    Config
	router router

	handoff chan net.Conn
	done    chan struct{}
	doneErr error

	mu      sync.Mutex
	conns   map[*conn]struct{}
	closing atomic.Bool

	date atomic.Pointer[dateLine]

	served, handedOver atomic.Uint64
}

// NewFront starts taking cfg.Listener's connections.
func NewFront(cfg Config) *Front {
	if len(cfg.Headers) > maxHeaders {
		panic(fmt.Sprintf("httpfront: %d headers; at most %d", len(cfg.Headers), maxHeaders))
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	f := &Front{cfg: cfg, router: newRouter(cfg.Routes), handoff: make(chan net.Conn), done: make(chan struct{}),
		conns: make(map[*conn]struct{})}
	prev := cfg.Server.ConnState
	cfg.Server.ConnState = func(c net.Conn, st http.ConnState) {
		if rc, ok := c.(*replayConn); ok && st != http.StateNew {
			rc.settle()
		}
		if prev != nil {
			prev(c, st)
		}
	}
	go f.acceptLoop()
	return f
}

// Counts returns how many requests the front has answered and how many
// connections it has handed to net/http.
func (f *Front) Counts() (served, handedOver uint64) {
	return f.served.Load(), f.handedOver.Load()
}

// acceptLoop takes every connection of the underlying listener.
func (f *Front) acceptLoop() {
	var delay time.Duration
	for {
		nc, err := f.cfg.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || f.closing.Load() {
				f.doneErr = err
				close(f.done)
				return
			}
			// Out of file descriptors and the like: wait and retry, as
			// net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			f.cfg.Logger.Warn("accept failed; retrying", "error", err, "delay", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := &conn{f: f, nc: nc, accepted: time.Now(), buf: make([]byte, 0, bufSize)}
		if !f.track(c) {
			_ = nc.Close()
			continue
		}
		c.h = f.cfg.NewConn(nc.RemoteAddr())
		go c.serve()
	}
}

// track records a connection; it refuses one once the front is closing.
func (f *Front) track(c *conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing.Load() {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Front) untrack(c *conn) {
	f.mu.Lock()
	delete(f.conns, c)
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
func (f *Front) Close() error { return f.cfg.Listener.Close() }

// Addr is the underlying listener's address.
func (f *Front) Addr() net.Addr { return f.cfg.Listener.Addr() }

// Shutdown closes the front's idle connections, lets each request it is
// serving finish and closes that connection after its answer, and waits
// for them until ctx ends; then it closes what is left. Call it with
// http.Server.Shutdown, which does the same for the connections net/http
// holds.
func (f *Front) Shutdown(ctx context.Context) error {
	f.closing.Store(true)
	_ = f.cfg.Listener.Close()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		f.mu.Lock()
		for c := range f.conns {
			if c.state.CompareAndSwap(connIdle, connClosed) {
				_ = c.nc.Close()
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
	_ = f.cfg.Listener.Close()
	f.closeAll()
}

func (f *Front) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for c := range f.conns {
		c.state.Store(connClosed)
		_ = c.nc.Close()
	}
}

// dateLine is the Date header of one second.
type dateLine struct {
	unix int64
	line []byte
}

// dateOf is "Date: <now in HTTP format>\r\n", formatted once a second.
func (f *Front) dateOf(now time.Time) []byte {
	sec := now.Unix()
	if d := f.date.Load(); d != nil && d.unix == sec {
		return d.line
	}
	line := []byte("Date: " + now.UTC().Format(http.TimeFormat) + "\r\n")
	f.date.Store(&dateLine{unix: sec, line: line})
	return line
}

// headerTimeout and idleTimeout fall back on ReadTimeout as net/http's do.
func (f *Front) headerTimeout() time.Duration {
	if d := f.cfg.Server.ReadHeaderTimeout; d != 0 {
		return d
	}
	return f.cfg.Server.ReadTimeout
}

func (f *Front) idleTimeout() time.Duration {
	if d := f.cfg.Server.IdleTimeout; d != 0 {
		return d
	}
	return f.cfg.Server.ReadTimeout
}

// bodyDeadline is when a body must be whole, for a request that started at
// t0 and whose head was whole at headEnd.
func (f *Front) bodyDeadline(t0, headEnd time.Time) time.Time {
	if f.cfg.BodyTimeout > 0 {
		return headEnd.Add(f.cfg.BodyTimeout)
	}
	return after(t0, f.cfg.Server.ReadTimeout)
}

// headLimit is the longest head the front reads before it hands the
// request over: headLimit, or less when MaxHeaderBytes is smaller, so a
// head net/http would refuse as too large always reaches net/http.
func (f *Front) headLimit() int {
	m := f.cfg.Server.MaxHeaderBytes
	if m <= 0 {
		m = http.DefaultMaxHeaderBytes
	}
	return min(headLimit, m)
}

// after is from plus d, or no time (no deadline) when d is not positive.
func after(from time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return from.Add(d)
}
