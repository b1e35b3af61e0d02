package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
)

// Headers a follower adds when it forwards a request to the leader.
const (
	// forwardedHeader marks a forwarded request; its value is the sending node's id.
	forwardedHeader = "X-Holdfast-Forwarded-By"
	// clientIPHeader carries the original client's address, trusted only
	// from an authenticated peer.
	clientIPHeader = "X-Holdfast-Client-Ip"
)

// hopHeaders are not copied across a proxy hop.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// onLeader lets the request through on the leader and forwards it there
// from any other node. With allowStale, a request asking for ?stale=true is
// served locally instead.
func (s *Server) onLeader(allowStale bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		if allowStale && c.Query("stale") == "true" {
			c.Next()
			return
		}
		if s.node.IsLeader() {
			c.Next()
			return
		}
		if c.GetHeader(forwardedHeader) != "" {
			// One hop only: leadership moved while the request travelled.
			retryLater("leadership changed while the request was forwarded; nothing was changed, retry", "not_applied").write(c)
			return
		}
		addr := s.waitForLeader(c.Request.Context())
		if addr == "" {
			if s.node.IsLeader() {
				c.Next()
				return
			}
			retryLater("no leader is available (election in progress or no quorum); nothing was changed, retry shortly", "not_applied").write(c)
			return
		}
		s.forward(c, addr)
	}
}

// waitForLeader polls for a leader's HTTP address, for at most LeaderWait.
// It returns "" if none is found or this node became the leader.
func (s *Server) waitForLeader(ctx context.Context) string {
	deadline := time.Now().Add(s.cfg.LeaderWait)
	for {
		if s.node.IsLeader() {
			return ""
		}
		if id, addr := s.node.Leader(); id != "" && addr != "" && id != s.node.ID() {
			return addr
		}
		if time.Now().After(deadline) {
			return ""
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// forward sends the request to the leader once and relays its answer. It
// never retries: if the request was fully written before the connection
// failed, the leader may have acted on it and the answer is "outcome unknown".
func (s *Server) forward(c *gin.Context, leaderHTTP string) {
	ctx, cancel := s.requestContext(c)
	defer cancel()
	wrote := false
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote = true },
	})
	out, err := http.NewRequestWithContext(ctx, c.Request.Method, "http://"+leaderHTTP+c.Request.URL.RequestURI(), c.Request.Body)
	if err != nil {
		fail(c, http.StatusBadRequest, "request cannot be forwarded")
		return
	}
	out.ContentLength = c.Request.ContentLength
	for k, vs := range c.Request.Header {
		out.Header[k] = append([]string(nil), vs...)
	}
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Header.Set(forwardedHeader, s.node.ID())
	out.Header.Set(clientIPHeader, s.clientIP(c))
	if key := s.node.ClusterKey(); key != "" {
		out.Header.Set(cluster.KeyHeader, key)
	}
	resp, err := s.proxy.RoundTrip(out)
	if err != nil {
		if wrote && c.Request.Method != http.MethodGet {
			s.log.Warn("forwarded request failed after it was sent", "route", c.FullPath(), "error", err)
			retryLater("outcome unknown: the leader received the request but its answer was lost; it may or may not have taken effect", "unknown").write(c)
			return
		}
		retryLater("the leader could not be reached; nothing was changed, retry shortly", "not_applied").write(c)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		c.Writer.Header()[k] = vs
	}
	for _, h := range hopHeaders {
		c.Writer.Header().Del(h)
	}
	c.Status(resp.StatusCode)
	if _, err := io.Copy(c.Writer, resp.Body); err != nil {
		s.log.Warn("relaying the leader's answer failed", "route", c.FullPath(), "error", err)
	}
	c.Abort()
}

// peerAuthenticated reports whether the request comes from a cluster peer:
// it carries the cluster key, or, with no key configured, it comes from
// loopback.
func (s *Server) peerAuthenticated(c *gin.Context) bool {
	if s.node.ClusterKey() != "" {
		return s.node.CheckKey(c.GetHeader(cluster.KeyHeader))
	}
	return isLoopback(c.Request.RemoteAddr)
}

// clientIP is the address the request came from: the forwarding node's
// claim when the request comes from an authenticated peer, else the TCP
// peer address. gin's own ClientIP (which trusts X-Forwarded-For) is not
// used.
func (s *Server) clientIP(c *gin.Context) string {
	if fwd := c.GetHeader(clientIPHeader); fwd != "" && c.GetHeader(forwardedHeader) != "" && s.peerAuthenticated(c) {
		if ip := net.ParseIP(fwd); ip != nil {
			return ip.String()
		}
	}
	return remoteIP(c.Request.RemoteAddr)
}

func remoteIP(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	if ip == nil {
		return host
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.String()
}

func isLoopback(remoteAddr string) bool {
	ip := net.ParseIP(remoteIP(remoteAddr))
	return ip != nil && ip.IsLoopback()
}

// requirePeer rejects node-to-node and operator calls without the cluster
// key (or, with no key configured, from anywhere but loopback).
func (s *Server) requirePeer() gin.HandlerFunc {
	return func(c *gin.Context) {
		if s.peerAuthenticated(c) {
			c.Next()
			return
		}
		if s.node.ClusterKey() != "" {
			fail(c, http.StatusUnauthorized, "this endpoint requires the cluster key in the "+cluster.KeyHeader+" header")
			return
		}
		fail(c, http.StatusForbidden, "this endpoint is only available from loopback when no cluster key is configured")
	}
}
