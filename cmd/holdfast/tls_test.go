package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/pki"
)

// runTLS runs "holdfast tls args..." and fails the test if anything it
// printed holds key material.
func runTLS(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(append([]string{"tls"}, args...), &out, &errOut)
	for _, s := range []string{out.String(), errOut.String()} {
		if strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, "-----BEGIN") {
			t.Fatalf("holdfast tls %s printed PEM data:\n%s", strings.Join(args, " "), s)
		}
	}
	return code, out.String(), errOut.String()
}

// mustRunTLS runs a tls command that must succeed, and checks that it
// reported the two files it wrote, base.pem and base-key.pem in dir.
func mustRunTLS(t *testing.T, dir, base string, args ...string) {
	t.Helper()
	code, stdout, stderr := runTLS(t, args...)
	if code != 0 || stderr != "" {
		t.Fatalf("holdfast tls %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	certPath, keyPath := filepath.Join(dir, base+".pem"), filepath.Join(dir, base+"-key.pem")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "wrote "+certPath+": ") || !strings.HasPrefix(lines[1], "wrote "+keyPath+": private key") {
		t.Fatalf("holdfast tls %s printed %q; want one line for each of %s and %s", strings.Join(args, " "), stdout, certPath, keyPath)
	}
}

// makeCluster creates a CA, node certificates n1..n3 and a client
// certificate "ops" in dir, as an operator would.
func makeCluster(t *testing.T, dir string) {
	t.Helper()
	mustRunTLS(t, dir, "holdfast-ca", "ca", "create", "--dir", dir)
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("n%d", i)
		mustRunTLS(t, dir, id, "cert", "create", "--node-id", id, "--hosts", fmt.Sprintf("127.0.0.1,node%d.example", i), "--dir", dir)
	}
	mustRunTLS(t, dir, "ops", "cert", "create", "--client", "ops", "--dir", dir)
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("%s holds no certificate", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func loadPair(t *testing.T, dir, base string) tls.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, base+".pem"), filepath.Join(dir, base+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

func caPool(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, filepath.Join(dir, "holdfast-ca.pem")))
	return pool
}

func TestTLSCreatesCAAndCertificates(t *testing.T) {
	dir := t.TempDir()
	makeCluster(t, dir)

	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
		st, err := os.Stat(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		want := os.FileMode(0o644)
		if strings.HasSuffix(e.Name(), "-key.pem") {
			want = 0o600
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s has mode %04o, want %04o", e.Name(), st.Mode().Perm(), want)
		}
	}
	want := []string{"holdfast-ca-key.pem", "holdfast-ca.pem", "n1-key.pem", "n1.pem", "n2-key.pem", "n2.pem", "n3-key.pem", "n3.pem", "ops-key.pem", "ops.pem"}
	if !slices.Equal(names, want) {
		t.Fatalf("files %q, want %q", names, want)
	}

	roots := caPool(t, dir)
	verify := func(c *x509.Certificate, host string, usage x509.ExtKeyUsage) error {
		_, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
		return err
	}
	for i := 1; i <= 3; i++ {
		id, host := fmt.Sprintf("n%d", i), fmt.Sprintf("node%d.example", i)
		c := readCert(t, filepath.Join(dir, id+".pem"))
		if got, err := pki.NodeID(c); err != nil || got != id {
			t.Errorf("NodeID(%s.pem) = %q, %v", id, got, err)
		}
		if !slices.Equal(c.DNSNames, []string{host}) || len(c.IPAddresses) != 1 || !c.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) {
			t.Errorf("%s: DNS names %q, IP addresses %v", id, c.DNSNames, c.IPAddresses)
		}
		if len(c.URIs) != 1 || *c.URIs[0] != *pki.NodeURI(id) {
			t.Errorf("%s: URIs %v", id, c.URIs)
		}
		for _, h := range []string{host, "127.0.0.1"} {
			if err := verify(c, h, x509.ExtKeyUsageServerAuth); err != nil {
				t.Errorf("%s as a server for %s: %v", id, h, err)
			}
		}
		if err := verify(c, "", x509.ExtKeyUsageClientAuth); err != nil {
			t.Errorf("%s as a client: %v", id, err)
		}
	}
	ops := readCert(t, filepath.Join(dir, "ops.pem"))
	if err := verify(ops, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("ops as a client: %v", err)
	}
	if err := verify(ops, "", x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("a client certificate verified as a server")
	}
	if id, err := pki.NodeID(ops); !errors.Is(err, pki.ErrNoNodeID) {
		t.Errorf("the client certificate names node %q (%v)", id, err)
	}
	if ops.Subject.CommonName != "ops" || len(ops.URIs) != 0 {
		t.Errorf("client certificate CN %q, URIs %v", ops.Subject.CommonName, ops.URIs)
	}
}

func TestTLSCACreateRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	mustRunTLS(t, dir, "holdfast-ca", "ca", "create", "--dir", dir)
	paths := []string{filepath.Join(dir, "holdfast-ca.pem"), filepath.Join(dir, "holdfast-ca-key.pem")}
	var before [][]byte
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, b)
	}
	code, stdout, stderr := runTLS(t, "ca", "create", "--dir", dir)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "refusing to overwrite") || !strings.Contains(stderr, "holdfast-ca") {
		t.Fatalf("second ca create: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for i, p := range paths {
		if b, _ := os.ReadFile(p); !bytes.Equal(b, before[i]) {
			t.Errorf("%s changed", p)
		}
	}
	mustRunTLS(t, dir, "n1", "cert", "create", "--node-id", "n1", "--dir", dir)
	if code, _, stderr := runTLS(t, "cert", "create", "--node-id", "n1", "--dir", dir); code != 1 || !strings.Contains(stderr, "refusing to overwrite") {
		t.Fatalf("second cert create: exit %d, stderr %q", code, stderr)
	}
}

func TestTLSRefusals(t *testing.T) {
	dir := t.TempDir()
	mustRunTLS(t, dir, "holdfast-ca", "ca", "create", "--dir", dir)
	empty := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no verb", nil, 2, "holdfast tls ca create"},
		{"unknown verb", []string{"key", "create"}, 2, `unknown command "key create"`},
		{"object without verb", []string{"ca"}, 2, `unknown command "ca"`},
		{"unknown flag", []string{"ca", "create", "--bogus"}, 2, "-bogus"},
		{"stray argument", []string{"ca", "create", "--dir", dir, "extra"}, 2, "unexpected arguments: extra"},
		{"zero days", []string{"ca", "create", "--dir", empty, "--days", "0"}, 2, "--days must be"},
		{"empty CA name", []string{"ca", "create", "--dir", empty, "--name", ""}, 2, "--name"},
		{"neither", []string{"cert", "create", "--dir", dir}, 2, "exactly one of --node-id and --client"},
		{"both", []string{"cert", "create", "--dir", dir, "--node-id", "n1", "--client", "ops"}, 2, "exactly one of --node-id and --client"},
		{"hosts for a client", []string{"cert", "create", "--dir", dir, "--client", "ops", "--hosts", "localhost"}, 2, "--hosts applies only to node certificates"},
		{"missing CA", []string{"cert", "create", "--dir", empty, "--node-id", "n1"}, 1, filepath.Join(empty, "holdfast-ca.pem")},
		{"missing CA key", []string{"cert", "create", "--dir", empty, "--node-id", "n1", "--ca", filepath.Join(dir, "holdfast-ca.pem")}, 1, filepath.Join(empty, "holdfast-ca-key.pem")},
		{"CA key for the certificate", []string{"cert", "create", "--dir", dir, "--node-id", "n1", "--ca", filepath.Join(dir, "holdfast-ca-key.pem")}, 1, "no PEM CERTIFICATE block"},
		{"bad host", []string{"cert", "create", "--dir", dir, "--node-id", "n1", "--hosts", "127.0.0.1,bad_host.example"}, 1, `host "bad_host.example"`},
		{"host with port", []string{"cert", "create", "--dir", dir, "--node-id", "n1", "--hosts", "127.0.0.1:7070"}, 1, `host "127.0.0.1:7070"`},
		{"empty host", []string{"cert", "create", "--dir", dir, "--node-id", "n1", "--hosts", "localhost,"}, 1, "empty host"},
		{"bad node id", []string{"cert", "create", "--dir", dir, "--node-id", "../n1"}, 2, `node id "../n1" is not valid`},
		{"bad client name", []string{"cert", "create", "--dir", dir, "--client", "a/b"}, 2, `client name "a/b" is not valid`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runTLS(t, tc.args...)
			if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.stderr) {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q (want it to contain %q)", code, tc.code, stdout, stderr, tc.stderr)
			}
		})
	}
	if entries, _ := os.ReadDir(empty); len(entries) != 0 {
		t.Errorf("refused commands wrote %d files", len(entries))
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("refused commands wrote %d files next to the CA", len(entries)-2)
	}
	for _, args := range [][]string{{"-h"}, {"ca", "create", "-h"}, {"cert", "create", "-h"}} {
		if code, _, _ := runTLS(t, args...); code != 0 {
			t.Errorf("holdfast tls %s: exit %d, want 0", strings.Join(args, " "), code)
		}
	}
}

