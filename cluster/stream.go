package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/tlsconf"
)

// Bounds of the TLS stream layer.
const (
	// handshakeTimeout bounds one TLS handshake on the Raft port, so a
	// connection that sends nothing is closed.
	handshakeTimeout = 5 * time.Second
	// maxHandshakes bounds handshakes in progress at once; connections
	// beyond it are closed at once, so a flood of idle connections costs
	// bounded memory and never delays the peers' own handshakes for long.
	maxHandshakes = 64
	// refusalLogInterval is how often a refused connection is logged per
	// source address.
	refusalLogInterval = time.Minute
	// maxRefusalSources bounds the per-source log limiter's memory.
	maxRefusalSources = 4096
	// dialAttemptTimeout bounds one attempt to connect to a peer, so a
	// name that still resolves to an address nobody answers at (a pod
	// recreated elsewhere) is looked up again soon.
	dialAttemptTimeout = time.Second
	// dialRetryInterval is the pause between two attempts to dial a peer.
	dialRetryInterval = 100 * time.Millisecond
)

// nameAddr is an advertised Raft address kept as it was given: a DNS name
// stays a name, so peers resolve it again at every dial.
type nameAddr string

// Network is always "tcp".
func (nameAddr) Network() string { return "tcp" }

// String is the host:port as given.
func (a nameAddr) String() string { return string(a) }

// advertiseAddr is the Raft address other nodes dial: advertise when given
// (a host name or an IP, with a port), else the listener's own address,
// which must then be a specific IP.
func advertiseAddr(ln net.Listener, advertise string) (net.Addr, error) {
	if advertise == "" {
		a, ok := ln.Addr().(*net.TCPAddr)
		if !ok || a.IP == nil || a.IP.IsUnspecified() {
			return nil, fmt.Errorf("raft address %s is not advertisable: give --raft-advertise", ln.Addr())
		}
		return a, nil
	}
	host, port, err := net.SplitHostPort(advertise)
	if err != nil || host == "" || port == "" {
		return nil, fmt.Errorf("raft advertise address %q is not host:port", advertise)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %q is not advertisable: it names no host", advertise)
	}
	return nameAddr(advertise), nil
}

// listenAdvertised listens on bind and returns the address to advertise
// for it (advertiseAddr).
func listenAdvertised(bind, advertise string) (net.Listener, net.Addr, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, nil, fmt.Errorf("listen: %w", err)
	}
	adv, err := advertiseAddr(ln, advertise)
	if err != nil {
		_ = ln.Close()
		return nil, nil, err
	}
	return ln, adv, nil
}

// redialer dials a peer again and again until it answers, its timeout
// passes or the node stops. Raft backs off after every failed call to a
// follower, up to ten seconds after a dozen failures, and nothing shortens
// a back-off once it has started: failing at once while a peer restarts
// would leave it unreplicated for seconds after it is back. Each attempt
// resolves the address again, so a member that comes back at a new IP
// under its name is found as soon as the name points there.
type redialer struct {
	done <-chan struct{} // closed when the node stops
}

// dial calls once until it succeeds, fails other than by connectFailed, or
// timeout has passed; once gets a
// context that ends at that deadline and a dialer whose connection attempt
// ends after dialAttemptTimeout.
func (r redialer) dial(address string, timeout time.Duration, once func(ctx context.Context, d *net.Dialer, address string) (net.Conn, error)) (net.Conn, error) {
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	d := &net.Dialer{Timeout: dialAttemptTimeout}
	for {
		c, err := once(ctx, d, address)
		if err == nil || !connectFailed(err) {
			return c, err
		}
		wait := min(dialRetryInterval, time.Until(deadline))
		if wait <= 0 {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.done:
			t.Stop()
			return nil, err
		}
	}
}

// connectFailed reports whether err is a failure to look the peer up or to
// connect to it, which a later attempt may not meet; a failed handshake or
// verification is returned at once.
func connectFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// tcpStream is the Raft transport's stream layer without a peer identity:
// plain TCP, advertising the address as given and dialling through a
// redialer.
type tcpStream struct {
	net.Listener
	advertise net.Addr
	redial    redialer
}

// newTCPStream listens on bind and advertises advertise (see
// advertiseAddr); dials give up when done is closed.
func newTCPStream(bind, advertise string, done <-chan struct{}) (*tcpStream, error) {
	ln, adv, err := listenAdvertised(bind, advertise)
	if err != nil {
		return nil, err
	}
	return &tcpStream{Listener: ln, advertise: adv, redial: redialer{done: done}}, nil
}

// Addr is the advertised Raft address.
func (s *tcpStream) Addr() net.Addr { return s.advertise }

