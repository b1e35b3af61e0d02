package server

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/cluster"
)

// newRoutedServer builds a Server on a single-node cluster, as the other
// server tests start their nodes, without a listener: its router is what
// these tests look at.
func newRoutedServer(t *testing.T) *Server {
	t.Helper()
	n, err := cluster.Open(cluster.Config{
		NodeID:             "n0",
		DataDir:            t.TempDir(),
		RaftBind:           "127.0.0.1:0",
		HTTPAdvertise:      "127.0.0.1:1",
		Logger:             hclog.NewNullLogger(),
		HeartbeatTimeout:   300 * time.Millisecond,
		ElectionTimeout:    300 * time.Millisecond,
		LeaderLeaseTimeout: 200 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
	})
	if err != nil {
		t.Fatalf("open node: %v", err)
	}
	s := New(Config{Node: n})
	t.Cleanup(func() {
		s.Close()
		_ = n.Kill()
	})
	return s
}

// ginParam matches a gin path parameter (":name") or wildcard ("*name").
var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// openAPIPath turns a gin route path into an OpenAPI path template.
func openAPIPath(ginPath string) string { return ginParam.ReplaceAllString(ginPath, "{$1}") }

// loadOpenAPI parses the embedded document.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(openAPIDocument)
	if err != nil {
		t.Fatalf("load the OpenAPI document: %v", err)
	}
	return doc
}

// TestOpenAPIDocumentsEveryRoute fails when the router has a route (method
// and path) the document does not describe, or the document an operation
// the router does not serve.
func TestOpenAPIDocumentsEveryRoute(t *testing.T) {
	s := newRoutedServer(t)
	routed := map[string]bool{}
	for _, r := range s.engine.Routes() {
		routed[r.Method+" "+openAPIPath(r.Path)] = true
	}
	documented := map[string]bool{}
	for path, item := range loadOpenAPI(t).Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	var undocumented, unrouted []string
	for r := range routed {
		if !documented[r] {
			undocumented = append(undocumented, r)
		}
	}
	for d := range documented {
		if !routed[d] {
			unrouted = append(unrouted, d)
		}
	}
	slices.Sort(undocumented)
	slices.Sort(unrouted)
	if len(undocumented) > 0 {
		t.Errorf("routes missing from server/openapi.json:\n  %s", strings.Join(undocumented, "\n  "))
	}
	if len(unrouted) > 0 {
		t.Errorf("operations in server/openapi.json that no route serves:\n  %s", strings.Join(unrouted, "\n  "))
	}
	if !routed["POST /services/v1/lease"] || !routed["GET /debug/pprof/{name}"] {
		t.Errorf("the router's route list lacks known routes: %v", routed)
	}
}

// TestOpenAPIDocumentsTheTimeoutHeader: every route checks
// X-Holdfast-Timeout (a middleware of the whole router), so every path
// names the header and every operation lists the 400 a bad value gets.
func TestOpenAPIDocumentsTheTimeoutHeader(t *testing.T) {
	for path, item := range loadOpenAPI(t).Paths.Map() {
		named := false
		for _, p := range item.Parameters {
			named = named || p.Value != nil && p.Value.In == "header" && p.Value.Name == "X-Holdfast-Timeout"
		}
		if !named {
			t.Errorf("%s does not name the X-Holdfast-Timeout header", path)
		}
		for method, op := range item.Operations() {
			if op.Responses.Value("400") == nil {
				t.Errorf("%s %s lists no 400 for a bad X-Holdfast-Timeout", method, path)
			}
		}
	}
}

// TestOpenAPIDocumentIsValid loads the document with kin-openapi, which
// resolves every $ref, and validates it as OpenAPI 3.1 (schemas, examples,
// defaults and patterns included).
func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if !doc.IsOpenAPI31OrLater() || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi is %q, want 3.1.0", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background(), openapi3.EnableMultiError()); err != nil {
		t.Fatalf("the OpenAPI document does not validate:\n%v", err)
	}
	for _, name := range []string{"NotFound", "MethodNotAllowed"} {
		if doc.Components.Responses[name] == nil {
			t.Errorf("components.responses.%s is missing: it describes the answers to unrouted paths and methods", name)
		}
	}
}

// TestOpenAPIServed: GET /openapi.json answers the embedded document as
// JSON to anyone.
func TestOpenAPIServed(t *testing.T) {
	s := newRoutedServer(t)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, OpenAPIPath, nil)
	req.RemoteAddr = "192.0.2.7:4242" // not loopback: no operator privilege
	s.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d %s", OpenAPIPath, rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if !bytes.Equal(rec.Body.Bytes(), openAPIDocument) {
		t.Errorf("the body is not the embedded document")
	}
}
