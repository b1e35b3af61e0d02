package service

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/peerlink"
)

// LinkDialer opens a peer link to the node at addr. The HTTP layer
// implements it: a link is an HTTP request upgraded to the link protocol.
// An error wrapping ErrLinkRefused says the node refused this one a link.
type LinkDialer interface {
	DialLink(ctx context.Context, addr string) (*peerlink.Client, error)
}

// Config configures a Service.
type Config struct {
	// Node is the cluster node the service runs on.
	Node *cluster.Node
	// Logger is the logger the service logs to.
	Logger hclog.Logger
	// LeaderWait is how long an operation waits for a leader during an
	// election before it is refused (default 3 s).
	LeaderWait time.Duration
	// RequestTimeout bounds the work of one operation the leader runs for
	// another node, proposals included (default 10 s).
	RequestTimeout time.Duration
	// Dialer opens peer links to the leader.
	Dialer LinkDialer
}

// Service runs the API's operations on one node: it checks their rules and
// runs them on the leader, here or through the peer link.
type Service struct {
	cfg   Config
	node  *cluster.Node
	log   hclog.Logger
	links *linkManager
	waits *waitRooms
}

// WithDefaults returns cfg with its zero fields set to their defaults: no
// logging, a 3 s wait for a leader and a 10 s request timeout.
func (cfg Config) WithDefaults() Config {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.LeaderWait <= 0 {
		cfg.LeaderWait = 3 * time.Second
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 10 * time.Second
	}
	return cfg
}

// New starts the service for cfg.Node; Close stops it.
func New(cfg Config) *Service {
	cfg = cfg.WithDefaults()
	s := &Service{cfg: cfg, node: cfg.Node, log: cfg.Logger, waits: newWaitRooms()}
	s.links = newLinkManager(s)
	return s
}

// Close closes the peer link to the leader and every link served, and
// waits for them.
func (s *Service) Close() { s.links.close() }

// RegisterMetrics adds the waiting requests and the hand-overs to reg.
func (s *Service) RegisterMetrics(reg *prometheus.Registry) { s.waits.register(reg) }

// RESTForwardTarget says whether an API request the HTTP layer received
// must reach the leader as a REST request instead of through the service:
// only when this node does not lead, the request was not forwarded to it
// already, and the leader refused this node a peer link lately. leaderHTTP
// is then the leader's HTTP address ("" when the service runs the request),
// and bad the failure when it can run nowhere.
func (s *Service) RESTForwardTarget(ctx context.Context, forwarded bool) (leaderHTTP string, bad *Error) {
	if forwarded || s.node.IsLeader() || s.links.usable() {
		return "", nil
	}
	_, leaderHTTP, bad = s.LeaderTarget(ctx, false)
	return leaderHTTP, bad
}

// callerDeadlineKey holds, in a context, the time by which a node waiting
// for a leader stops waiting.
type callerDeadlineKey struct{}

// WithCallerDeadline returns ctx carrying the time by which waiting for a
// leader ends: the caller's own timeout less the time its answer needs to
// travel back.
func WithCallerDeadline(ctx context.Context, until time.Time) context.Context {
	return context.WithValue(ctx, callerDeadlineKey{}, until)
}

// CallerDeadline is the deadline WithCallerDeadline put into ctx.
func CallerDeadline(ctx context.Context) (time.Time, bool) {
	d, ok := ctx.Value(callerDeadlineKey{}).(time.Time)
	return d, ok
}

// forwardedKey marks the context of a request a proven peer forwarded as a
// REST request: its operations run on this node or nowhere.
type forwardedKey struct{}

// WithForwarded marks ctx as a request a proven peer forwarded: its
// operations run on this node or nowhere (one hop only).
func WithForwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, true)
}

// leaderWaitUntil is when waiting for a leader (or for this leader to be
// ready) ends: after LeaderWait, or earlier at the caller's deadline.
func (s *Service) leaderWaitUntil(ctx context.Context) time.Time {
	until := time.Now().Add(s.cfg.LeaderWait)
	if d, ok := CallerDeadline(ctx); ok && d.Before(until) {
		return d
	}
	return until
}

// lead runs op where it must run: here on the ready leader, or on the
// leader through the peer link.
func (s *Service) lead(ctx context.Context, op *leaderOp) opResult {
	forwarded, _ := ctx.Value(forwardedKey{}).(bool)
	local, addr, bad := s.LeaderTarget(ctx, forwarded)
	switch {
	case bad != nil:
		return opResult{refusal: bad}
	case local:
		return s.execute(ctx, op)
	}
	return s.links.call(ctx, addr, op)
}

// LeaderTarget decides where a leader-only request runs: here (local), or
// at the leader's HTTP address. bad is the failure when it can run
// nowhere. A request that was already forwarded once is never sent on
// again.
func (s *Service) LeaderTarget(ctx context.Context, forwarded bool) (local bool, leaderHTTP string, bad *Error) {
	if !s.node.IsLeader() {
		if forwarded {
			// One hop only: leadership moved while the request travelled.
			return false, "", NotApplied("leadership changed while the request was forwarded; nothing was changed, retry")
		}
		if addr := s.waitForLeader(ctx); addr != "" {
			return false, addr, nil
		}
		if !s.node.IsLeader() {
			// A node whose own log cannot be written stays out of
			// elections: that, not an election, is what to report.
			if se := s.node.WriteFault(); se != nil {
				return false, "", StorageError(se)
			}
			return false, "", NotApplied("no leader is available (election in progress or no quorum); nothing was changed, retry shortly")
		}
	}
	// A new leader serves only once it has applied its predecessors'
	// entries: until then its settings and records may be stale, and a
	// request would be judged against them.
	if s.waitReady(ctx) {
		return true, "", nil
	}
	return false, "", NotApplied("the leader is still catching up with its term, or leadership moved; nothing was changed, retry shortly")
}

// waitReady waits, until leaderWaitUntil, for this node to be a ready
// leader. It returns false at once if the node stops leading.
func (s *Service) waitReady(ctx context.Context) bool {
	if s.node.IsReadyLeader() {
		return true
	}
	deadline := s.leaderWaitUntil(ctx)
	for !s.node.IsReadyLeader() {
		if !s.node.IsLeader() || time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
	return true
}

// waitForLeader polls for a leader's HTTP address until leaderWaitUntil.
// It returns "" if none is found or this node became the leader.
func (s *Service) waitForLeader(ctx context.Context) string {
	deadline := s.leaderWaitUntil(ctx)
	for {
		if s.node.IsLeader() {
			return ""
		}
		if id, _ := s.node.Leader(); id != "" && id != s.node.ID() {
			if addr := s.node.LeaderDialAddr(); addr != "" {
				return addr
			}
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
