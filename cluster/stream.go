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
)

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
}

// newTLSStream listens on bind. advertise, when not nil, is the address
// other nodes dial; it must be a specific host.
func newTLSStream(bind string, advertise net.Addr, peer *tlsconf.Peer, log hclog.Logger) (*tlsStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if a, ok := advertise.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		_ = ln.Close()
		return nil, fmt.Errorf("raft address %s is not advertisable: give --raft-advertise", advertise)
	}
	s := &tlsStream{
		ln: ln, advertise: advertise, peer: peer, log: log,
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
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: s.peer.RaftClientConfig(ids)}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", string(address))
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
