package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

func newTestCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("", 0)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func verify(t *testing.T, ca *CA, leaf *x509.Certificate, host string, usage x509.ExtKeyUsage) error {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// checkCommon checks what every certificate this package makes shares.
func checkCommon(t *testing.T, kp *KeyPair, days int) {
	t.Helper()
	c := kp.Cert
	key, ok := kp.Key.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() || c.PublicKeyAlgorithm != x509.ECDSA {
		t.Fatalf("key %T is not ECDSA P-256", kp.Key)
	}
	if !key.PublicKey.Equal(c.PublicKey) {
		t.Fatal("key does not match certificate")
	}
	if c.SerialNumber.Sign() <= 0 || c.SerialNumber.Cmp(new(big.Int).Lsh(big.NewInt(1), 128)) >= 0 {
		t.Fatalf("serial %v is not a positive 128-bit number", c.SerialNumber)
	}
	if len(c.SubjectKeyId) != 20 || len(c.AuthorityKeyId) != 20 {
		t.Fatalf("key ids: subject %x authority %x", c.SubjectKeyId, c.AuthorityKeyId)
	}
	now := time.Now()
	if d := now.Sub(c.NotBefore); d < 59*time.Minute || d > 61*time.Minute {
		t.Fatalf("NotBefore is %v before now, want an hour", d)
	}
	if want := now.AddDate(0, 0, days); c.NotAfter.Sub(want).Abs() > time.Minute {
		t.Fatalf("NotAfter %v, want about %v", c.NotAfter, want)
	}
}

func TestCAConstraints(t *testing.T) {
	ca := newTestCA(t)
	c := ca.Cert
	checkCommon(t, &ca.KeyPair, DefaultCADays)
	if c.Subject.CommonName != "holdfast CA" || DefaultCADays != 1825 {
		t.Fatalf("CA name %q, default days %d", c.Subject.CommonName, DefaultCADays)
	}
	if !c.IsCA || !c.BasicConstraintsValid || !c.MaxPathLenZero || c.MaxPathLen != 0 {
		t.Fatalf("basic constraints: IsCA %v valid %v MaxPathLen %d zero %v", c.IsCA, c.BasicConstraintsValid, c.MaxPathLen, c.MaxPathLenZero)
	}
	if c.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Fatalf("key usage %b", c.KeyUsage)
	}
	if !bytes.Equal(c.AuthorityKeyId, c.SubjectKeyId) {
		t.Fatal("a self-signed CA's authority key id must be its subject key id")
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Fatalf("not self-signed: %v", err)
	}

	named, err := NewCA("ops CA", 30)
	if err != nil {
		t.Fatal(err)
	}
	checkCommon(t, &named.KeyPair, 30)
	if named.Cert.Subject.CommonName != "ops CA" {
		t.Fatalf("CA name %q", named.Cert.Subject.CommonName)
	}
	if named.Cert.SerialNumber.Cmp(c.SerialNumber) == 0 {
		t.Fatal("two CAs share a serial number")
	}
}

