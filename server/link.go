package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/peerlink"
)

// The peer link: a follower carries the API operations its clients send to
// the leader over one persistent connection, made by upgrading an HTTP
// request to the leader's listener (so it takes the same route, TLS and dial
// overrides as every node-to-node call). Many operations share a frame and
// a write; no HTTP request is made or parsed per forwarded operation.
//
// Every forwarding guarantee holds: one hop (the leader never sends a link
// call on), never repeated once the leader may have it (a call the link
// lost after writing it is "outcome unknown", one it never wrote is "not
// applied"), the client's address carried (inside the command, as the quota
// hash), the leader's clock stamping every command, and every rule that
// depends on the replicated settings judged by the leader.
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
	// linkMaxInFlight bounds the calls one link runs at once on the leader.
	// Waiting requests (wait_seconds) hold their call for their wait, so
	// the bound leaves room for thousands of them beside the rest.
	linkMaxInFlight = 4096
	// linkRefusalTTL is how long a refused link is not tried again.
	linkRefusalTTL = 30 * time.Second
	// linkDialTimeout bounds dialing and upgrading.
	linkDialTimeout = 5 * time.Second
)

// errLinkRefused: the leader refused to open a link with this node.
var errLinkRefused = errors.New("the leader refused a peer link")

// forwardedCtxKey marks the context of a request a proven peer forwarded as
// a REST request: its operations run on this node or nowhere.
type forwardedCtxKey struct{}

// lead runs op where it must run: here on the ready leader, or on the
// leader through the peer link.
func (s *Server) lead(ctx context.Context, op *leaderOp) opResult {
	forwarded, _ := ctx.Value(forwardedCtxKey{}).(bool)
	local, addr, bad := s.leaderTarget(ctx, forwarded)
	switch {
	case bad != nil:
		return opResult{refusal: bad}
	case local:
		return s.execute(ctx, op)
	}
	return s.links.call(ctx, addr, op)
}

