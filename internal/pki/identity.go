// Package pki makes and reads holdfast's certificates: a cluster CA, node
// certificates that name their node, and client certificates.
//
// A node's identity is bound to its certificate by one URI subject
// alternative name, urn:holdfast:node:<node id> (the id path-escaped). A
// certificate is a node certificate only if it carries exactly one such
// name; client certificates carry none, so a client certificate issued by
// the same CA never makes its holder a peer.
//
// The package must never log or print a private key, and writes private
// keys only with mode 0600.
package pki

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// nodeURIPrefix is the opaque part of every node identity URI before the
// escaped node id.
const nodeURIPrefix = "holdfast:node:"

// ErrNoNodeID is returned for a certificate that names no node, or more than one.
var ErrNoNodeID = errors.New("certificate names no holdfast node")

// NodeURI is the URI subject alternative name that binds a certificate to
// node id.
func NodeURI(id string) *url.URL {
	return &url.URL{Scheme: "urn", Opaque: nodeURIPrefix + url.PathEscape(id)}
}

// NodeID returns the node id a certificate is bound to. It fails for a
// certificate with no node identity URI, or with more than one.
func NodeID(cert *x509.Certificate) (string, error) {
	if cert == nil {
		return "", ErrNoNodeID
	}
	id, found := "", 0
	for _, u := range cert.URIs {
		if u == nil || u.Scheme != "urn" {
			continue
		}
		esc, ok := strings.CutPrefix(u.Opaque, nodeURIPrefix)
		if !ok {
			continue
		}
		v, err := url.PathUnescape(esc)
		if err != nil || v == "" {
			return "", fmt.Errorf("%w: malformed node identity URI", ErrNoNodeID)
		}
		id, found = v, found+1
	}
	if found != 1 {
		return "", ErrNoNodeID
	}
	return id, nil
}
