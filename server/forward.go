package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/server/service"
)

// Headers a follower adds when it forwards a request to the leader.
const (
	// forwardedHeader marks a forwarded request; its value is the sending node's id.
	forwardedHeader = "X-Holdfast-Forwarded-By"
	// clientIPHeader carries the original client's address, trusted only
	// from an authenticated peer.
	clientIPHeader = "X-Holdfast-Client-Ip"
)

// callerTimeout checks client.TimeoutHeader, the milliseconds a client will
// wait for its answer (a value that is not a whole number from 1 to
// client.MaxTimeoutMillis is a 400), and puts the caller's deadline into the
// request's context where this node might wait for a leader: a ready leader
// never does, so its requests go on unchanged.
func (s *Server) callerTimeout() gin.HandlerFunc {
	return func(c *gin.Context) {
		v := c.GetHeader(client.TimeoutHeader)
		if v == "" {
			c.Next()
			return
		}
		ms, ok := timeoutMillis(v)
		if !ok {
			badTimeout().write(c)
			return
		}
		c.Request = c.Request.WithContext(s.callerDeadline(c.Request.Context(), ms, time.Now()))
		c.Next()
	}
}

// timeoutMillis parses a client.TimeoutHeader value.
func timeoutMillis(v string) (int64, bool) {
	ms, err := strconv.ParseInt(v, 10, 64)
	return ms, err == nil && ms >= 1 && ms <= client.MaxTimeoutMillis
}

// badTimeout is the answer to a client.TimeoutHeader that timeoutMillis
// refuses.
func badTimeout() reply {
	return errReply(http.StatusBadRequest, client.TimeoutHeader+": must be a whole number of milliseconds from 1 to "+strconv.Itoa(client.MaxTimeoutMillis),
		jsonenc.H{"field": client.TimeoutHeader})
}

// callerDeadline puts into ctx the time, for a caller that waits ms
// milliseconds from now, by which this node stops waiting for a leader; a
// ready leader never waits, so its ctx is returned as is.
func (s *Server) callerDeadline(ctx context.Context, ms int64, now time.Time) context.Context {
	if s.node.IsReadyLeader() {
		return ctx
	}
	budget := time.Duration(ms) * time.Millisecond
	return service.WithCallerDeadline(ctx, now.Add(budget-min(budget/5, answerMargin)))
}

// answerMargin is the most of a caller's timeout kept for its answer's way
// back.
const answerMargin = 250 * time.Millisecond

// mayWait reports whether requests of the route may wait (wait_seconds).
func mayWait(route string) bool {
	switch route {
	case APIPrefix + "/lease", APIPrefix + "/lease/acquire", APIPrefix + "/queue/:queue_id/claim", APIPrefix + "/queue/:queue_id/jobs/:job_id":
		return true
	}
	return false
}

// hopHeaders are not copied across a proxy hop.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// onLeader lets the request through on the leader and forwards it there
// as a REST request from any other node. With allowStale, a request asking
// for ?stale=true is served locally instead. The operations endpoints use
// it; their handlers must run on the leader.
func (s *Server) onLeader(allowStale bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		if allowStale && (c.Query("stale") == "true" || service.PlantedStaleRead) {
			c.Next()
			return
		}
		s.forwardOrServe(c, s.forwardedByPeer(c))
	}
}

// apiRoute routes an API request whose operation runs on the leader: its
// handler runs here, the service reaching the leader through the peer link,
// unless the service says the request must be forwarded as a REST request
// (the leader refused this node a link). A request a proven peer forwarded
// runs here or nowhere.
func (s *Server) apiRoute(allowStale bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		if allowStale && (c.Query("stale") == "true" || service.PlantedStaleRead) {
			c.Next()
			return
		}
		fwd := s.forwardedByPeer(c)
		if fwd {
			c.Request = c.Request.WithContext(service.WithForwarded(c.Request.Context()))
		}
		switch addr, bad := s.svc.RESTForwardTarget(c.Request.Context(), fwd); {
		case bad != nil:
			errorReply(bad).write(c)
		case addr == "":
			c.Next()
		default:
			s.forward(c, addr)
		}
	}
}

// forwardOrServe serves the request here on the ready leader, or forwards
// it to the leader, or answers why it can run nowhere.
func (s *Server) forwardOrServe(c *gin.Context, forwarded bool) {
	local, addr, bad := s.svc.LeaderTarget(c.Request.Context(), forwarded)
	switch {
	case bad != nil:
		errorReply(bad).write(c)
	case local:
		c.Next()
	default:
		s.forward(c, addr)
	}
}

// maxLeaderAnswer bounds the body of a leader's answer read by sendToLeader;
// API and ops answers are far smaller.
const maxLeaderAnswer = 8 << 20

// leaderRequest is a request for the leader, built by REST forwarding from
// the client's request or by an MCP tool call from its arguments.
type leaderRequest struct {
	method string
	// uri is the path and query.
	uri           string
	header        http.Header
	body          io.Reader
	contentLength int64
	// clientIP is the original client's address, passed on for the
	// per-client queue quota.
	clientIP string
	// route is a route template or tool name for logs: never a raw path.
	route string
	// relay, when set, receives the leader's answer as it arrives instead
	// of it being read into leaderAnswer.body (a backup is far larger than
	// maxLeaderAnswer). What relay writes is the client's answer.
	relay func(status int, header http.Header, body io.Reader) error
}

