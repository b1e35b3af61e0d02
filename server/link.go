package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/peerlink"
	"github.com/holdfast/holdfast/server/service"
)

// A peer link is made by upgrading an HTTP request to the leader's
// listener, so it takes the same route, TLS and dial overrides as every
// node-to-node call; the service runs the calls it carries.
//
// Only a proven peer may open a link: one with a node certificate of the
// peer CA, or the cluster key; on a node with neither configured, a loopback
// caller (the trust the operator endpoints give it). A node whose link is
// refused forwards REST requests instead.
const (
	// LinkPath is the endpoint a follower upgrades to a peer link.
	LinkPath = "/cluster/link"
	// linkProtocol is the Upgrade token of the peer link.
	linkProtocol = "holdfast-link/1"
)

// linkDialer opens peer links for the service from this node.
type linkDialer struct{ node *cluster.Node }

// DialLink opens a link to the node at addr: a connection to its HTTP
// listener (TLS with the node certificate when this node has one) upgraded
// to the link protocol.
func (l linkDialer) DialLink(ctx context.Context, addr string) (*peerlink.Client, error) {
	var conn net.Conn
	var err error
	if p := l.node.Peer(); p != nil {
		conn, err = p.DialHTTP(ctx, "tcp", addr)
	} else {
		conn, err = (&net.Dialer{Timeout: service.LinkDialTimeout}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	var req strings.Builder
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s: %s\r\n", LinkPath, addr, linkProtocol, forwardedHeader, l.node.ID())
	if key := l.node.ClusterKey(); key != "" {
		fmt.Fprintf(&req, "%s: %s\r\n", cluster.KeyHeader, key)
	}
	req.WriteString("\r\n")
	if _, err := conn.Write([]byte(req.String())); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("upgrade request to %s: %w", addr, err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("upgrade answer from %s: %w", addr, err)
	}
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusSwitchingProtocols:
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		_ = conn.Close()
		return nil, fmt.Errorf("%w: HTTP %d", service.ErrLinkRefused, resp.StatusCode)
	default:
		_ = conn.Close()
		return nil, fmt.Errorf("upgrade to a peer link at %s: HTTP %d", addr, resp.StatusCode)
	}
	_ = conn.SetDeadline(time.Time{})
	return peerlink.NewClient(conn, br), nil
}

// linkAllowed reports whether a caller may open a link here: a proven peer,
// or, on a node with neither a cluster key nor peer TLS, a loopback caller.
func (s *Server) linkAllowed(c *gin.Context) bool {
	if _, ok := s.provenPeer(c); ok {
		return true
	}
	return s.node.ClusterKey() == "" && s.node.Peer() == nil && isLoopback(c.Request.RemoteAddr)
}

// serveLink upgrades the request to a peer link and answers its calls
// until it closes.
func (s *Server) serveLink(c *gin.Context) {
	if !s.linkAllowed(c) {
		fail(c, http.StatusForbidden, "a peer link is only for other nodes, proven by a node certificate or the cluster key")
		return
	}
	if !strings.EqualFold(c.GetHeader("Upgrade"), linkProtocol) {
		fail(c, http.StatusBadRequest, "this endpoint upgrades to "+linkProtocol+" only")
		return
	}
	conn, brw, err := http.NewResponseController(c.Writer).Hijack()
	if err != nil {
		fail(c, http.StatusBadRequest, "the connection cannot be upgraded (HTTP/1.1 only)")
		return
	}
	c.Abort()
	_ = conn.SetDeadline(time.Time{})
	if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + linkProtocol + "\r\n\r\n"); err == nil {
		err = brw.Flush()
	}
	if err != nil {
		_ = conn.Close()
		return
	}
	from := c.GetHeader(forwardedHeader)
	s.log.Info("peer link opened", "from", from, "remote", c.Request.RemoteAddr)
	s.svc.ServeLink(conn, brw.Reader, from)
}
