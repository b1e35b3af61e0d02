package pki

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteFilesAndLoadCA(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if err := ca.WriteFiles(certPath, keyPath); err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]fs.FileMode{certPath: 0o644, keyPath: 0o600} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != mode {
			t.Fatalf("%s: mode %v, %v; want %v", path, st.Mode().Perm(), err, mode)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("directory holds %d entries, want the two files and no temporary file", len(entries))
	}
	keyPEM, _ := os.ReadFile(keyPath)
	if block, _ := pem.Decode(keyPEM); block == nil || block.Type != "PRIVATE KEY" {
		t.Fatalf("key file is not a PKCS #8 PEM block")
	}

	loaded, err := LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) || !ca.Key.Public().(*ecdsa.PublicKey).Equal(loaded.Key.Public()) {
		t.Fatal("loaded CA differs from the one written")
	}
	node, err := loaded.IssueNode("n1", []string{"localhost"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, ca, node.Cert, "localhost", x509.ExtKeyUsageServerAuth); err != nil {
		t.Fatalf("certificate from a loaded CA: %v", err)
	}

	// A written pair loads as a TLS certificate.
	nodeCert, nodeKey := filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem")
	if err := node.WriteFiles(nodeCert, nodeKey); err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(nodeCert, nodeKey); err != nil {
		t.Fatalf("tls.LoadX509KeyPair: %v", err)
	}
}

func TestWriteFilesRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certPath, keyPath := filepath.Join(dir, "c.pem"), filepath.Join(dir, "c-key.pem")
	if err := os.WriteFile(keyPath, []byte("existing"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := ca.WriteFiles(certPath, keyPath)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), keyPath) {
		t.Fatalf("overwrite of the key: %v", err)
	}
	if _, err := os.Lstat(certPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the certificate was written although the key could not be")
	}
	if b, _ := os.ReadFile(keyPath); string(b) != "existing" {
		t.Fatal("existing file changed")
	}
	if err := ca.WriteFiles(keyPath, keyPath); err == nil {
		t.Fatal("the same path for certificate and key was accepted")
	}

	// writeNewFile itself refuses a path that appeared after the check.
	if err := writeNewFile(keyPath, []byte("new"), KeyFileMode); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("writeNewFile over an existing file: %v", err)
	}
	if b, _ := os.ReadFile(keyPath); string(b) != "existing" {
		t.Fatal("existing file changed")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temporary files left behind: %d entries", len(entries))
	}
}

func TestWriteFilesRemovesKeyWhenCertificateFails(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	keyPath := filepath.Join(dir, "c-key.pem")
	err := ca.WriteFiles(filepath.Join(dir, "missing", "c.pem"), keyPath)
	if err == nil {
		t.Fatal("a certificate into a missing directory was written")
	}
	if _, err := os.Lstat(keyPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the key was left without its certificate")
	}
}

func TestLoadCAKeyFormats(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	certPath := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(certPath, ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ca.Key.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	// As written by "openssl ecparam -genkey": parameters, then the key.
	params := pem.EncodeToMemory(&pem.Block{Type: "EC PARAMETERS", Bytes: []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}})
	sec1Path := filepath.Join(dir, "sec1.pem")
	if err := os.WriteFile(sec1Path, append(params, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(certPath, sec1Path); err != nil {
		t.Fatalf("EC PRIVATE KEY: %v", err)
	}

	other := newTestCA(t)
	leaf, err := ca.IssueClient("c", 0)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	otherKey, err := other.keyPEM()
	if err != nil {
		t.Fatal(err)
	}
	leafKey, err := leaf.keyPEM()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, cert, key, want string
	}{
		{"missing cert", filepath.Join(dir, "none.pem"), sec1Path, "read CA certificate"},
		{"missing key", certPath, filepath.Join(dir, "none.pem"), "read CA key"},
		{"key in cert file", sec1Path, sec1Path, "no PEM CERTIFICATE block"},
		{"cert in key file", certPath, certPath, `"CERTIFICATE" is not a PRIVATE KEY`},
		{"empty key file", certPath, write("empty.pem", nil), "no PEM PRIVATE KEY"},
		{"garbage key", certPath, write("garbage.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("nope")})), "parse PRIVATE KEY"},
		{"encrypted key", certPath, write("enc.pem", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED"}, Bytes: sec1})), "encrypted"},
		{"other CA's key", certPath, write("other-key.pem", otherKey), "does not match"},
		{"leaf as CA", write("leaf.pem", leaf.CertPEM()), write("leaf-key.pem", leafKey), "not a CA"},
	}
	for _, c := range cases {
		_, err := LoadCA(c.cert, c.key)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an error containing %q", c.name, err, c.want)
			continue
		}
		if strings.Contains(err.Error(), "BEGIN") || bytes.Contains([]byte(err.Error()), sec1) {
			t.Errorf("%s: error shows file contents: %v", c.name, err)
		}
	}
}
