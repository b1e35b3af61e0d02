package server

import (
	"context"
	"crypto/x509"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
)

// A request is from a proven peer only by proof: with peer TLS, its
// connection's client certificate is a node certificate of the peer CA;
// without, it carries the cluster key. Nothing else — no header, no source
// address — makes a caller a peer, and the internal headers (the
// forwarded-by marker and the original client address) are ignored unless
// such a peer sent them.

// connPeerKey is the context key of a connection's connPeer.
type connPeerKey struct{}

// connPeer caches, for one connection, the node its client certificate
// proves, so a certificate is verified once per connection rather than once
// per request.
type connPeer struct {
	once sync.Once
	id   string
	ok   bool
}

// connContext gives every accepted connection its own peer cache.
func connContext(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connPeerKey{}, &connPeer{})
}

// certPeer returns the node the request's TLS client certificate proves.
func (s *Server) certPeer(r *http.Request) (string, bool) {
	p := s.node.Peer()
	if p == nil || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return "", false
	}
	verify := func() (string, bool) {
		id, err := p.Identify(r.TLS.PeerCertificates, x509.ExtKeyUsageClientAuth)
		return id, err == nil
	}
	cp, _ := r.Context().Value(connPeerKey{}).(*connPeer)
	if cp == nil {
		return verify()
	}
	cp.once.Do(func() { cp.id, cp.ok = verify() })
	return cp.id, cp.ok
}

// provenPeer reports whether the request comes from another node, proven
// as the package comment above says, and which node the proof names (""
// when the proof is the cluster key, which names no node).
func (s *Server) provenPeer(c *gin.Context) (string, bool) {
	if s.node.Peer() != nil {
		return s.certPeer(c.Request)
	}
	if s.node.ClusterKey() != "" && s.node.CheckKey(c.GetHeader(cluster.KeyHeader)) {
		return "", true
	}
	return "", false
}

// forwardedKey is the gin context key caching forwardedByPeer.
const forwardedKey = "holdfast.forwarded"

// forwardedByPeer reports whether the request was forwarded by a proven
// peer: it carries the forwarded-by marker, and the connection proves a
// peer — with peer TLS, the very node the marker names. A marker from
// anyone else is ignored.
func (s *Server) forwardedByPeer(c *gin.Context) bool {
	if v, ok := c.Get(forwardedKey); ok {
		return v.(bool)
	}
	by := c.GetHeader(forwardedHeader)
	fwd := false
	if by != "" {
		id, ok := s.provenPeer(c)
		fwd = ok && (id == "" || id == by)
	}
	c.Set(forwardedKey, fwd)
	return fwd
}

// clientIP is the address the request came from: the forwarding node's
// claim when a proven peer forwarded the request, else the TCP peer
// address. gin's own ClientIP (which trusts X-Forwarded-For) is not used.
func (s *Server) clientIP(c *gin.Context) string {
	if fwd := c.GetHeader(clientIPHeader); fwd != "" && s.forwardedByPeer(c) {
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

// guardBrowsers refuses, on the operator endpoints (settings, join, remove,
// pprof) of a node without a cluster key and before any handler runs,
// every request a browser page could have made: one with an Origin header,
// a cross-site Sec-Fetch-Site, or a Host that is neither this node's own
// address nor a loopback name (a DNS-rebinding page reaches loopback under
// its own host name). With a cluster key, the key is what a page cannot
// send; a proven peer is never a page.
func (s *Server) guardBrowsers() gin.HandlerFunc {
	return func(c *gin.Context) {
		if s.node.ClusterKey() != "" {
			c.Next()
			return
		}
		if _, ok := s.provenPeer(c); ok {
			c.Next()
			return
		}
		if why := s.browserRefusal(c.Request); why != "" {
			fail(c, http.StatusForbidden, why)
			return
		}
		c.Next()
	}
}

// operatorChallenge is the WWW-Authenticate of an operator endpoint's 401.
const operatorChallenge = `HoldfastClusterKey realm="holdfast", header="` + cluster.KeyHeader + `"`

// requireOperator lets through only operators and peers: a proven peer;
// with a cluster key, a caller that sends it; without one, a loopback
// caller.
func (s *Server) requireOperator() gin.HandlerFunc {
	return func(c *gin.Context) {
		if _, ok := s.provenPeer(c); ok {
			c.Next()
			return
		}
		if s.node.ClusterKey() != "" {
			if s.node.CheckKey(c.GetHeader(cluster.KeyHeader)) {
				c.Next()
				return
			}
			// A 401 names how to authenticate; the scheme is holdfast's own header.
			c.Header("WWW-Authenticate", operatorChallenge)
			fail(c, http.StatusUnauthorized, "this endpoint requires the cluster key in the "+cluster.KeyHeader+" header")
			return
		}
		if !isLoopback(c.Request.RemoteAddr) {
			fail(c, http.StatusForbidden, "this endpoint is only available from loopback when no cluster key is configured")
			return
		}
		c.Next()
	}
}

// browserRefusal says why a request looks as if a web page made it, or "".
func (s *Server) browserRefusal(r *http.Request) string {
	if _, ok := r.Header["Origin"]; ok {
		return "requests with an Origin header are refused: this endpoint is for operators and nodes, not web pages"
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return "cross-site requests are refused: this endpoint is for operators and nodes, not web pages"
	}
	if !s.ownHost(r.Host) {
		return "the Host header names neither this node nor a loopback name (a DNS-rebinding guard)"
	}
	return ""
}

// ownHost reports whether host (a Host header, port optional) is this
// node's advertised or listening host, or a loopback name.
func (s *Server) ownHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.ToLower(strings.Trim(h, "[]"))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, own := range []string{s.node.HTTPAddr(), s.cfg.ListenAddr} {
		if oh, _, err := net.SplitHostPort(own); err == nil && strings.EqualFold(strings.Trim(oh, "[]"), h) {
			return true
		}
	}
	return false
}
