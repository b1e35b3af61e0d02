//go:build unix

package harness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// TLSFiles names a certificate pair and the CA that issued it.
type TLSFiles struct {
	CA, Cert, Key string
}

// PKI makes certificates with the binary's own `holdfast tls` commands, as
// a user would, in one directory holding one CA.
type PKI struct {
	env *Env
	dir string
}

// NewPKI creates a CA in dir with `holdfast tls ca create`.
func (e *Env) NewPKI(dir string) (*PKI, error) {
	p := &PKI{env: e, dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create PKI dir: %w", err)
	}
	if err := p.run("tls", "ca", "create", "--dir", dir); err != nil {
		return nil, err
	}
	return p, nil
}

// CAFile is the CA certificate's path.
func (p *PKI) CAFile() string { return filepath.Join(p.dir, "holdfast-ca.pem") }

// Dir is where the PKI's files are.
func (p *PKI) Dir() string { return p.dir }

// Node makes (or returns, if already made) the node certificate of id,
// valid for 127.0.0.1 and localhost.
func (p *PKI) Node(id string) (TLSFiles, error) {
	return p.cert(p.dir, "--node-id", id)
}

// NodeIn makes another node certificate of id, from the same CA, in dir
// (which must not hold one yet): a rotation's new pair.
func (p *PKI) NodeIn(dir, id string) (TLSFiles, error) {
	return p.cert(dir, "--node-id", id)
}

// Client makes (or returns) a client certificate named name.
func (p *PKI) Client(name string) (TLSFiles, error) {
	return p.cert(p.dir, "--client", name)
}

func (p *PKI) cert(dir, kind, name string) (TLSFiles, error) {
	f := TLSFiles{CA: p.CAFile(), Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem")}
	if _, err := os.Stat(f.Cert); err == nil {
		return f, nil
	}
	args := []string{"tls", "cert", "create", kind, name, "--dir", dir,
		"--ca", p.CAFile(), "--ca-key", filepath.Join(p.dir, "holdfast-ca-key.pem")}
	if kind == "--node-id" {
		args = append(args, "--hosts", "127.0.0.1,localhost")
	}
	return f, p.run(args...)
}

func (p *PKI) run(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.env.Binary, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("holdfast %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// PeerArgs are the serve flags that give a node the pair f as its node
// certificate (which then also serves its HTTP listener).
func PeerArgs(f TLSFiles) []string {
	return []string{"--peer-cert-file", f.Cert, "--peer-key-file", f.Key, "--peer-ca-file", f.CA}
}

// ClientTLS returns a client configuration trusting caFile and, when
// client is not empty, presenting that pair.
func ClientTLS(caFile string, client *TLSFiles) (*tls.Config, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no certificate", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if client != nil {
		pair, err := tls.LoadX509KeyPair(client.Cert, client.Key)
		if err != nil {
			return nil, fmt.Errorf("load client pair: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// NewTLSClient is an HTTP client like the cluster's own (127.0.0.1 only,
// no proxy) speaking TLS with cfg.
func NewTLSClient(cfg *tls.Config, timeout time.Duration) *http.Client {
	c := newHTTPClient(timeout)
	tr := c.Transport.(*http.Transport)
	tr.TLSClientConfig = cfg
	tr.ForceAttemptHTTP2 = true
	return c
}
