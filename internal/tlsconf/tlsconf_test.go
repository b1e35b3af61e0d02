package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/internal/pki/pkitest"
	"github.com/holdfast/holdfast/internal/testutil"
)

// files converts test files to a Source's.
func files(f pkitest.Files) Files { return Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA} }

func testLogger(w *testutil.SyncBuffer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: w, Level: hclog.Info})
}

func TestSourceFollowsItsFilesAndKeepsTheOldPairWhenTheNewOneIsBroken(t *testing.T) {
	p := pkitest.New(t, "ca")
	f := files(p.Node("n1"))
	logs := &testutil.SyncBuffer{}
	src, err := NewSource("api", f, testLogger(logs), nil)
	if err != nil {
		t.Fatal(err)
	}
	first := src.Leaf().SerialNumber

	src.CheckFiles()
	if src.Leaf().SerialNumber.Cmp(first) != 0 {
		t.Fatal("unchanged files were reloaded into another certificate")
	}

	files(p.Node("n1")) // a new pair under the same names
	src.CheckFiles()
	second := src.Leaf().SerialNumber
	if second.Cmp(first) == 0 {
		t.Fatal("a rotated pair was not picked up")
	}

	// A key that does not match the certificate: the previous pair stays,
	// and the failure is logged once however often the files are checked.
	other, err := p.CA.IssueNode("n1", []string{"127.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	bad := p.Write("other", other)
	if err := os.Rename(bad.Key, f.KeyFile); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		src.CheckFiles()
	}
	if src.Leaf().SerialNumber.Cmp(second) != 0 {
		t.Fatal("a broken pair replaced the working one")
	}
	if n := strings.Count(logs.String(), "do not load"); n != 1 {
		t.Fatalf("broken pair logged %d times, want once:\n%s", n, logs)
	}
	if err := src.Reload(); err == nil {
		t.Fatal("a forced reload of a broken pair reported success")
	}
	if strings.Contains(logs.String(), "PRIVATE KEY") {
		t.Fatal("key material in the log")
	}
}

func TestPeerRefusesCertificatesThatAreNotNodesOfItsCA(t *testing.T) {
	p := pkitest.New(t, "ca")
	peer, err := NewPeer(files(p.Node("n1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if peer.NodeID() != "n1" {
		t.Fatalf("NodeID = %q", peer.NodeID())
	}
	if _, err := NewPeer(files(p.Client("alice")), nil); err == nil {
		t.Fatal("a client certificate was accepted as a node certificate")
	}
	leaf := func(f Files) []*x509.Certificate {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		c, _ := x509.ParseCertificate(pair.Certificate[0])
		return []*x509.Certificate{c}
	}
	if id, err := peer.Identify(leaf(files(p.Node("n2"))), x509.ExtKeyUsageClientAuth); err != nil || id != "n2" {
		t.Fatalf("a node of the CA: %q, %v", id, err)
	}
	if _, err := peer.Identify(leaf(files(p.Client("bob"))), x509.ExtKeyUsageClientAuth); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("a client certificate was taken for a peer: %v", err)
	}
	stranger := pkitest.New(t, "other ca")
	if _, err := peer.Identify(leaf(files(stranger.Node("n2"))), x509.ExtKeyUsageClientAuth); !errors.Is(err, ErrNotVerified) {
		t.Fatalf("a node certificate of another CA was taken for a peer: %v", err)
	}
	// The peer certificate of a node cannot be swapped for another node's.
	p.Write("n1", p.Issue("n9"))
	if err := peer.Source().Reload(); err == nil || peer.NodeID() != "n1" {
		t.Fatalf("a certificate naming another node replaced n1's: %v", err)
	}
}

// handshake runs one TLS handshake between server and client configs over
// loopback, then one byte each way, and returns the connection state the
// client saw and each side's error. (In TLS 1.3 a client learns that the
// server refused its certificate only when it next reads.)
func handshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, error, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		tc := tls.Server(c, server)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err = tc.Handshake(); err == nil {
			b := make([]byte, 1)
			if _, err = tc.Read(b); err == nil {
				_, err = tc.Write(b)
			}
		}
		srvErr <- err
	}()
	var st tls.ConnectionState
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", ln.Addr().String(), client)
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		st = c.ConnectionState()
		if _, err = c.Write([]byte{1}); err == nil {
			_, err = c.Read(make([]byte, 1))
		}
		c.Close()
	}
	return st, err, <-srvErr
}

