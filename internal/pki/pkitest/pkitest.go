package pkitest

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast/holdfast/internal/pki"
)

// Files names a certificate, its key and the CA that issued it.
type Files struct {
	CA, Cert, Key string
}

// Pair loads the certificate and key.
func (f Files) Pair(t testing.TB) tls.Certificate {
	t.Helper()
	p, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// PKI is a CA whose certificate is written to a test directory.
type PKI struct {
	t   testing.TB
	dir string
	// CA issues the certificates.
	CA *pki.CA
}

// New creates a CA named name, writing its certificate to a new temporary
// directory.
func New(t testing.TB, name string) *PKI {
	t.Helper()
	ca, err := pki.NewCA(name, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{t: t, dir: t.TempDir(), CA: ca}
	if err := os.WriteFile(p.CAFile(), ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// CAFile is the CA certificate's path.
func (p *PKI) CAFile() string { return filepath.Join(p.dir, "ca.pem") }

// Write writes kp as name.pem and name-key.pem, replacing earlier files of
// that name by rename, as a certificate rotation would.
func (p *PKI) Write(name string, kp *pki.KeyPair) Files {
	p.t.Helper()
	f := Files{CA: p.CAFile(), Cert: filepath.Join(p.dir, name+".pem"), Key: filepath.Join(p.dir, name+"-key.pem")}
	tmp := p.t.TempDir()
	tc, tk := filepath.Join(tmp, "c.pem"), filepath.Join(tmp, "k.pem")
	if err := kp.WriteFiles(tc, tk); err != nil {
		p.t.Fatal(err)
	}
	for _, mv := range [][2]string{{tc, f.Cert}, {tk, f.Key}} {
		if err := os.Rename(mv[0], mv[1]); err != nil {
			p.t.Fatal(err)
		}
	}
	return f
}

// Issue issues a node certificate of id for 127.0.0.1 and localhost.
func (p *PKI) Issue(id string) *pki.KeyPair {
	p.t.Helper()
	kp, err := p.CA.IssueNode(id, []string{"127.0.0.1", "localhost"}, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	return kp
}

// Node issues and writes a node certificate of id (file name id).
func (p *PKI) Node(id string) Files { return p.Write(id, p.Issue(id)) }

// Client issues and writes a client certificate named name.
func (p *PKI) Client(name string) Files {
	p.t.Helper()
	kp, err := p.CA.IssueClient(name, 0)
	if err != nil {
		p.t.Fatal(err)
	}
	return p.Write(name, kp)
}