func TestCAPathLengthZero(t *testing.T) {
	ca := newTestCA(t)
	// A certificate that itself claims to be a CA must not chain through a
	// path-length-zero CA.
	sub, err := create(&x509.Certificate{Subject: pkix.Name{CommonName: "sub"}, IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}, 30, &ca.KeyPair)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := (&CA{*sub}).IssueNode("n1", []string{"127.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	inter := x509.NewCertPool()
	inter.AddCert(sub.Cert)
	_, err = leaf.Cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	var invalid x509.CertificateInvalidError
	if !errors.As(err, &invalid) || invalid.Reason != x509.TooManyIntermediates {
		t.Fatalf("a chain through an intermediate under a path-length-zero CA: %v", err)
	}
}

func TestNodeCertificate(t *testing.T) {
	ca := newTestCA(t)
	kp, err := ca.IssueNode("n1", []string{"127.0.0.1", "::1", "node1.example", "Localhost", "*.nodes.example", "node1.example", "::ffff:127.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := kp.Cert
	checkCommon(t, kp, DefaultCertDays)
	if c.Subject.CommonName != "n1" || c.IsCA {
		t.Fatalf("CN %q IsCA %v", c.Subject.CommonName, c.IsCA)
	}
	if c.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Fatalf("key usage %b", c.KeyUsage)
	}
	if len(c.ExtKeyUsage) != 2 || c.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || c.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("ext key usage %v", c.ExtKeyUsage)
	}
	if !bytes.Equal(c.AuthorityKeyId, ca.Cert.SubjectKeyId) {
		t.Fatal("authority key id is not the CA's subject key id")
	}
	if got := strings.Join(c.DNSNames, ","); got != "node1.example,localhost,*.nodes.example" {
		t.Fatalf("DNS names %q", got)
	}
	if len(c.IPAddresses) != 2 || !c.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || !c.IPAddresses[1].Equal(net.IPv6loopback) {
		t.Fatalf("IP addresses %v", c.IPAddresses)
	}
	if len(c.URIs) != 1 || c.URIs[0].String() != "urn:holdfast:node:n1" {
		t.Fatalf("URIs %v", c.URIs)
	}
	if id, err := NodeID(c); err != nil || id != "n1" {
		t.Fatalf("NodeID = %q, %v", id, err)
	}
	for _, host := range []string{"127.0.0.1", "::1", "node1.example", "localhost", "a.nodes.example"} {
		if err := verify(t, ca, c, host, x509.ExtKeyUsageServerAuth); err != nil {
			t.Errorf("server auth for %s: %v", host, err)
		}
	}
	if err := verify(t, ca, c, "node2.example", x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("verified for a host it does not name")
	}
	if err := verify(t, ca, c, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("client auth: %v", err)
	}
	if err := verify(t, newTestCA(t), c, "127.0.0.1", x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("verified under a different CA")
	}
}

func TestClientCertificate(t *testing.T) {
	ca := newTestCA(t)
	kp, err := ca.IssueClient("ops-alice", 10)
	if err != nil {
		t.Fatal(err)
	}
	c := kp.Cert
	checkCommon(t, kp, 10)
	if c.Subject.CommonName != "ops-alice" || len(c.URIs) != 0 || len(c.DNSNames) != 0 || len(c.IPAddresses) != 0 {
		t.Fatalf("CN %q, SANs %v %v %v", c.Subject.CommonName, c.URIs, c.DNSNames, c.IPAddresses)
	}
	if len(c.ExtKeyUsage) != 1 || c.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Fatalf("ext key usage %v", c.ExtKeyUsage)
	}
	if id, err := NodeID(c); !errors.Is(err, ErrNoNodeID) {
		t.Fatalf("a client certificate names node %q (%v)", id, err)
	}
	if err := verify(t, ca, c, "", x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("client auth: %v", err)
	}
	if err := verify(t, ca, c, "", x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("a client certificate verified for server auth")
	}
}

func TestCertificateEndsWithItsCA(t *testing.T) {
	ca, err := NewCA("short", 2)
	if err != nil {
		t.Fatal(err)
	}
	node, err := ca.IssueNode("n1", []string{"localhost"}, 365)
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.IssueClient("c", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*x509.Certificate{node.Cert, client.Cert} {
		if !c.NotAfter.Equal(ca.Cert.NotAfter) {
			t.Errorf("%s ends %v, after its CA's %v", c.Subject.CommonName, c.NotAfter, ca.Cert.NotAfter)
		}
	}
	short, err := ca.IssueClient("c", 1)
	if err != nil || !short.Cert.NotAfter.Before(ca.Cert.NotAfter) {
		t.Fatalf("a lifetime within the CA's was not kept: %v %v", short.Cert.NotAfter, err)
	}
}

func TestLifetimesAndNames(t *testing.T) {
	ca := newTestCA(t)
	for _, days := range []int{-1, MaxDays + 1} {
		if _, err := NewCA("", days); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("NewCA with %d days: %v", days, err)
		}
		if _, err := ca.IssueClient("c", days); err == nil {
			t.Errorf("IssueClient with %d days accepted", days)
		}
	}
	for _, name := range []string{"bad\nname", "bad\x00name", "\xff", strings.Repeat("x", 257)} {
		if _, err := NewCA(name, 0); err == nil {
			t.Errorf("CA name %q accepted", name)
		}
	}
	if _, err := (&CA{}).IssueClient("c", 0); err == nil {
		t.Error("an empty CA issued a certificate")
	}
	other := newTestCA(t)
	mismatched := &CA{KeyPair{Cert: ca.Cert, Key: other.Key}}
	if _, err := mismatched.IssueClient("c", 0); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Errorf("a CA with another CA's key: %v", err)
	}
	leaf, err := ca.IssueClient("c", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&CA{*leaf}).IssueClient("d", 0); err == nil || !strings.Contains(err.Error(), "not a CA") {
		t.Errorf("a leaf acting as a CA: %v", err)
	}

	// A CA certificate may omit key usage (as "openssl req -x509" does by
	// default); one that has it must allow certificate signing.
	for _, tc := range []struct {
		usage x509.KeyUsage
		ok    bool
	}{{0, true}, {x509.KeyUsageCertSign, true}, {x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature, false}} {
		kp, err := create(&x509.Certificate{Subject: pkix.Name{CommonName: "byo"}, IsCA: true, BasicConstraintsValid: true, KeyUsage: tc.usage}, 30, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = (&CA{*kp}).IssueClient("c", 0)
		if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "key usage") {
			t.Errorf("CA with key usage %b: %v", tc.usage, err)
		}
	}
}