// Dial connects to a peer's Raft address, resolving it at each attempt.
func (s *tcpStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.redial.dial(string(address), timeout, func(ctx context.Context, d *net.Dialer, a string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", a)
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	return c, nil
}

// tlsStream is the Raft transport's stream layer when nodes have a peer
// identity: every connection, in and out, is mutual TLS 1.3 against the
// peer CA. Incoming connections are handshaken off the accept path and only
// verified ones reach Raft; a plain-TCP, garbage or unverified connection is
// closed and logged at most once a minute per source address.
type tlsStream struct {
	ln        net.Listener
	advertise net.Addr
	peer      *tlsconf.Peer
	log       hclog.Logger
	// expected returns the ids of the members that have a Raft address
	// (set once Raft exists; nil refuses every dial).
	expected atomic.Pointer[func(raft.ServerAddress) []string]

	conns   chan net.Conn
	closed  chan struct{}
	once    sync.Once
	slots   chan struct{}
	refused refusalLog
	redial  redialer
}

// newTLSStream listens on bind and advertises advertise (see
// advertiseAddr); dials give up when done is closed.
func newTLSStream(bind, advertise string, peer *tlsconf.Peer, log hclog.Logger, done <-chan struct{}) (*tlsStream, error) {
	ln, adv, err := listenAdvertised(bind, advertise)
	if err != nil {
		return nil, err
	}
	s := &tlsStream{
		ln: ln, advertise: adv, peer: peer, log: log, redial: redialer{done: done},
		conns:  make(chan net.Conn),
		closed: make(chan struct{}),
		slots:  make(chan struct{}, maxHandshakes),
	}
	go s.acceptLoop()
	return s, nil
}

// setExpected installs the lookup from a Raft address to member ids.
func (s *tlsStream) setExpected(f func(raft.ServerAddress) []string) { s.expected.Store(&f) }

func (s *tlsStream) acceptLoop() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Error("raft listener failed", "error", err)
			return
		}
		select {
		case s.slots <- struct{}{}:
			go s.handshake(c)
		default:
			s.refuse(c, errors.New("too many TLS handshakes in progress"))
		}
	}
}

// handshake completes and verifies the TLS handshake of an incoming
// connection and hands it to Raft.
func (s *tlsStream) handshake(raw net.Conn) {
	defer func() { <-s.slots }()
	tc := tls.Server(raw, s.peer.RaftServerConfig())
	ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err == nil && tc.ConnectionState().NegotiatedProtocol != tlsconf.RaftALPN {
		err = fmt.Errorf("client does not speak %s", tlsconf.RaftALPN)
	}
	if err != nil {
		s.refuse(raw, err)
		return
	}
	select {
	case s.conns <- tc:
	case <-s.closed:
		_ = tc.Close()
	}
}

// refuse closes c and logs why, at most once a minute per source address.
func (s *tlsStream) refuse(c net.Conn, why error) {
	_ = c.Close()
	src := remoteHost(c.RemoteAddr())
	if n, ok := s.refused.allow(src, time.Now()); ok {
		s.log.Warn("refused a connection to the raft port: not a verified peer (logged once a minute per source)",
			"source", src, "error", why, "refused_since_last_log", n)
	}
}

func remoteHost(a net.Addr) string {
	if a == nil {
		return "unknown"
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// Accept returns the next verified connection.
func (s *tlsStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close stops listening; connections already handed to Raft are Raft's.
func (s *tlsStream) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closed)
		err = s.ln.Close()
	})
	return err
}

// Addr is the advertised Raft address.
func (s *tlsStream) Addr() net.Addr { return s.advertise }

// Dial connects to a member's Raft address. The server must present a
// certificate from the peer CA that names a member at that address.
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	var ids []string
	if f := s.expected.Load(); f != nil {
		ids = (*f)(address)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("dial %s: no member of the configuration has this raft address", address)
	}
	conf := s.peer.RaftClientConfig(ids)
	c, err := s.redial.dial(string(address), timeout, func(ctx context.Context, d *net.Dialer, a string) (net.Conn, error) {
		td := &tls.Dialer{NetDialer: d, Config: conf}
		return td.DialContext(ctx, "tcp", a)
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s (member %v): %w", address, ids, err)
	}
	return c, nil
}

// refusalLog limits log lines about refused connections to one a minute
// per source, counting the refusals in between.
type refusalLog struct {
	mu      sync.Mutex
	sources map[string]*refusals
}

type refusals struct {
	logged time.Time
	since  int
}

// allow reports whether a refusal from src may be logged now, and how many
// refusals from src were not logged since the last line.
func (l *refusalLog) allow(src string, now time.Time) (int, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sources == nil {
		l.sources = make(map[string]*refusals)
	}
	r, ok := l.sources[src]
	if ok && now.Sub(r.logged) < refusalLogInterval {
		r.since++
		return 0, false
	}
	if !ok {
		if len(l.sources) >= maxRefusalSources {
			for k, v := range l.sources {
				if now.Sub(v.logged) >= refusalLogInterval {
					delete(l.sources, k)
				}
			}
		}
		if len(l.sources) >= maxRefusalSources {
			return 0, false // every slot logged within the minute: stay quiet
		}
		r = &refusals{}
		l.sources[src] = r
	}
	n := r.since
	r.logged, r.since = now, 0
	return n, true
}
