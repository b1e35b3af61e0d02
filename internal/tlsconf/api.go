package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"sync"
)

// ClientAuth says whether the API listener asks clients for certificates.
type ClientAuth string

// The --tls-client-auth values.
const (
	// ClientAuthNone asks for no client certificate (peers' certificates
	// are still verified when the node has a peer CA).
	ClientAuthNone ClientAuth = ""
	// ClientAuthRequire refuses a handshake without a valid client certificate.
	ClientAuthRequire ClientAuth = "require"
	// ClientAuthVerifyIfGiven verifies a client certificate when one is sent.
	ClientAuthVerifyIfGiven ClientAuth = "verify-if-given"
)

// ParseClientAuth parses a --tls-client-auth value.
func ParseClientAuth(s string) (ClientAuth, error) {
	switch a := ClientAuth(s); a {
	case ClientAuthNone, ClientAuthRequire, ClientAuthVerifyIfGiven:
		return a, nil
	}
	return "", fmt.Errorf("must be %q or %q, not %q", ClientAuthRequire, ClientAuthVerifyIfGiven, s)
}

// API is the TLS configuration of the HTTP listener (REST, MCP and the
// operations endpoints): TLS 1.2 or later, HTTP/2 and HTTP/1.1 by ALPN, the
// current server pair, and client certificates verified against the client
// CA and the peer CA, so other nodes' certificates are always checked.
type API struct {
	cert     *Source
	clientCA *Source // nil: no client CA
	peer     *Peer   // nil: no peer CA
	auth     ClientAuth

	mu    sync.Mutex
	key   [3]*material
	built *tls.Config
}

// NewAPI combines the server pair, an optional client CA, the client
// authentication mode and an optional peer identity. auth other than none
// needs a client CA or a peer CA to verify against.
func NewAPI(cert, clientCA *Source, auth ClientAuth, peer *Peer) (*API, error) {
	if cert == nil || cert.Certificate() == nil {
		return nil, fmt.Errorf("API TLS needs a certificate and key")
	}
	if auth != ClientAuthNone && clientCA == nil && peer == nil {
		return nil, fmt.Errorf("--tls-client-auth %s needs --tls-client-ca-file", auth)
	}
	return &API{cert: cert, clientCA: clientCA, peer: peer, auth: auth}, nil
}

// Config is the listener's configuration; each handshake takes the newest
// loaded material through GetConfigForClient.
func (a *API) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return a.current(), nil
		},
	}
}

// current returns the configuration for the sources' current material,
// building it again only when one of them was reloaded.
func (a *API) current() *tls.Config {
	key := [3]*material{a.cert.material()}
	if a.clientCA != nil {
		key[1] = a.clientCA.material()
	}
	if a.peer != nil {
		key[2] = a.peer.src.material()
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.built != nil && key == a.key {
		return a.built
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
		Certificates: []tls.Certificate{*key[0].cert},
	}
	var cas []*x509.Certificate
	for _, m := range key[1:] {
		if m != nil {
			cas = append(cas, m.cas...)
		}
	}
	var pool *x509.CertPool
	if len(cas) > 0 {
		pool = newPool(cas)
	}
	cfg.ClientCAs = pool
	switch {
	case a.auth == ClientAuthRequire:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	case pool != nil:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	default:
		cfg.ClientAuth = tls.NoClientCert
	}
	a.key, a.built = key, cfg
	return cfg
}

// IssuedByPeerCA is the Check for the API pair of a node that also has a
// peer identity: other nodes call this node's HTTP listener and verify it
// against the peer CA, so the API certificate must be issued by that CA.
func IssuedByPeerCA(p *Peer) Check {
	return func(cert *tls.Certificate, _ *x509.CertPool) error {
		if cert == nil {
			return nil
		}
		certs := []*x509.Certificate{cert.Leaf}
		if _, err := verifyChain(certs, p.Pool(), x509.ExtKeyUsageServerAuth); err != nil {
			return fmt.Errorf("the API certificate must be issued by the peer CA, since nodes call each other's HTTP listener (omit --tls-cert-file to serve the API with the node certificate): %w", err)
		}
		return nil
	}
}
