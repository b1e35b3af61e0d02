package cluster

import (
	"crypto/tls"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/pki/pkitest"
	"github.com/holdfast/holdfast/internal/testutil"
	"github.com/holdfast/holdfast/internal/tlsconf"
)

func testPeer(t *testing.T, p *pkitest.PKI, id string) *tlsconf.Peer {
	t.Helper()
	f := p.Node(id)
	peer, err := tlsconf.NewPeer(tlsconf.Files{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return peer
}

// startStream runs a TLS stream layer for peer on a loopback port that
// accepts and echoes one line per connection; logs collect its log lines.
func startStream(t *testing.T, peer *tlsconf.Peer, logs io.Writer) *tlsStream {
	t.Helper()
	s, err := newTLSStream("127.0.0.1:0", "", peer, hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	go func() {
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				b := make([]byte, 5)
				if _, err := io.ReadFull(c, b); err == nil {
					_, _ = c.Write(b)
				}
			}()
		}
	}()
	return s
}

func expectAt(ids ...string) func(raft.ServerAddress) []string {
	return func(raft.ServerAddress) []string { return ids }
}

func echo(t *testing.T, c net.Conn) error {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hello")); err != nil {
		return err
	}
	b := make([]byte, 5)
	_, err := io.ReadFull(c, b)
	return err
}

func TestTLSStreamConnectsMembersByNodeIDAndRefusesTheWrongNode(t *testing.T) {
	p := pkitest.New(t, "cluster CA")
	n1, n2 := testPeer(t, p, "n1"), testPeer(t, p, "n2")
	server := startStream(t, n2, io.Discard)
	client := startStream(t, n1, io.Discard)
	addr := raft.ServerAddress(server.Addr().String())

	client.setExpected(expectAt("n2"))
	c, err := client.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("n1 dialing n2: %v", err)
	}
	if err := echo(t, c); err != nil {
		t.Fatalf("n1 talking to n2: %v", err)
	}

	// n2's certificate is valid, but the address belongs to n3.
	client.setExpected(expectAt("n3"))
	if c, err := client.Dial(addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatal("n2's certificate was accepted for n3's address")
	}
	// An address no member has is never dialled.
	client.setExpected(expectAt())
	if c, err := client.Dial(addr, 5*time.Second); err == nil {
		c.Close()
		t.Fatal("an address of no member was dialled")
	}
}

func TestTLSStreamRefusesStrangersAndLogsOnceAMinutePerSource(t *testing.T) {
	p := pkitest.New(t, "cluster CA")
	logs := &testutil.SyncBuffer{}
	server := startStream(t, testPeer(t, p, "n2"), logs)
	addr := server.Addr().String()

	// Plain TCP and garbage: closed without an answer.
	for i := range 5 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = c.Write([]byte(strings.Repeat("GET / HTTP/1.1\r\n\r\n", i+1)))
		if n, err := c.Read(make([]byte, 64)); err == nil && n > 0 {
			// A TLS alert may come back; the connection must then close.
			if _, err := io.ReadAll(c); err != nil && !isClosedErr(err) {
				t.Fatalf("garbage connection %d: %v", i, err)
			}
		}
		c.Close()
	}
	// A node certificate of another CA, and a client certificate of this one.
	stranger := testPeer(t, pkitest.New(t, "other CA"), "n1")
	alice := p.Client("alice").Pair(t)
	for name, cfg := range map[string]*tls.Config{
		"another CA's node": stranger.RaftClientConfig([]string{"n2"}),
		"a client certificate": {InsecureSkipVerify: true, Certificates: []tls.Certificate{alice}, //nolint:gosec
			NextProtos: []string{tlsconf.RaftALPN}},
	} {
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
		if err == nil {
			err = echo(t, c)
		}
		if err == nil {
			t.Fatalf("%s completed a handshake and was served", name)
		}
	}
	// The layer still serves a member after all that.
	member := startStream(t, testPeer(t, p, "n1"), io.Discard)
	member.setExpected(expectAt("n2"))
	c, err := member.Dial(raft.ServerAddress(addr), 5*time.Second)
	if err == nil {
		err = echo(t, c)
	}
	if err != nil {
		t.Fatalf("a member after the refusals: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "refused a connection") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "refused a connection"); n != 1 {
		t.Fatalf("%d log lines for refusals from one source within a minute, want 1:\n%s", n, logs)
	}
}

func isClosedErr(err error) bool {
	return strings.Contains(err.Error(), "reset") || strings.Contains(err.Error(), "closed")
}

func TestRefusalLogAllowsOneLineAMinutePerSource(t *testing.T) {
	var l refusalLog
	t0 := time.Unix(1000, 0)
	if _, ok := l.allow("a", t0); !ok {
		t.Fatal("first refusal not logged")
	}
	for i := 1; i <= 3; i++ {
		if _, ok := l.allow("a", t0.Add(time.Duration(i)*time.Second)); ok {
			t.Fatal("a second line within the minute")
		}
	}
	if _, ok := l.allow("b", t0.Add(time.Second)); !ok {
		t.Fatal("another source was not logged")
	}
	if n, ok := l.allow("a", t0.Add(time.Minute+time.Second)); !ok || n != 3 {
		t.Fatalf("after a minute: logged %v, %d suppressed (want 3)", ok, n)
	}
}

// freePort returns a loopback TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestAdvertisedRaftAddressIsKeptAsGiven(t *testing.T) {
	specific, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer specific.Close()
	wild, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer wild.Close()
	if a, err := advertiseAddr(specific, ""); err != nil || a.String() != specific.Addr().String() {
		t.Errorf("no advertise on %s: %v %v", specific.Addr(), a, err)
	}
	if _, err := advertiseAddr(wild, ""); err == nil || !strings.Contains(err.Error(), "--raft-advertise") {
		t.Errorf("no advertise on the wildcard address: %v", err)
	}
	for _, name := range []string{"holdfast-0.holdfast-peers.default.svc.cluster.local:7071", "10.0.0.7:7071", "[fd00::7]:7071"} {
		if a, err := advertiseAddr(wild, name); err != nil || a.String() != name || a.Network() != "tcp" {
			t.Errorf("advertise %s: %v %v", name, a, err)
		}
	}
	for _, bad := range []string{"0.0.0.0:7071", "[::]:7071", "holdfast-0", ":7071", "host:"} {
		if _, err := advertiseAddr(wild, bad); err == nil {
			t.Errorf("advertise %q accepted", bad)
		}
	}
}

// TestDialWaitsForAPeerToListen: a dial to a name whose peer is not
// listening yet keeps trying until it is, within its timeout, and gives up
// at once when the node stops.
func TestDialWaitsForAPeerToListen(t *testing.T) {
	done := make(chan struct{})
	s, err := newTCPStream("127.0.0.1:0", "", done)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	port := freePort(t)
	target := raft.ServerAddress(net.JoinHostPort("localhost", strconv.Itoa(port)))
	got := make(chan error, 1)
	go func() {
		c, err := s.Dial(target, 20*time.Second)
		if err == nil {
			c.Close()
		}
		got <- err
	}()
	time.Sleep(3 * dialRetryInterval)
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := <-got; err != nil {
		t.Fatalf("the dial gave up on a peer that came up: %v", err)
	}

	stopped := make(chan error, 1)
	nobody := raft.ServerAddress(net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))))
	go func() {
		_, err := s.Dial(nobody, time.Hour)
		stopped <- err
	}()
	time.Sleep(3 * dialRetryInterval)
	close(done)
	select {
	case err := <-stopped:
		if err == nil {
			t.Fatal("a dial to a port nobody listens on succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a dial went on after the node stopped")
	}
}