func TestAPIConfigOffersHTTP2AndChecksClientCertificates(t *testing.T) {
	p := pkitest.New(t, "ca")
	cert, err := NewSource("api", files(p.Node("n1")), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := NewSource("client CA", Files{CAFile: p.CAFile()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(p.CA.CertPEM())
	pair := func(f Files) []tls.Certificate {
		kp, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{kp}
	}
	alice := pair(files(p.Client("alice")))

	plain, err := NewAPI(cert, nil, ClientAuthNone, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, cerr, _ := handshake(t, plain.Config(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2", "http/1.1"}})
	if cerr != nil || st.NegotiatedProtocol != "h2" {
		t.Fatalf("HTTP/2 by ALPN: %q, %v", st.NegotiatedProtocol, cerr)
	}
	if _, cerr, _ := handshake(t, plain.Config(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MaxVersion: tls.VersionTLS11, MinVersion: tls.VersionTLS10}); cerr == nil {
		t.Fatal("TLS 1.1 was accepted")
	}

	require, err := NewAPI(cert, clientCA, ClientAuthRequire, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, cerr, serr := handshake(t, require.Config(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}); cerr == nil && serr == nil {
		t.Fatal("require: a client without a certificate got through")
	}
	if _, cerr, serr := handshake(t, require.Config(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: alice}); cerr != nil || serr != nil {
		t.Fatalf("require: a client certificate of the CA was refused: %v / %v", cerr, serr)
	}
	stranger := pair(files(pkitest.New(t, "other").Client("mallory")))
	ifGiven, err := NewAPI(cert, clientCA, ClientAuthVerifyIfGiven, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, cerr, serr := handshake(t, ifGiven.Config(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}); cerr != nil || serr != nil {
		t.Fatalf("verify-if-given: a client without a certificate was refused: %v / %v", cerr, serr)
	}
	// GetClientCertificate sends the certificate whatever CAs the server
	// names (with Certificates, Go would quietly send none).
	sendStranger := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger[0], nil }
	if _, cerr, serr := handshake(t, ifGiven.Config(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", GetClientCertificate: sendStranger}); cerr == nil && serr == nil {
		t.Fatal("verify-if-given: a certificate of another CA got through")
	}
	if _, err := NewAPI(cert, nil, ClientAuthRequire, nil); err == nil {
		t.Fatal("require without a CA was accepted")
	}
}

func TestAPICertificateOfAPeerNodeMustComeFromThePeerCA(t *testing.T) {
	p := pkitest.New(t, "ca")
	peer, err := NewPeer(files(p.Node("n1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewSource("api", files(pkitest.New(t, "public").Node("n1")), nil, IssuedByPeerCA(peer)); err == nil {
		t.Fatal("an API certificate of another CA was accepted beside a peer CA")
	}
	if _, err := NewSource("api", files(p.Node("n1-api")), nil, IssuedByPeerCA(peer)); err != nil {
		t.Fatalf("an API certificate of the peer CA was refused: %v", err)
	}
}

func TestRaftConfigsBindTheNodeIDNotTheHostName(t *testing.T) {
	p := pkitest.New(t, "ca")
	n1, err := NewPeer(files(p.Node("n1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	n2, err := NewPeer(files(p.Node("n2")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, cerr, serr := handshake(t, n2.RaftServerConfig(), n1.RaftClientConfig([]string{"n2"})); cerr != nil || serr != nil {
		t.Fatalf("n1 dialing n2: %v / %v", cerr, serr)
	}
	// n2's valid certificate at an address that belongs to n3.
	if _, cerr, _ := handshake(t, n2.RaftServerConfig(), n1.RaftClientConfig([]string{"n3"})); !errors.Is(cerr, ErrNotVerified) {
		t.Fatalf("n2's certificate was accepted for n3: %v", cerr)
	}
	// A client without a node certificate of the CA.
	alice := p.Client("alice").Pair(t)
	client := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{alice}, NextProtos: []string{RaftALPN}} //nolint:gosec
	if _, cerr, serr := handshake(t, n2.RaftServerConfig(), client); cerr == nil && serr == nil {
		t.Fatal("a client certificate completed a handshake with the Raft listener")
	}
	// An HTTP client (other ALPN) is refused by the Raft listener.
	httpClient := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}} //nolint:gosec
	if _, cerr, serr := handshake(t, n2.RaftServerConfig(), httpClient); cerr == nil && serr == nil {
		t.Fatal("an HTTP client completed a handshake with the Raft listener")
	}
}

// TestDialHTTPVerifiesAgainstTheNameLookedUp: an address a DNS join entry
// resolved to is verified against the name looked up, which the server's
// certificate names, not against the IP dialled, which it cannot.
func TestDialHTTPVerifiesAgainstTheNameLookedUp(t *testing.T) {
	p := pkitest.New(t, "ca")
	const service = "holdfast-peers.default.svc.cluster.local"
	kp, err := p.CA.IssueNode("api", []string{service}, 0)
	if err != nil {
		t.Fatal(err)
	}
	serverPair := p.Write("api", kp).Pair(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{serverPair}})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	peer, err := NewPeer(files(p.Node("n1")), nil)
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx := t.Context()
	if c, err := peer.DialHTTP(ctx, "tcp", addr); err == nil {
		c.Close()
		t.Fatal("a certificate that does not name 127.0.0.1 was accepted for it")
	}
	c, err := peer.DialHTTP(WithServerName(ctx, service), "tcp", addr)
	if err != nil {
		t.Fatalf("verified against %s: %v", service, err)
	}
	c.Close()
	if c, err := peer.DialHTTP(WithServerName(ctx, "other.default.svc.cluster.local"), "tcp", addr); err == nil {
		c.Close()
		t.Fatal("a certificate was accepted for a name it does not have")
	}
}