// linkManager keeps this node's link to the current leader.
type linkManager struct {
	s *Server

	mu      sync.Mutex
	addr    string           // the leader address client goes to
	client  *peerlink.Client // nil while none is open
	dialing chan struct{}    // closed when the dial in progress ends
	dialErr error
	refused map[string]time.Time // leader address -> when it refused a link

	ctx    context.Context // ends when the server closes
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newLinkManager(s *Server) *linkManager {
	ctx, cancel := context.WithCancel(context.Background())
	m := &linkManager{s: s, refused: map[string]time.Time{}, ctx: ctx, cancel: cancel}
	m.wg.Add(1)
	go m.watchLeader()
	return m
}

// close closes the link and every link served, and waits for them.
func (m *linkManager) close() {
	m.cancel()
	m.mu.Lock()
	if m.client != nil {
		_ = m.client.Close()
		m.client = nil
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// usable reports whether operations for the current leader go over the link
// (false when that leader refused one lately: forward REST requests then).
func (m *linkManager) usable() bool {
	addr := m.s.node.LeaderDialAddr()
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.refused[addr]
	return !ok || time.Since(at) > linkRefusalTTL
}

// watchLeader closes the link as soon as another node is known to lead: the
// old leader can no longer answer for certain, so its callers learn "outcome
// unknown" (or "not applied") at once rather than at their deadline.
func (m *linkManager) watchLeader() {
	defer m.wg.Done()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		}
		now := m.s.node.LeaderDialAddr()
		m.mu.Lock()
		if m.client != nil && m.addr != now {
			_ = m.client.Close()
			m.client = nil
		}
		m.mu.Unlock()
	}
}

// get returns an open link to addr, dialing one if needed; concurrent
// callers share one dial.
func (m *linkManager) get(ctx context.Context, addr string) (*peerlink.Client, error) {
	for {
		m.mu.Lock()
		if m.client != nil && m.addr == addr {
			select {
			case <-m.client.Done():
				m.client = nil
			default:
				c := m.client
				m.mu.Unlock()
				return c, nil
			}
		}
		if m.client != nil {
			_ = m.client.Close() // a link to a former leader
			m.client = nil
		}
		if m.dialing == nil {
			m.dialing = make(chan struct{})
			m.addr = addr
			go m.dial(addr, m.dialing)
		}
		wait := m.dialing
		m.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m.mu.Lock()
		c, err, same := m.client, m.dialErr, m.addr == addr
		m.mu.Unlock()
		if !same {
			continue // the leader changed while dialing
		}
		if c == nil {
			return nil, err
		}
		return c, nil
	}
}

func (m *linkManager) dial(addr string, done chan struct{}) {
	ctx, cancel := context.WithTimeout(m.ctx, linkDialTimeout)
	defer cancel()
	c, err := m.s.dialLink(ctx, addr)
	m.mu.Lock()
	defer m.mu.Unlock()
	defer close(done)
	m.dialing, m.dialErr = nil, err
	if errors.Is(err, errLinkRefused) {
		m.refused[addr] = time.Now()
		m.s.log.Warn("the leader refused a peer link; forwarding REST requests instead", "leader", addr, "error", err)
	}
	if err != nil {
		return
	}
	delete(m.refused, addr)
	if m.addr != addr || m.ctx.Err() != nil {
		_ = c.Close()
		return
	}
	m.client = c
}

// call sends op to the leader at addr and returns its answer.
func (m *linkManager) call(ctx context.Context, addr string, op *leaderOp) opResult {
	c, err := m.get(ctx, addr)
	if err != nil {
		return refused(retryLater("the leader could not be reached; nothing was changed, retry shortly", "not_applied"))
	}
	b, err := c.Call(ctx, op.encode(nil))
	if errors.Is(err, peerlink.ErrNotSent) {
		return refused(retryLater("the leader could not be reached; nothing was changed, retry shortly", "not_applied"))
	}
	if err != nil {
		m.s.log.Warn("a forwarded operation failed after it was sent", "error", err)
		return refused(retryLater("outcome unknown: the leader received the request but its answer was lost; it may or may not have taken effect", "unknown"))
	}
	res, err := decodeResult(b)
	if err != nil {
		m.s.log.Error("the leader's answer to a forwarded operation cannot be read", "error", err)
		return refused(retryLater("outcome unknown: the leader's answer could not be read; the request may or may not have taken effect", "unknown"))
	}
	return res
}

// dialLink opens a link to the node at addr: a connection to its HTTP
// listener (TLS with the node certificate when this node has one) upgraded
// to the link protocol.
func (s *Server) dialLink(ctx context.Context, addr string) (*peerlink.Client, error) {
	var conn net.Conn
	var err error
	if p := s.node.Peer(); p != nil {
		conn, err = p.DialHTTP(ctx, "tcp", addr)
	} else {
		conn, err = (&net.Dialer{Timeout: linkDialTimeout}).DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	deadline, _ := ctx.Deadline()
	_ = conn.SetDeadline(deadline)
	var req strings.Builder
	fmt.Fprintf(&req, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s: %s\r\n", LinkPath, addr, linkProtocol, forwardedHeader, s.node.ID())
	if key := s.node.ClusterKey(); key != "" {
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
		return nil, fmt.Errorf("%w: HTTP %d", errLinkRefused, resp.StatusCode)
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
	s.links.wg.Add(1)
	go func() {
		defer s.links.wg.Done()
		err := peerlink.Serve(s.links.ctx, conn, brw.Reader, linkMaxInFlight, s.answerLinkCall, refuseLinkCall)
		if err != nil {
			s.log.Debug("peer link closed", "from", from, "error", err)
		}
	}()
}

// refuseLinkCall answers a forwarded operation the leader did not run: the
// link's queue was full, or its caller cancelled it while it waited.
func refuseLinkCall(context.Context, []byte) []byte {
	b, _ := refused(retryLater("the leader is overloaded; nothing was changed, retry shortly", "not_applied")).encode(nil)
	return b
}

// answerLinkCall runs one forwarded operation on this node, which must be
// the leader: it never sends the operation on.
func (s *Server) answerLinkCall(ctx context.Context, req []byte) []byte {
	var res opResult
	op, err := decodeOp(req)
	timeout := s.cfg.RequestTimeout
	if err == nil {
		timeout += op.wait
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err != nil {
		res = refused(errReply(http.StatusBadRequest, "malformed forwarded operation", nil))
	} else if local, _, bad := s.leaderTarget(ctx, true); bad != nil {
		res = opResult{refusal: bad}
	} else if local {
		res = s.execute(ctx, op)
	}
	b, err := res.encode(nil)
	if err != nil {
		b, _ = refused(errReply(http.StatusInternalServerError, "internal error: the answer could not be encoded", nil)).encode(nil)
	}
	return b
}
