package pki

import (
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// File modes of written certificates and private keys.
const (
	CertFileMode fs.FileMode = 0o644
	KeyFileMode  fs.FileMode = 0o600
)

// PEM block types read and written.
const (
	pemCertificate  = "CERTIFICATE"
	pemPKCS8Key     = "PRIVATE KEY"
	pemSEC1Key      = "EC PRIVATE KEY"
	pemECParameters = "EC PARAMETERS"
)

// CertPEM returns kp's certificate as a PEM "CERTIFICATE" block.
func (kp *KeyPair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: pemCertificate, Bytes: kp.Cert.Raw})
}

// keyPEM returns kp's private key as a PEM PKCS #8 "PRIVATE KEY" block.
func (kp *KeyPair) keyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(kp.Key)
	if err != nil {
		return nil, fmt.Errorf("encode private key: %w", err)
	}
	defer clear(der)
	return pem.EncodeToMemory(&pem.Block{Type: pemPKCS8Key, Bytes: der}), nil
}

// WriteFiles writes kp's certificate to certPath with mode CertFileMode and
// its private key, PKCS #8 in PEM, to keyPath with mode KeyFileMode. It
// never replaces a file: if either path exists it writes nothing and
// returns an error naming the path that wraps fs.ErrExist.
//
// Each file is written to a new temporary file in its directory, created
// exclusively with mode 0600 (so the key never exists on disk with any
// other mode), synced, and then moved to its path. If the certificate
// cannot be written, the key just written is removed again.
func (kp *KeyPair) WriteFiles(certPath, keyPath string) error {
	if filepath.Clean(certPath) == filepath.Clean(keyPath) {
		return fmt.Errorf("certificate and key paths are the same: %s", certPath)
	}
	for _, p := range []string{certPath, keyPath} {
		if err := ensureAbsent(p); err != nil {
			return err
		}
	}
	key, err := kp.keyPEM()
	if err != nil {
		return err
	}
	defer clear(key)
	if err := writeNewFile(keyPath, key, KeyFileMode); err != nil {
		return fmt.Errorf("write private key: %w", err)
	}
	if err := writeNewFile(certPath, kp.CertPEM(), CertFileMode); err != nil {
		if rmErr := os.Remove(keyPath); rmErr != nil {
			return errors.Join(fmt.Errorf("write certificate: %w", err), fmt.Errorf("remove the key written for it: %w", rmErr))
		}
		return fmt.Errorf("write certificate: %w", err)
	}
	return nil
}

// ensureAbsent returns an error wrapping fs.ErrExist if path exists.
func ensureAbsent(path string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return existsError(path)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("check %s: %w", path, err)
	}
}

func existsError(path string) error {
	return fmt.Errorf("refusing to overwrite %s: %w", path, fs.ErrExist)
}

// writeNewFile creates path holding data with mode perm, failing if path
// exists. The data goes to an exclusively created temporary file in the same
// directory first, which is hard-linked to path (an operation that never
// replaces a file) and then removed. On a file system without hard links it
// is renamed to path instead, after a last check that path is still absent.
func writeNewFile(path string, data []byte, perm fs.FileMode) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if rmErr := os.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) && err == nil {
			err = fmt.Errorf("remove temporary file %s: %w", tmp, rmErr)
		}
	}()
	if err := writeAndClose(f, data, perm); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	linkErr := os.Link(tmp, path)
	if linkErr == nil {
		return nil
	}
	if errors.Is(linkErr, fs.ErrExist) {
		return existsError(path)
	}
	if err := ensureAbsent(path); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("move %s to %s: %w", tmp, path, errors.Join(err, linkErr))
	}
	return nil
}

// writeAndClose sets f's mode to perm, writes data, syncs and closes f.
func writeAndClose(f *os.File, data []byte, perm fs.FileMode) error {
	err := f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// LoadCA reads a CA from a PEM certificate file and a PEM private key file,
// PKCS #8 ("PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY"). It fails unless the
// certificate is a CA certificate that may sign certificates and the key is
// its key.
func LoadCA(certPath, keyPath string) (*CA, error) {
	cert, err := readCertFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("read CA certificate: %w", err)
	}
	key, err := readKeyFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("read CA key: %w", err)
	}
	ca := &CA{KeyPair{Cert: cert, Key: key}}
	if err := ca.check(); err != nil {
		return nil, fmt.Errorf("load CA from %s and %s: %w", certPath, keyPath, err)
	}
	return ca, nil
}

// readCertFile parses the first CERTIFICATE block of a PEM file.
func readCertFile(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for rest := b; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return nil, fmt.Errorf("%s: no PEM %s block", path, pemCertificate)
		}
		if block.Type == pemCertificate {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			return cert, nil
		}
	}
}

// readKeyFile parses the private key of a PEM file, skipping the EC
// PARAMETERS block some tools write before it. The file's contents never
// appear in an error.
func readKeyFile(path string) (crypto.Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(b)
	for rest := b; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			return nil, fmt.Errorf("%s: no PEM %s or %s block", path, pemPKCS8Key, pemSEC1Key)
		}
		if block.Type == pemECParameters {
			continue
		}
		key, err := parseKeyBlock(block)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return key, nil
	}
}

// parseKeyBlock parses an unencrypted PKCS #8 or SEC 1 private key.
func parseKeyBlock(block *pem.Block) (crypto.Signer, error) {
	defer clear(block.Bytes)
	if _, encrypted := block.Headers["Proc-Type"]; encrypted {
		return nil, errors.New("encrypted private keys are not supported")
	}
	switch block.Type {
	case pemSEC1Key:
		key, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", pemSEC1Key, err)
		}
		return key, nil
	case pemPKCS8Key:
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", pemPKCS8Key, err)
		}
		signer, ok := key.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("a %T cannot sign certificates", key)
		}
		return signer, nil
	}
	return nil, fmt.Errorf("PEM block %q is not a %s or %s", block.Type, pemPKCS8Key, pemSEC1Key)
}
