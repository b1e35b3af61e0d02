package tlsconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Files names the PEM files of a Source. CertFile and KeyFile go together;
// CAFile is optional when a pair is given, and a Source may hold only a CA.
type Files struct {
	CertFile string
	KeyFile  string
	CAFile   string
}

func (f Files) paths() []string {
	var out []string
	for _, p := range []string{f.CertFile, f.KeyFile, f.CAFile} {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// material is one loaded generation of a Source's files.
type material struct {
	cert *tls.Certificate    // nil when the source has no pair
	pool *x509.CertPool      // nil when the source has no CA file
	cas  []*x509.Certificate // the CA file's certificates, as in pool
}

// Source is a certificate pair and CA bundle loaded from files, replaced as
// a whole when the files change and the new contents load.
type Source struct {
	name  string
	files Files
	log   hclog.Logger
	check Check

	cur atomic.Pointer[material]

	mu     sync.Mutex // serialises reloads
	stamp  string     // the files' stat signature of the loaded material
	failed string     // the signature whose load last failed (logged once)
}

// Check vets a newly loaded pair and pool (either may be nil) before a
// Source adopts them; an error keeps the previous ones.
type Check func(cert *tls.Certificate, pool *x509.CertPool) error

// NewSource loads files once; it fails if they do not load or check
// rejects them. name says what the files are for in log lines ("api",
// "peer", "client CA"); check may be nil.
func NewSource(name string, files Files, log hclog.Logger, check Check) (*Source, error) {
	if (files.CertFile == "") != (files.KeyFile == "") {
		return nil, fmt.Errorf("%s TLS: a certificate file and a key file go together", name)
	}
	if files.CertFile == "" && files.CAFile == "" {
		return nil, fmt.Errorf("%s TLS: no files given", name)
	}
	if log == nil {
		log = hclog.NewNullLogger()
	}
	s := &Source{name: name, files: files, log: log, check: check}
	stamp := s.signature()
	m, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("%s TLS: %w", name, err)
	}
	s.cur.Store(m)
	s.stamp = stamp
	return s, nil
}

// Name is what the source's files are for.
func (s *Source) Name() string { return s.name }

// Certificate returns the current pair, or nil if the source has none.
func (s *Source) Certificate() *tls.Certificate { return s.cur.Load().cert }

// Pool returns the current CA pool, or nil if the source has no CA file.
func (s *Source) Pool() *x509.CertPool { return s.cur.Load().pool }

// Leaf returns the current certificate, parsed, or nil.
func (s *Source) Leaf() *x509.Certificate {
	if c := s.Certificate(); c != nil {
		return c.Leaf
	}
	return nil
}

func (s *Source) material() *material { return s.cur.Load() }

// Reload re-reads the files whether or not they changed. On failure the
// previous material stays in use and the error is returned (and logged).
func (s *Source) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(s.signature(), true)
}

// CheckFiles reloads the files if their size, modification time or inode
// changed since the last load. A change whose contents do not load is
// logged once and retried at the next change.
func (s *Source) CheckFiles() {
	s.mu.Lock()
	defer s.mu.Unlock()
	stamp := s.signature()
	if stamp == s.stamp || stamp == s.failed {
		return
	}
	_ = s.reloadLocked(stamp, false)
}

func (s *Source) reloadLocked(stamp string, forced bool) error {
	m, err := s.load()
	if err != nil {
		if forced || stamp != s.failed {
			s.log.Error("TLS files changed but do not load; keeping the previous certificate", "tls", s.name, "error", err)
		}
		s.failed = stamp
		return fmt.Errorf("%s TLS: %w", s.name, err)
	}
	s.cur.Store(m)
	s.stamp, s.failed = stamp, ""
	attrs := []any{"tls", s.name}
	if m.cert != nil {
		attrs = append(attrs, "subject", m.cert.Leaf.Subject.CommonName, "not_after", m.cert.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	s.log.Info("TLS files loaded", attrs...)
	return nil
}

// Watch checks the files every interval until ctx ends.
func (s *Source) Watch(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.CheckFiles()
		}
	}
}

// signature describes the files' current size, modification time and inode,
// so a rewrite in place and a rename over the file are both seen.
func (s *Source) signature() string {
	var b strings.Builder
	for _, p := range s.files.paths() {
		fi, err := os.Stat(p)
		if err != nil {
			fmt.Fprintf(&b, "%s:missing;", p)
			continue
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(&b, "%s:%d:%d:%d;", p, fi.Size(), fi.ModTime().UnixNano(), ino)
	}
	return b.String()
}

// load reads one generation of files and applies the source's check.
func (s *Source) load() (*material, error) {
	m, err := loadFiles(s.files)
	if err != nil {
		return nil, err
	}
	if s.check != nil {
		if err := s.check(m.cert, m.pool); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// loadFiles reads and parses one generation of files.
func loadFiles(f Files) (*material, error) {
	m := &material{}
	if f.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
		}
		if pair.Leaf == nil {
			leaf, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				return nil, fmt.Errorf("parse certificate %s: %w", f.CertFile, err)
			}
			pair.Leaf = leaf
		}
		m.cert = &pair
	}
	if f.CAFile != "" {
		data, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		for len(data) > 0 {
			var b *pem.Block
			if b, data = pem.Decode(data); b == nil {
				break
			}
			if b.Type != "CERTIFICATE" {
				continue
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("CA file %s: %w", f.CAFile, err)
			}
			m.cas = append(m.cas, c)
		}
		if len(m.cas) == 0 {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", f.CAFile)
		}
		m.pool = newPool(m.cas)
	}
	return m, nil
}

// ErrNotVerified is wrapped by errors about a certificate that does not
// chain to the expected CA.
var ErrNotVerified = errors.New("certificate not verified")

// verifyChain checks that certs (leaf first, as a TLS peer sent them)
// chain to pool for usage.
func verifyChain(certs []*x509.Certificate, pool *x509.CertPool, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(certs) == 0 {
		return nil, fmt.Errorf("%w: no certificate presented", ErrNotVerified)
	}
	if pool == nil {
		return nil, fmt.Errorf("%w: no CA configured", ErrNotVerified)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotVerified, err)
	}
	return certs[0], nil
}

func newPool(certs []*x509.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool
}
