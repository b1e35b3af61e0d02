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
