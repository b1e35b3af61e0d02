package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/internal/pki"
)

// RaftALPN is the ALPN protocol of the Raft transport's TLS connections, so
// a TLS client of another protocol (an HTTP client pointed at the Raft port)
// is refused in the handshake.
const RaftALPN = "holdfast-raft/1"

// Peer is this node's identity on the links between nodes: its node
// certificate, and the peer CA every other node's certificate must chain to.
type Peer struct {
	src    *Source
	nodeID string
}

// NewPeer loads the node certificate, key and peer CA. The certificate must
// chain to the CA for both server and client use and name exactly one node
// (see internal/pki); a reloaded certificate must name the same node.
func NewPeer(files Files, log hclog.Logger) (*Peer, error) {
	if files.CertFile == "" || files.KeyFile == "" || files.CAFile == "" {
		return nil, fmt.Errorf("peer TLS needs a certificate, a key and a CA file")
	}
	p := &Peer{}
	src, err := NewSource("peer", files, log, func(cert *tls.Certificate, pool *x509.CertPool) error {
		id, err := checkNodeCert(cert, pool)
		if err != nil {
			return err
		}
		if p.nodeID == "" {
			p.nodeID = id // the first load, before NewPeer returns
		} else if id != p.nodeID {
			return fmt.Errorf("the new peer certificate names node %q, not %q: a node keeps its identity", id, p.nodeID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	p.src = src
	return p, nil
}

// checkNodeCert checks that cert is a node certificate issued by pool's CA,
// usable on both ends of a connection, and returns the node it names.
func checkNodeCert(cert *tls.Certificate, pool *x509.CertPool) (string, error) {
	certs := []*x509.Certificate{cert.Leaf}
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return "", fmt.Errorf("parse intermediate certificate: %w", err)
		}
		certs = append(certs, c)
	}
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := verifyChain(certs, pool, u); err != nil {
			return "", fmt.Errorf("peer certificate against the peer CA: %w", err)
		}
	}
	id, err := pki.NodeID(cert.Leaf)
	if err != nil {
		return "", fmt.Errorf("peer certificate: %w (make node certificates with `holdfast tls cert create --node-id`)", err)
	}
	return id, nil
}

// NodeID is the node the peer certificate names.
func (p *Peer) NodeID() string { return p.nodeID }

// Source is the peer certificate's source, for reloading and for serving
// the API with the node certificate.
func (p *Peer) Source() *Source { return p.src }

// Pool is the current peer CA pool.
func (p *Peer) Pool() *x509.CertPool { return p.src.Pool() }

// Identify verifies certificates a remote end presented (leaf first)
// against the current peer CA for usage and returns the node the leaf
// names. A certificate from another CA, or one naming no node (a client
// certificate), is not a peer.
func (p *Peer) Identify(certs []*x509.Certificate, usage x509.ExtKeyUsage) (string, error) {
	leaf, err := verifyChain(certs, p.src.Pool(), usage)
	if err != nil {
		return "", err
	}
	id, err := pki.NodeID(leaf)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNotVerified, err)
	}
	return id, nil
}

// certificate hands out the current node certificate to a handshake.
func (p *Peer) certificate() *tls.Certificate { return p.src.Certificate() }

// RaftServerConfig is the Raft listener's configuration: TLS 1.3, the
// Raft ALPN protocol, and a client certificate that chains to the current
// peer CA and names a node, checked in the handshake.
func (p *Peer) RaftServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		NextProtos:     []string{RaftALPN},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return p.certificate(), nil },
		// The chain is verified in VerifyConnection against the pool of
		// the moment, so a reloaded CA applies to the next handshake.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := p.Identify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
			return err
		},
	}
}

// RaftClientConfig is the configuration for dialing a Raft address that
// one of expected ids is known to have: the server's certificate must chain
// to the current peer CA and name one of them. The node id, not the host
// name, is what the certificate is checked for, so a valid certificate of
// another node is refused.
func (p *Peer) RaftClientConfig(expected []string) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		NextProtos:           []string{RaftALPN},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return p.certificate(), nil },
		// Verification is not skipped: VerifyConnection below checks the
		// chain against the peer CA and the node id instead of a host name.
		InsecureSkipVerify: true, //nolint:gosec
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := p.Identify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if !slices.Contains(expected, id) {
				return fmt.Errorf("%w: the certificate names node %q, but this address belongs to %v", ErrNotVerified, id, expected)
			}
			if cs.NegotiatedProtocol != RaftALPN {
				return fmt.Errorf("%w: the server does not speak %s", ErrNotVerified, RaftALPN)
			}
			return nil
		},
	}
}

// HTTPClientConfig is the configuration for HTTPS calls to another node's
// HTTP listener at host: the server is verified against the current peer CA
// for host as any HTTPS client would, and this node presents its node
// certificate, which proves it is a peer.
func (p *Peer) HTTPClientConfig(host string) *tls.Config {
	return &tls.Config{
		MinVersion:           tls.VersionTLS12,
		ServerName:           host,
		RootCAs:              p.src.Pool(),
		NextProtos:           []string{"http/1.1"},
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return p.certificate(), nil },
	}
}

// serverNameKey is the context key of WithServerName.
type serverNameKey struct{}

// WithServerName returns ctx carrying the host name DialHTTP verifies the
// server's certificate against in place of the host it dials: for an
// address found by looking that name up (every address of a headless
// Service), which no certificate can name ahead of time.
func WithServerName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, serverNameKey{}, name)
}

// DialHTTP dials another node's HTTP listener at addr (host:port) over TLS
// with HTTPClientConfig, for an http.Transport's DialTLSContext. The
// certificate must name addr's host, or the name WithServerName put in ctx.
func (p *Peer) DialHTTP(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("peer address %q: %w", addr, err)
	}
	if name, ok := ctx.Value(serverNameKey{}).(string); ok && name != "" {
		host = name
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: p.HTTPClientConfig(host)}
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, fmt.Errorf("TLS dial %s: %w", addr, err)
	}
	return c, nil
}