// leaderAnswer is the leader's answer to a leaderRequest.
type leaderAnswer struct {
	status int
	header http.Header
	body   []byte
	// relayed says the answer went to leaderRequest.relay.
	relayed bool
}

// sendToLeader sends req to the leader once, with the forwarding headers
// (forwarded-by, client address, cluster key), and returns its answer. It
// never retries: once the request was fully written the leader may have
// acted on it, so a failure after that point is "outcome unknown" (except
// for a GET, which changes nothing). On failure it returns the reply to give
// the client instead.
func (s *Server) sendToLeader(ctx context.Context, leaderHTTP string, req leaderRequest) (leaderAnswer, *reply) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.cancelOnLeaderChange(ctx, cancel, leaderHTTP)
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	})
	out, err := http.NewRequestWithContext(ctx, req.method, s.node.PeerURL(leaderHTTP, req.uri), req.body)
	if err != nil {
		r := errReply(http.StatusBadRequest, "request cannot be forwarded", nil)
		return leaderAnswer{}, &r
	}
	out.ContentLength = req.contentLength
	for k, vs := range req.header {
		out.Header[k] = append([]string(nil), vs...)
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Header.Set(forwardedHeader, s.node.ID())
	out.Header.Set(clientIPHeader, req.clientIP)
	if d, ok := service.CallerDeadline(ctx); ok {
		// The leader learns what is left of the caller's time.
		out.Header.Set(client.TimeoutHeader, strconv.FormatInt(max(time.Until(d).Milliseconds(), 1), 10))
	}
	if key := s.node.ClusterKey(); key != "" {
		out.Header.Set(cluster.KeyHeader, key)
	}
	lost := func(err error) (leaderAnswer, *reply) {
		if wrote.Load() && req.method != http.MethodGet {
			s.log.Warn("forwarded request failed after it was sent", "route", req.route, "error", err)
			r := errorReply(service.OutcomeUnknown("outcome unknown: the leader received the request but its answer was lost; it may or may not have taken effect"))
			return leaderAnswer{}, &r
		}
		r := errorReply(service.NotApplied("the leader could not be reached; nothing was changed, retry shortly"))
		return leaderAnswer{}, &r
	}
	resp, err := s.proxy.RoundTrip(out)
	if err != nil {
		return lost(err)
	}
	defer resp.Body.Close()
	header := resp.Header.Clone()
	for _, h := range hopHeaders {
		header.Del(h)
	}
	header.Del("Content-Length")
	if req.relay != nil {
		if err := req.relay(resp.StatusCode, header, resp.Body); err != nil {
			s.log.Warn("relaying the leader's answer failed", "route", req.route, "error", err)
		}
		return leaderAnswer{relayed: true}, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxLeaderAnswer+1))
	if err == nil && len(body) > maxLeaderAnswer {
		err = fmt.Errorf("answer exceeds %d bytes", maxLeaderAnswer)
	}
	if err != nil {
		return lost(fmt.Errorf("read the leader's answer: %w", err))
	}
	return leaderAnswer{status: resp.StatusCode, header: header, body: body}, nil
}

// cancelOnLeaderChange cancels a forwarded request once another node is
// known to lead: the old leader can no longer answer for certain, so the
// client learns "outcome unknown" (or "not applied") at once instead of
// after the request timeout, e.g. when the old leader is paused.
func (s *Server) cancelOnLeaderChange(ctx context.Context, cancel context.CancelFunc, leaderHTTP string) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if now := s.node.LeaderDialAddr(); now != "" && now != leaderHTTP {
				cancel()
				return
			}
		}
	}
}

// forward sends the request to the leader once and relays its answer.
func (s *Server) forward(c *gin.Context, leaderHTTP string) {
	req := leaderRequest{
		method:        c.Request.Method,
		uri:           c.Request.URL.RequestURI(),
		header:        c.Request.Header,
		body:          c.Request.Body,
		contentLength: c.Request.ContentLength,
		clientIP:      s.clientIP(c),
		route:         c.FullPath(),
	}
	ctx, cancel := s.requestContext(c)
	if mayWait(req.route) {
		// The request may wait on the leader for up to its wait_seconds,
		// which only the leader reads.
		cancel()
		ctx, cancel, _ = s.waitingContext(s.callOf(c), service.MaxAcquireWaitSeconds*time.Second) // gin's calls always wait
	}
	if req.route == BackupPath {
		// A backup streams through as it comes, for as long as the leader takes.
		cancel()
		ctx, cancel = context.WithTimeout(c.Request.Context(), max(backupTimeout, s.cfg.RequestTimeout))
		req.relay = func(status int, header http.Header, body io.Reader) error {
			answerWith(c, status, header)
			_, err := io.Copy(c.Writer, body)
			return err
		}
	}
	defer cancel()
	ans, bad := s.sendToLeader(ctx, leaderHTTP, req)
	switch {
	case bad != nil:
		bad.write(c)
		return
	case !ans.relayed:
		answerWith(c, ans.status, ans.header)
		if _, err := c.Writer.Write(ans.body); err != nil {
			s.log.Warn("relaying the leader's answer failed", "route", c.FullPath(), "error", err)
		}
	}
	c.Abort()
}

// answerWith starts the client's answer with the leader's status and headers.
func answerWith(c *gin.Context, status int, header http.Header) {
	for k, vs := range header {
		c.Writer.Header()[k] = vs
	}
	c.Status(status)
}
