//go:build unix

package test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/holdfast/holdfast/test/harness"
)

// TestTLSCluster forms a three-node cluster whose nodes hold certificates
// made with `holdfast tls` at test time: every link between nodes is mutual
// TLS and the HTTP listeners serve HTTPS with the node certificates.
func TestTLSCluster(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{TLS: true})
	follower := harness.Except(c.Nodes(), leader)[0]
	ca := c.PKI().CAFile()

	t.Run("REST through a follower over HTTPS, HTTP/2 by ALPN", func(t *testing.T) {
		ns := mintNamespace(t, follower)
		r, err := follower.PostJSON("/services/v1/lease", map[string]any{"namespace": ns, "key": "tls-key", "ttl_seconds": 30}, "")
		if err != nil || r.Status != http.StatusCreated {
			t.Fatalf("acquire via the follower: %v %v", r, err)
		}
		resp, err := c.Client().Get(follower.URL("/healthz"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.Proto != "HTTP/2.0" || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			t.Fatalf("healthz: %s over %v, want HTTP/2 over TLS 1.2+", resp.Proto, resp.TLS)
		}
	})

	t.Run("MCP through a follower over HTTPS", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		tr := &mcp.StreamableClientTransport{Endpoint: follower.URL("/mcp"), DisableStandaloneSSE: true, HTTPClient: c.Client()}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "holdfast-tls-test", Version: "1"}, nil).Connect(ctx, tr, nil)
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "create_agent_queue", Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			HTTPStatus int    `json:"http_status"`
			QueueID    string `json:"queue_id"`
		}
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, &out); err != nil || out.HTTPStatus != http.StatusCreated || out.QueueID == "" {
			t.Fatalf("create_agent_queue via the follower: %s", b)
		}
	})

	t.Run("the example worker over HTTPS", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, env.Binary, "example-worker", "--addr", follower.HTTPAddr, "--ca-file", ca, "--timeout", "45s").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "is completed; queue counts: completed=1 total=1") {
			t.Fatalf("example-worker --ca-file: %v\n%s", err, out)
		}
	})

	t.Run("plain HTTP and strangers' CAs are refused", func(t *testing.T) {
		resp, err := http.Get("http://" + follower.HTTPAddr + "/healthz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 400 || strings.Contains(string(b), `"ok":true`) {
				t.Fatalf("plain HTTP was served: %d %s", resp.StatusCode, b)
			}
		}
		other := otherPKI(t)
		cfg, err := harness.ClientTLS(other.CAFile(), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := harness.NewTLSClient(cfg, 10*time.Second).Get(follower.URL("/healthz")); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("a client trusting another CA: %v, want a certificate error", err)
		}
	})

	t.Run("another CA's certificate reaches neither Raft nor join", func(t *testing.T) {
		stranger, err := otherPKI(t).Node("node3")
		if err != nil {
			t.Fatal(err)
		}
		pair := loadPair(t, stranger)
		for _, n := range c.Nodes() {
			cfg := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"holdfast-raft/1"}, //nolint:gosec
				GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
			if err := raftHandshake(n.RaftAddr, cfg); err == nil {
				t.Fatalf("a node certificate of another CA completed a handshake with %s's Raft port", n.ID)
			}
		}
		join := map[string]any{"node_id": "node3", "raft_addr": "127.0.0.1:1", "http_addr": "127.0.0.1:2"}
		rootCfg, err := harness.ClientTLS(ca, nil)
		if err != nil {
			t.Fatal(err)
		}
		rootCfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
		r, err := follower.DoWith(context.Background(), harness.NewTLSClient(rootCfg, 10*time.Second),
			harness.Request{Method: http.MethodPost, Path: "/cluster/join", JSON: join})
		if err == nil {
			t.Fatalf("join with another CA's certificate got an answer: %s", r)
		}
		// Without a certificate, with a client certificate of the cluster's
		// CA, or with a valid node certificate of another node: 403.
		alice, err := c.PKI().Client("alice")
		if err != nil {
			t.Fatal(err)
		}
		node0 := c.Node(0).TLS
		for name, client := range map[string]*harness.TLSFiles{"no certificate": nil, "a client certificate": &alice, "node0's certificate": &node0} {
			cfg, err := harness.ClientTLS(ca, client)
			if err != nil {
				t.Fatal(err)
			}
			r, err := follower.DoWith(context.Background(), harness.NewTLSClient(cfg, 10*time.Second),
				harness.Request{Method: http.MethodPost, Path: "/cluster/join", JSON: join})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != http.StatusForbidden {
				t.Fatalf("join as node3 with %s: %s, want 403", name, r)
			}
		}
		s, err := leader.Status()
		if err != nil || len(s.Nodes) != 3 {
			t.Fatalf("membership after refused joins: %v %v", s.Nodes, err)
		}
	})

	t.Run("garbage at the Raft ports never disturbs the cluster", func(t *testing.T) {
		ns := mintNamespace(t, follower)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, n := range c.Nodes() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if conn, err := net.DialTimeout("tcp", n.RaftAddr, time.Second); err == nil {
						_ = conn.SetDeadline(time.Now().Add(time.Second))
						_, _ = fmt.Fprintf(conn, "GET /%d HTTP/1.1\r\n\r\n\x16\x03\x01garbage", i)
						_, _ = io.Copy(io.Discard, conn)
						conn.Close()
					}
				}
			}()
		}
		for i := range 30 {
			r, err := follower.PostJSON("/services/v1/lease", map[string]any{"namespace": ns, "key": fmt.Sprintf("garbage-%d", i), "ttl_seconds": 30}, "")
			if err != nil || r.Status != http.StatusCreated {
				close(stop)
				wg.Wait()
				t.Fatalf("write %d while the Raft ports took garbage: %v %v", i, r, err)
			}
		}
		close(stop)
		wg.Wait()
		re := regexp.MustCompile(`refused a connection to the raft port`)
		for _, n := range c.Nodes() {
			if got := len(n.LogMatches(re)); got != 1 {
				t.Fatalf("%s logged %d refusals from one source within a minute, want exactly 1", n.ID, got)
			}
		}
	})

	t.Run("certificate files are re-read without a restart", func(t *testing.T) {
		n := follower
		before := servedSerial(t, n, ca)
		fresh, err := c.PKI().NodeIn(t.TempDir(), n.ID)
		if err != nil {
			t.Fatal(err)
		}
		// A broken pair first (a key that is not the certificate's): logged,
		// and the old pair kept.
		other, err := c.PKI().NodeIn(t.TempDir(), n.ID)
		if err != nil {
			t.Fatal(err)
		}
		replace(t, fresh.Cert, n.TLS.Cert)
		replace(t, other.Key, n.TLS.Key)
		c.WaitLog(n, regexp.MustCompile(`TLS files changed but do not load; keeping the previous certificate`))
		if got := servedSerial(t, n, ca); got != before {
			t.Fatalf("a broken pair was put in use: serial %s, was %s", got, before)
		}
		replace(t, fresh.Key, n.TLS.Key)
		want := serialOf(t, fresh.Cert)
		c.Eventually("the new certificate in use", func() error {
			if got := servedSerial(t, n, ca); got != want {
				return fmt.Errorf("serial %s, want %s", got, want)
			}
			return nil
		})
		// SIGHUP re-reads the files now, and leaves the node running.
		if err := n.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		c.WaitLog(n, regexp.MustCompile(`SIGHUP: re-reading the TLS files`))
		// The rotated node still serves and talks to its peers.
		ns := mintNamespace(t, n)
		c.Eventually("a write through the rotated node", func() error {
			r, err := n.PostJSON("/services/v1/lease", map[string]any{"namespace": ns, "key": "after-rotation", "ttl_seconds": 30}, "")
			if err != nil {
				return err
			}
			if r.Status != http.StatusCreated {
				return fmt.Errorf("%s", r)
			}
			return nil
		})
		c.WaitAllReady()
	})
}

