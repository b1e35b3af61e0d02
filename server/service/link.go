package service

import (
	"bufio"
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/holdfast/holdfast/internal/peerlink"
)

// The peer link: a follower carries the API operations its clients send to
// the leader over one persistent connection, which the HTTP layer opens
// (LinkDialer) and accepts (ServeLink). Many operations share a frame and a
// write; no HTTP request is made or parsed per forwarded operation.
//
// Every forwarding guarantee holds: one hop (the leader never sends a link
// call on), never repeated once the leader may have it (a call the link
// lost after writing it is "outcome unknown", one it never wrote is "not
// applied"), the client's address carried (inside the command, as the quota
// hash), the leader's clock stamping every command, and every rule that
// depends on the replicated settings judged by the leader.
const (
	// linkMaxInFlight bounds the calls one link runs at once on the leader.
	// Waiting requests (wait_seconds) hold their call for their wait, so
	// the bound leaves room for thousands of them beside the rest.
	linkMaxInFlight = 4096
	// linkRefusalTTL is how long a refused link is not tried again.
	linkRefusalTTL = 30 * time.Second
	// LinkDialTimeout bounds dialing and upgrading a link.
	LinkDialTimeout = 5 * time.Second
)

// ErrLinkRefused is wrapped by a LinkDialer's error when the leader refused
// to open a link with this node.
var ErrLinkRefused = errors.New("the leader refused a peer link")

// linkManager keeps this node's link to the current leader.
type linkManager struct {
	s *Service

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

func newLinkManager(s *Service) *linkManager {
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
	ctx, cancel := context.WithTimeout(m.ctx, LinkDialTimeout)
	defer cancel()
	c, err := m.s.cfg.Dialer.DialLink(ctx, addr)
	m.mu.Lock()
	defer m.mu.Unlock()
	defer close(done)
	m.dialing, m.dialErr = nil, err
	if errors.Is(err, ErrLinkRefused) {
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
		return refused(NotApplied("the leader could not be reached; nothing was changed, retry shortly"))
	}
	b, err := c.Call(ctx, op.encode(nil))
	if errors.Is(err, peerlink.ErrNotSent) {
		return refused(NotApplied("the leader could not be reached; nothing was changed, retry shortly"))
	}
	if err != nil {
		m.s.log.Warn("a forwarded operation failed after it was sent", "error", err)
		return refused(OutcomeUnknown("outcome unknown: the leader received the request but its answer was lost; it may or may not have taken effect"))
	}
	res, err := decodeResult(b)
	if err != nil {
		m.s.log.Error("the leader's answer to a forwarded operation cannot be read", "error", err)
		return refused(OutcomeUnknown("outcome unknown: the leader's answer could not be read; the request may or may not have taken effect"))
	}
	return res
}

// ServeLink answers the calls of a peer link the HTTP layer accepted, on
// conn with br its buffered reader, until the link or the service closes.
// from names the peer for the logs.
func (s *Service) ServeLink(conn net.Conn, br *bufio.Reader, from string) {
	s.links.wg.Add(1)
	go func() {
		defer s.links.wg.Done()
		err := peerlink.Serve(s.links.ctx, conn, br, linkMaxInFlight, s.answerLinkCall, refuseLinkCall)
		if err != nil {
			s.log.Debug("peer link closed", "from", from, "error", err)
		}
	}()
}

// refuseLinkCall answers a forwarded operation the leader did not run: the
// link's queue was full, or its caller cancelled it while it waited.
func refuseLinkCall(_ context.Context, _, dst []byte) []byte {
	b, _ := refused(NotApplied("the leader is overloaded; nothing was changed, retry shortly")).encode(dst)
	return b
}

// answerLinkCall runs one forwarded operation on this node, which must be
// the leader: it never sends the operation on.
func (s *Service) answerLinkCall(ctx context.Context, req, dst []byte) []byte {
	var res opResult
	op, err := decodeOp(req)
	if err == nil && (op.read != nil || op.wait > 0) {
		// A read or a wait is bounded here. A write that does not wait
		// needs no timer of its own: the caller cancels it over the link
		// when its own time is up, waiting for a ready leader is bounded
		// by the leader wait, and a proposal by the node's propose timeout.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.cfg.RequestTimeout+op.wait)
		defer cancel()
	}
	if err != nil {
		res = refused(Fail(KindInvalid, "malformed forwarded operation", nil))
	} else if local, _, bad := s.LeaderTarget(ctx, true); bad != nil {
		res = opResult{refusal: bad}
	} else if local {
		res = s.execute(ctx, op)
	}
	b, err := res.encode(dst)
	if err != nil {
		b, _ = refused(Fail(KindInternal, "internal error: the answer could not be encoded", nil)).encode(dst[:0])
	}
	return b
}
