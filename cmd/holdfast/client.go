package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// apiClient is a minimal JSON client for one holdfast node's API.
type apiClient struct {
	base string
	http *http.Client
}

// newAPIClient talks to addr (host:port, or a URL) through hc; an address
// without a scheme uses scheme.
func newAPIClient(addr, scheme string, hc *http.Client) *apiClient {
	base := strings.TrimRight(addr, "/")
	if !strings.Contains(base, "://") {
		base = scheme + "://" + base
	}
	return &apiClient{base: base + "/services/v1", http: hc}
}

// caFileFlag registers --ca-file, the CA bundle of nodes that serve HTTPS.
func caFileFlag(fs *flag.FlagSet) *string {
	return fs.String("ca-file", envOr("HOLDFAST_CA_FILE", ""), "PEM CA bundle that verifies the nodes' HTTPS listeners (HOLDFAST_CA_FILE); addresses without a scheme then use https")
}

// clientTransport returns a transport that trusts caFile (and the scheme
// addresses without one take): plain HTTP without a CA file.
func clientTransport(caFile string) (*http.Transport, string, error) {
	tr := &http.Transport{}
	if caFile == "" {
		return tr, "http", nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, "", fmt.Errorf("read --ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, "", fmt.Errorf("--ca-file %s holds no PEM certificate", caFile)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	tr.ForceAttemptHTTP2 = true
	return tr, "https", nil
}

// apiError is a non-2xx answer.
type apiError struct {
	Status int
	Body   map[string]any
}

func (e *apiError) Error() string {
	return fmt.Sprintf("HTTP %d: %v", e.Status, e.Body["error"])
}

// call sends body (if not nil) as JSON with an optional bearer token and
// decodes a 2xx answer into out.
func (c *apiClient) call(ctx context.Context, method, path, token string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("encode %s: %w", path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, fmt.Errorf("build %s: %w", path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read %s: %w", path, err)
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{Status: resp.StatusCode}
		_ = json.Unmarshal(raw, &e.Body)
		return resp.StatusCode, e
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s: %w", path, err)
		}
	}
	return resp.StatusCode, nil
}
