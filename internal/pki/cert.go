package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"time"
	"unicode"
	"unicode/utf8"
)

const (
	// DefaultCAName is the common name of a CA created with an empty name.
	DefaultCAName = "holdfast CA"
	// DefaultCADays is the lifetime, in days, of a CA created with a
	// lifetime of 0: five years.
	DefaultCADays = 1825
	// DefaultCertDays is the lifetime, in days, of a node or client
	// certificate issued with a lifetime of 0: one year.
	DefaultCertDays = 365
	// MaxDays is the longest lifetime, in days, any certificate may be
	// given: 100 years.
	MaxDays = 36500

	// backdate is how far in the past every certificate's validity begins,
	// so that a machine whose clock is behind the issuer's accepts it at once.
	backdate = time.Hour
	// serialBits is the size of the random serial numbers.
	serialBits = 128
	// keyIDLen is the length of a key identifier: the leftmost 160 bits of
	// the SHA-256 of the subject public key (RFC 7093, method 1).
	keyIDLen = 20
)

// KeyPair is a certificate and its private key.
type KeyPair struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// CA is a certificate authority that issues node and client certificates.
// Its certificate may sign leaf certificates only (path length zero).
type CA struct {
	KeyPair
}

// NewCA creates a self-signed CA with a new ECDSA P-256 key. An empty name
// means DefaultCAName, and days 0 means DefaultCADays.
func NewCA(name string, days int) (*CA, error) {
	if name == "" {
		name = DefaultCAName
	}
	if err := checkCAName(name); err != nil {
		return nil, err
	}
	days, err := lifetime(days, DefaultCADays)
	if err != nil {
		return nil, err
	}
	kp, err := create(&x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}, days, nil)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	return &CA{*kp}, nil
}

// IssueNode issues a certificate for node nodeID, for both ends of a TLS
// connection: it serves the node's API listener and authenticates the node
// to its peers. Its common name is nodeID, and its subject alternative names
// are hosts (each an IP address, or else a DNS name, possibly with a leading
// "*." wildcard label) and NodeURI(nodeID). nodeID must pass ValidateNodeID.
// days 0 means DefaultCertDays; the certificate never outlives the CA.
func (ca *CA) IssueNode(nodeID string, hosts []string, days int) (*KeyPair, error) {
	if err := ValidateNodeID(nodeID); err != nil {
		return nil, err
	}
	ips, names, err := parseHosts(hosts)
	if err != nil {
		return nil, fmt.Errorf("node certificate for %s: %w", nodeID, err)
	}
	kp, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: nodeID},
		IPAddresses: ips,
		DNSNames:    names,
		URIs:        []*url.URL{NodeURI(nodeID)},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}, days)
	if err != nil {
		return nil, fmt.Errorf("node certificate for %s: %w", nodeID, err)
	}
	return kp, nil
}

// IssueClient issues a client certificate with common name name, for a
// client of an API listener that requires client certificates. It carries
// no node identity, so NodeID refuses it and it never makes its holder a
// peer. name follows the same rule as a node id (see ValidateNodeID).
// days 0 means DefaultCertDays; the certificate never outlives the CA.
func (ca *CA) IssueClient(name string, days int) (*KeyPair, error) {
	if err := ValidateClientName(name); err != nil {
		return nil, err
	}
	kp, err := ca.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, days)
	if err != nil {
		return nil, fmt.Errorf("client certificate for %s: %w", name, err)
	}
	return kp, nil
}

// issue completes a leaf template and signs it with the CA.
func (ca *CA) issue(tmpl *x509.Certificate, days int) (*KeyPair, error) {
	if err := ca.check(); err != nil {
		return nil, err
	}
	days, err := lifetime(days, DefaultCertDays)
	if err != nil {
		return nil, err
	}
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	return create(tmpl, days, &ca.KeyPair)
}

// check reports whether ca can issue certificates: its certificate is a CA
// certificate whose key usage, if it has one, includes signing
// certificates, and its key is the certificate's.
func (ca *CA) check() error {
	if ca == nil || ca.Cert == nil || ca.Key == nil {
		return errors.New("CA has no certificate or no key")
	}
	if !ca.Cert.BasicConstraintsValid || !ca.Cert.IsCA {
		return errors.New("certificate is not a CA certificate")
	}
	// Without a key usage extension a CA key may be used for anything
	// (RFC 5280, section 4.2.1.3); with one, it must allow signing certificates.
	if ca.Cert.KeyUsage != 0 && ca.Cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return errors.New("CA certificate's key usage does not allow signing certificates")
	}
	pub, ok := ca.Cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.Key.Public()) {
		return errors.New("private key does not match the CA certificate")
	}
	return nil
}