// TestTLSClientCertificateRequired runs a TLS cluster whose HTTP listeners
// require client certificates of the cluster's CA.
func TestTLSClientCertificateRequired(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{TLS: true, TLSClientAuth: true})
	follower := harness.Except(c.Nodes(), leader)[0]
	cfg, err := harness.ClientTLS(c.PKI().CAFile(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := harness.NewTLSClient(cfg, 10*time.Second).Get(follower.URL("/healthz")); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	// The harness's client presents one: a write through a follower is
	// forwarded to the leader over the peer link.
	ns := mintNamespace(t, follower)
	r, err := follower.PostJSON("/services/v1/lease", map[string]any{"namespace": ns, "key": "client-auth", "ttl_seconds": 30}, "")
	if err != nil || r.Status != http.StatusCreated {
		t.Fatalf("acquire via the follower with a client certificate: %v %v", r, err)
	}
}

// TestTLSServeRefusesCertificatesThatDoNotFit starts single nodes with
// certificates that must not be accepted: another node's certificate, and
// an API certificate that is not from the peer CA.
func TestTLSServeRefusesCertificatesThatDoNotFit(t *testing.T) {
	t.Parallel()
	c := env.NewCluster(t, 1, harness.Options{TLS: true})
	n := c.Node(0)
	mine := n.TLS
	other, err := c.PKI().Node("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	public, err := otherPKI(t).Node(n.ID)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		files harness.TLSFiles
		extra []string
		want  string
	}{
		"another node's certificate": {other, nil, "the peer certificate names node"},
		"an API certificate of another CA": {mine, []string{"--tls-cert-file", public.Cert, "--tls-key-file", public.Key},
			"must be issued by the peer CA"},
	} {
		n.TLS = tc.files
		if err := n.Start(tc.extra...); err != nil {
			t.Fatal(err)
		}
		code, err := n.Wait(30 * time.Second)
		if err != nil || code == 0 {
			t.Fatalf("%s: exit %d, %v; want a refusal", name, code, err)
		}
		if !strings.Contains(n.LogSinceStart(), tc.want) {
			t.Fatalf("%s: the log does not say %q:\n%s", name, tc.want, n.LogSinceStart())
		}
	}
	n.TLS = mine
}

// otherPKI is a CA the cluster under test does not trust.
func otherPKI(t *testing.T) *harness.PKI {
	t.Helper()
	p, err := env.NewPKI(filepath.Join(t.TempDir(), "other-ca"))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func loadPair(t *testing.T, f harness.TLSFiles) tls.Certificate {
	t.Helper()
	p, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// raftHandshake completes a TLS handshake with a Raft port and waits for
// the server's verdict on the client certificate (TLS 1.3 sends it after
// the client's handshake is done).
func raftHandshake(addr string, cfg *tls.Config) error {
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil // no alert: the server kept the connection
	}
	return err
}

// servedSerial is the serial number of the certificate n's HTTP listener
// presents to a new connection.
func servedSerial(t *testing.T, n *harness.Node, caFile string) string {
	t.Helper()
	cfg, err := harness.ClientTLS(caFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", n.HTTPAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

func serialOf(t *testing.T, certFile string) string {
	t.Helper()
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s holds no PEM block", certFile)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatalf("parse %s: %v", certFile, err)
	}
	return cert.SerialNumber.String()
}

// replace copies src over dst by rename, as a rotation tool would.
func replace(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := dst + ".new"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		t.Fatal(err)
	}
}

// TestTLSOperatorsWithClusterKey: on a TLS node that also has a cluster
// key, operators call the operator endpoints with the key (no certificate
// needed), and a node certificate proves a peer without it.
func TestTLSOperatorsWithClusterKey(t *testing.T) {
	t.Parallel()
	key := randHex(t, 16)
	c := env.NewCluster(t, 1, harness.Options{TLS: true, ClusterKey: key})
	n := c.Node(0)
	c.Start(n)
	c.WaitLeader()
	c.WaitAllReady()
	patch := harness.Settings{"queue_max_jobs": 42}
	if r, err := n.PutSettings(patch, ""); err != nil || r.Status != http.StatusUnauthorized {
		t.Fatalf("without the key: %v %v, want 401", r, err)
	}
	put(t, n, patch, key)
	peerCfg, err := harness.ClientTLS(c.PKI().CAFile(), &n.TLS)
	if err != nil {
		t.Fatal(err)
	}
	r, err := n.DoWith(context.Background(), harness.NewTLSClient(peerCfg, 10*time.Second),
		harness.Request{Method: http.MethodPut, Path: "/cluster/settings", JSON: harness.Settings{"queue_max_jobs": 43}})
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("with a node certificate and no key: %v %v, want 200", r, err)
	}
}