// handshake runs one mutual TLS handshake on 127.0.0.1 between a server
// presenting server and trusting serverRoots for client certificates, and a
// client presenting client and trusting clientRoots. It returns the node id
// in the client's certificate as the server saw it, and each side's error.
func handshake(t *testing.T, server tls.Certificate, serverRoots *x509.CertPool, client tls.Certificate, clientRoots *x509.CertPool) (peer string, serverErr, clientErr error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{server},
		ClientCAs:    serverRoots,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type result struct {
		peer string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		tc := conn.(*tls.Conn)
		_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			done <- result{err: err}
			return
		}
		id, err := pki.NodeID(tc.ConnectionState().PeerCertificates[0])
		if err == nil {
			_, err = tc.Write([]byte{1})
		}
		done <- result{peer: id, err: err}
	}()

	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(), &tls.Config{
		// Present the certificate even when the server's list of acceptable
		// CAs does not name its issuer, so that the server must refuse it.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &client, nil },
		RootCAs:              clientRoots,
		MinVersion:           tls.VersionTLS13,
	})
	if err == nil {
		// In TLS 1.3 the server checks the client's certificate after the
		// client's side of the handshake is complete; a refusal arrives as
		// an alert on the first read.
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		_, err = io.ReadFull(conn, make([]byte, 1))
		conn.Close()
	}
	r := <-done
	return r.peer, r.err, err
}

func TestTLSMutualHandshake(t *testing.T) {
	dir, otherDir := t.TempDir(), t.TempDir()
	makeCluster(t, dir)
	// A second cluster, with its own CA, also has a node called n2.
	mustRunTLS(t, otherDir, "holdfast-ca", "ca", "create", "--dir", otherDir, "--name", "other CA")
	mustRunTLS(t, otherDir, "n2", "cert", "create", "--node-id", "n2", "--dir", otherDir)

	roots, otherRoots := caPool(t, dir), caPool(t, otherDir)
	n1, n2, otherN2 := loadPair(t, dir, "n1"), loadPair(t, dir, "n2"), loadPair(t, otherDir, "n2")

	peer, serverErr, clientErr := handshake(t, n1, roots, n2, roots)
	if serverErr != nil || clientErr != nil || peer != "n2" {
		t.Fatalf("n1 serving n2: peer %q, server error %v, client error %v", peer, serverErr, clientErr)
	}

	_, serverErr, clientErr = handshake(t, n1, roots, otherN2, roots)
	if serverErr == nil || clientErr == nil {
		t.Fatalf("a client certificate from another CA: server error %v, client error %v", serverErr, clientErr)
	}
	if !strings.Contains(serverErr.Error(), "unknown authority") {
		t.Errorf("server refused the other CA's client for an unexpected reason: %v", serverErr)
	}

	_, _, clientErr = handshake(t, n1, roots, n2, otherRoots)
	if clientErr == nil || !strings.Contains(clientErr.Error(), "unknown authority") {
		t.Fatalf("a client trusting only another CA accepted n1: %v", clientErr)
	}
}