func TestNodeIDRule(t *testing.T) {
	ca := newTestCA(t)
	good := []string{"n1", "N", "0", "node-0a1b2c", "a.b_c-d", "n..", strings.Repeat("a", 128)}
	for _, id := range good {
		if err := ValidateNodeID(id); err != nil {
			t.Errorf("ValidateNodeID(%q): %v", id, err)
		}
	}
	bad := []string{"", ".", "..", "-n", "_n", ".n", "a/b", `a\b`, "a b", "ü", "n:1", "a%2F", strings.Repeat("a", 129)}
	for _, id := range bad {
		err := ValidateNodeID(id)
		if err == nil || !strings.Contains(err.Error(), "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$") || !strings.Contains(err.Error(), "file name") {
			t.Errorf("ValidateNodeID(%q) = %v", id, err)
		}
		if _, err := ca.IssueNode(id, []string{"localhost"}, 0); err == nil {
			t.Errorf("IssueNode(%q) accepted", id)
		}
		if _, err := ca.IssueClient(id, 0); err == nil || !strings.Contains(err.Error(), "client name") {
			t.Errorf("IssueClient(%q) = %v", id, err)
		}
	}
}

func TestBadHostsRejected(t *testing.T) {
	ca := newTestCA(t)
	bad := []string{
		"", " ", "localhost ", "*", "*.", "*.example", "a.*.example", "*.*.example", "node*.example", "**.example",
		"-a.example", "a-.example", "a..example", ".example", "example.", "a_b.example", "ex ample",
		"127.0.0.1:7070", "[::1]", "fe80::1%eth0", "1.2.3", "256.0.0.1", "127.0.0.01",
		strings.Repeat("a", 64) + ".example", strings.Repeat("abcdefghi.", 25) + "example",
		"http://node1.example", "node1.example/x", "ü.example",
	}
	for _, h := range bad {
		if _, err := ca.IssueNode("n1", []string{"localhost", h}, 0); err == nil {
			t.Errorf("host %q accepted", h)
		} else if !strings.Contains(err.Error(), "n1") {
			t.Errorf("host %q: error does not name the node: %v", h, err)
		}
	}
	if _, err := ca.IssueNode("n1", nil, 0); err == nil {
		t.Error("a node certificate without hosts was issued")
	}
	ok := []string{"localhost", "a", "xn--bcher-kva.example", "a-b.c-d.example", "*.a.example", "10.0.0.1", "2001:db8::1", strings.Repeat("a", 63) + ".example"}
	if _, err := ca.IssueNode("n1", ok, 0); err != nil {
		t.Errorf("valid hosts refused: %v", err)
	}
}