// create generates a P-256 key and a certificate for it from tmpl, valid
// from backdate ago for days days. The certificate is signed by issuer, or
// self-signed if issuer is nil; an issued certificate ends no later than its
// issuer's.
func create(tmpl *x509.Certificate, days int, issuer *KeyPair) (*KeyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate key: %w", err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, err
	}
	if tmpl.SubjectKeyId, err = keyID(&key.PublicKey); err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.NotBefore = now.Add(-backdate)
	tmpl.NotAfter = now.AddDate(0, 0, days)
	parent, signer := tmpl, crypto.Signer(key)
	tmpl.AuthorityKeyId = tmpl.SubjectKeyId
	if issuer != nil {
		if !now.Before(issuer.Cert.NotAfter) {
			return nil, fmt.Errorf("CA certificate expired at %s", issuer.Cert.NotAfter.UTC().Format(time.RFC3339))
		}
		if tmpl.NotAfter.After(issuer.Cert.NotAfter) {
			tmpl.NotAfter = issuer.Cert.NotAfter
		}
		parent, signer = issuer.Cert, issuer.Key
		if tmpl.AuthorityKeyId = issuer.Cert.SubjectKeyId; len(tmpl.AuthorityKeyId) == 0 {
			if tmpl.AuthorityKeyId, err = keyID(issuer.Cert.PublicKey); err != nil {
				return nil, fmt.Errorf("CA key: %w", err)
			}
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse new certificate: %w", err)
	}
	return &KeyPair{Cert: cert, Key: key}, nil
}

// lifetime resolves a requested lifetime in days: 0 means def.
func lifetime(days, def int) (int, error) {
	if days == 0 {
		return def, nil
	}
	if days < 0 || days > MaxDays {
		return 0, fmt.Errorf("lifetime of %d days is out of range: want 1 to %d", days, MaxDays)
	}
	return days, nil
}

// newSerial returns a uniformly random serial number in [1, 2^128).
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), serialBits)
	limit.Sub(limit, big.NewInt(1))
	n, err := rand.Int(rand.Reader, limit)
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// keyID returns the key identifier of pub: the leftmost 160 bits of the
// SHA-256 of its subjectPublicKey bit string (RFC 7093, section 2, method 1).
func keyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("encode public key: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		return nil, fmt.Errorf("decode public key: %w", err)
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:keyIDLen], nil
}

// checkCAName accepts a CA common name of printable text.
func checkCAName(name string) error {
	if !utf8.ValidString(name) || len(name) > 256 {
		return fmt.Errorf("CA name %q is not valid: want up to 256 bytes of UTF-8 text", name)
	}
	for _, r := range name {
		if unicode.IsControl(r) {
			return fmt.Errorf("CA name %q contains a control character", name)
		}
	}
	return nil
}

// ValidateNodeID reports whether id may name a node in a certificate. An id
// must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$, which keeps it safe to use
// as a file name: it cannot be "." or "..", hold a path separator, or start
// with a dash.
func ValidateNodeID(id string) error {
	return validateName("node id", id)
}

// ValidateClientName reports whether name may name a client certificate:
// the rule of ValidateNodeID.
func ValidateClientName(name string) error {
	return validateName("client name", name)
}

// validateName checks name against the rule ValidateNodeID documents; kind
// says what the name is, for the error.
func validateName(kind, name string) error {
	ok := len(name) >= 1 && len(name) <= 128
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		alnum := c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		ok = alnum || i > 0 && (c == '.' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("%s %q is not valid: it must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$ so that it is safe as a file name", kind, name)
	}
	return nil
}

// parseHosts splits a node certificate's hosts into IP addresses and DNS
// names, normalised (IPv4-mapped addresses unmapped, names lower-cased) and
// without duplicates.
func parseHosts(hosts []string) ([]net.IP, []string, error) {
	if len(hosts) == 0 {
		return nil, nil, errors.New("a node certificate needs at least one host")
	}
	var (
		ips   []net.IP
		names []string
		seen  = make(map[string]bool, len(hosts))
	)
	for _, h := range hosts {
		ip, name, err := parseHost(h)
		if err != nil {
			return nil, nil, err
		}
		key := name
		if ip != nil {
			key = ip.String()
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		if ip != nil {
			ips = append(ips, ip)
		} else {
			names = append(names, name)
		}
	}
	return ips, names, nil
}
