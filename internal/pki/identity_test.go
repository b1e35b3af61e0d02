package pki

import (
	"crypto/x509"
	"errors"
	"net/url"
	"testing"
)

func TestNodeIDRoundTrip(t *testing.T) {
	for _, id := range []string{"n1", "node-0a1b2c", "odd id/with:chars%", "ü"} {
		u := NodeURI(id)
		parsed, err := url.Parse(u.String())
		if err != nil {
			t.Fatalf("NodeURI(%q) = %q does not parse: %v", id, u, err)
		}
		got, err := NodeID(&x509.Certificate{URIs: []*url.URL{parsed}})
		if err != nil || got != id {
			t.Fatalf("NodeID(NodeURI(%q)) = %q, %v", id, got, err)
		}
	}
}

func TestNodeIDRefusesMissingOrAmbiguousIdentity(t *testing.T) {
	other, _ := url.Parse("https://example.com/x")
	cases := map[string]*x509.Certificate{
		"nil":        nil,
		"no URIs":    {},
		"other URI":  {URIs: []*url.URL{other}},
		"two nodes":  {URIs: []*url.URL{NodeURI("a"), NodeURI("b")}},
		"empty id":   {URIs: []*url.URL{{Scheme: "urn", Opaque: nodeURIPrefix}}},
		"bad escape": {URIs: []*url.URL{{Scheme: "urn", Opaque: nodeURIPrefix + "%zz"}}},
		"other urn":  {URIs: []*url.URL{{Scheme: "urn", Opaque: "example:node:a"}}},
	}
	for name, c := range cases {
		if id, err := NodeID(c); !errors.Is(err, ErrNoNodeID) {
			t.Errorf("%s: NodeID = %q, %v; want ErrNoNodeID", name, id, err)
		}
	}
}
