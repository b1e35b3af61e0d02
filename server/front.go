package server

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/internal/httpfront"
)

// frontBodyLimit is the largest body the front reads; larger ones go to
// net/http, which applies apiBodyLimit.
const frontBodyLimit = 64 << 10

// Front is the listener of a plain-HTTP node: it serves the API's common
// writes itself and hands every other request to net/http.
type Front = httpfront.Front

// NewFront returns the front of hs on ln, serving the API's leader routes
// through the same handlers and checks as gin's router: serve it with
// hs.Serve(front).
func (s *Server) NewFront(ln net.Listener, hs *http.Server) *Front {
	routes := s.apiRoutes()
	paths := make([]string, len(routes))
	for i, r := range routes {
		paths[i] = APIPrefix + r.path
	}
	return httpfront.NewFront(httpfront.Config{
		Listener:    ln,
		Server:      hs,
		Routes:      paths,
		Headers:     []string{"Content-Type", "Authorization", client.TimeoutHeader},
		Refuse:      []string{forwardedHeader, clientIPHeader, cluster.KeyHeader},
		BodyLimit:   frontBodyLimit,
		BodyTimeout: s.cfg.BodyTimeout,
		NewConn: func(remote net.Addr) httpfront.ConnHandler {
			return &frontConn{s: s, routes: routes, ip: remoteIP(remote.String())}
		},
		Logger: s.log,
	})
}

// frontConn runs, for the requests the front reads on one connection, what
// gin's router runs for them: the caller's timeout and the rate limit
// before the body (a request either refuses goes to net/http, which refuses
// it the same way), the body's failure as bufferBody answers it, and the
// choice between serving here and forwarding as a REST request (handed
// over) before the handler.
type frontConn struct {
	s      *Server
	routes []apiRouteSpec
	ip     string
	call   frontCall
	// fields and body are the answer's, reused.
	fields [3]httpfront.Field
	body   []byte
}

// Admit checks the caller's timeout and takes a token of the rate limit.
func (fc *frontConn) Admit(r *httpfront.Request) bool {
	s := fc.s
	c := &fc.call
	*c = frontCall{fc: fc, r: r, ctx: context.Background()}
	if v, _ := r.Header(client.TimeoutHeader); v != "" {
		ms, ok := timeoutMillis(v)
		if !ok {
			return false
		}
		c.ctx, c.timed = s.callerDeadline(c.ctx, ms, r.Start), true
	}
	if s.limiter.Limits() {
		if ok, _ := s.limiter.Allow(fc.ip, r.Start); !ok {
			return false
		}
		c.charged = true
	}
	return true
}

// BodyFailed answers as bufferBody answers a body that was not read whole.
func (fc *frontConn) BodyFailed(r *httpfront.Request, err error) {
	fc.call.Reply(fc.s.bodyReadFailure(err, apiBodyLimit))
	fc.observe()
}

// Serve runs the request's handler, unless the service says it must be
// forwarded as a REST request.
func (fc *frontConn) Serve(r *httpfront.Request) {
	s, c := fc.s, &fc.call
	defer func() {
		if rec := recover(); rec != nil {
			s.log.Error("handler panic", "route", fc.route().path, "panic", rec)
			c.Reply(errReply(http.StatusInternalServerError, "internal error", nil))
		}
		fc.observe()
	}()
	switch addr, bad := s.svc.RESTForwardTarget(c.ctx, false); {
	case bad != nil:
		c.Reply(errorReply(bad))
	case addr != "":
		c.handOver()
	default:
		fc.route().h(c)
	}
}

func (fc *frontConn) route() apiRouteSpec { return fc.routes[fc.call.r.Route()] }

// observe counts an answered request as gin's middleware counts it.
func (fc *frontConn) observe() {
	c, s := &fc.call, fc.s
	if !c.wrote {
		return
	}
	route := APIPrefix + fc.route().path
	took := time.Since(c.r.Start)
	m := s.metrics.series(http.MethodPost, route, c.status)
	m.count.Inc()
	m.latency.Observe(took.Seconds())
	if s.log.IsDebug() {
		s.log.Debug("request", "method", http.MethodPost, "route", route, "status", c.status,
			"duration_ms", took.Milliseconds(), "forwarded", false)
	}
}

// frontCall is a call the front serves.
type frontCall struct {
	fc  *frontConn
	r   *httpfront.Request
	ctx context.Context
	// timed says the caller sent its own timeout; charged that the rate
	// limit took a token for the request.
	timed, charged bool
	status         int
	wrote          bool
}

// handOver gives the request to net/http, which counts it against the
// rate limit again: the token taken here goes back.
func (c *frontCall) handOver() {
	if c.charged {
		c.fc.s.limiter.Refund(c.fc.ip)
		c.charged = false
	}
	c.r.HandOver()
}

func (c *frontCall) Header(name string) string {
	v, _ := c.r.Header(name)
	return v
}

func (c *frontCall) Param(name string) string { return c.r.Param(name) }

// Query is never present: a request with a query goes to net/http.
func (c *frontCall) Query(string) (string, bool) { return "", false }

func (c *frontCall) Body(int64) ([]byte, error) { return c.r.Body, nil }

func (c *frontCall) ContentLength() int64 { return int64(len(c.r.Body)) }

func (c *frontCall) Context() context.Context { return c.ctx }

// Bounded is the call's context bounded by timeout; a call without a
// caller's deadline uses the connection's reused one.
func (c *frontCall) Bounded(timeout time.Duration) (context.Context, context.CancelFunc) {
	if !c.timed {
		return c.r.Bounded(timeout)
	}
	return context.WithTimeout(c.ctx, timeout)
}

func (c *frontCall) ClientIP() string { return c.fc.ip }

// Waits hands the request over: the front does not watch a connection
// while it serves, so it cannot notice the client leaving.
func (c *frontCall) Waits(time.Time) bool {
	c.handOver()
	return false
}

// Reply writes the answer as reply.write does through gin.
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
	fields := append(fc.fields[:0], httpfront.Field{Name: "Content-Type", Value: "application/json; charset=utf-8"})
	if r.RetryAfter > 0 {
		fields = append(fields, httpfront.Field{Name: "Retry-After", Value: strconv.Itoa(r.RetryAfter)})
	}
	if r.Bearer {
		fields = append(fields, httpfront.Field{Name: "Www-Authenticate", Value: `Bearer realm="holdfast"`})
	}
	_ = c.r.Reply(r.Status, fields, b)
	if r.job.j != nil && cap(b) <= 4<<10 {
		fc.body = b[:0]
	}
}
