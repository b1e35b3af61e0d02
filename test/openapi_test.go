//go:build unix

package test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/holdfast/holdfast/test/harness"
)

// TestOpenAPIDescribesEveryRoute sends a request to each route of a node
// with a cluster key, operations endpoints, profiles and /mcp included, in
// the success and error cases other tests do not reach, and checks the
// status each gets. Like every answer of this package's tests, each is
// also checked against server/openapi.json (TestMain's response check), so
// the document must describe all of them; and the node must serve that
// very document at /openapi.json.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	key := randHex(t, 16)
	_, n := formCluster(t, 1, harness.Options{ClusterKey: key})

	want, err := os.ReadFile(filepath.Join("..", harness.OpenAPIFile))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := n.Get("/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Status != http.StatusOK || doc.Header.Get("Content-Type") != "application/json" || !bytes.Equal(doc.Body, want) {
		t.Errorf("GET /openapi.json: HTTP %d, Content-Type %q, %d bytes; want 200, application/json and the %d bytes of %s",
			doc.Status, doc.Header.Get("Content-Type"), len(doc.Body), len(want), harness.OpenAPIFile)
	}

	mcp := http.Header{"Accept": {"application/json, text/event-stream"}}
	browser := http.Header{"Accept": mcp["Accept"], "Origin": {"http://" + n.HTTPAddr}}
	upgrade := http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"openapi-test","version":"1"}}}`
	for _, tc := range []struct {
		rq     harness.Request
		status int
	}{
		{harness.Request{Method: http.MethodGet, Path: "/healthz"}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/readyz"}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/cluster/status?hash=true"}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/metrics"}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/cluster/settings?stale=true"}, http.StatusOK},
		{harness.Request{Method: http.MethodPut, Path: "/cluster/settings", JSON: harness.Settings{"queue_max_jobs": 100}}, http.StatusUnauthorized},
		{harness.Request{Method: http.MethodPut, Path: "/cluster/settings", JSON: harness.Settings{"queue_max_jobs": 100}, Key: key}, http.StatusOK},
		{harness.Request{Method: http.MethodPut, Path: "/cluster/settings", JSON: map[string]any{}, Key: key}, http.StatusBadRequest},
		{harness.Request{Method: http.MethodPut, Path: "/cluster/settings", Body: []byte(`{}`), ContentType: "text/plain", Key: key}, http.StatusUnsupportedMediaType},
		{harness.Request{Method: http.MethodPost, Path: "/cluster/join", JSON: map[string]any{"node_id": "x"}}, http.StatusUnauthorized},
		{harness.Request{Method: http.MethodPost, Path: "/cluster/join", JSON: map[string]any{"node_id": "x"}, Key: key}, http.StatusBadRequest},
		{harness.Request{Method: http.MethodPost, Path: "/cluster/join", Key: key, JSON: map[string]any{
			"node_id": "nobody", "raft_addr": "127.0.0.1:9", "http_addr": "127.0.0.1:9", "update_only": true}}, http.StatusNotFound},
		{harness.Request{Method: http.MethodPost, Path: "/cluster/remove", JSON: map[string]any{"node_id": "nobody"}, Key: key}, http.StatusNotFound},
		{harness.Request{Method: http.MethodGet, Path: "/cluster/link", Header: upgrade}, http.StatusForbidden},
		{harness.Request{Method: http.MethodGet, Path: "/cluster/link", Header: upgrade, Key: key}, http.StatusBadRequest},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/"}, http.StatusUnauthorized},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/", Key: key}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/cmdline", Key: key}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/symbol", Key: key}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/trace?seconds=0.1", Key: key}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/profile?seconds=1", Key: key}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/heap", Key: key}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/goroutine?debug=1", Key: key}, http.StatusOK},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/no-such-profile", Key: key}, http.StatusNotFound},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof/heap?seconds=x", Key: key}, http.StatusBadRequest},
		{harness.Request{Method: http.MethodPost, Path: "/mcp", Body: []byte(initialize), ContentType: "application/json", Header: mcp}, http.StatusOK},
		{harness.Request{Method: http.MethodPost, Path: "/mcp", Body: []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), ContentType: "application/json", Header: mcp}, http.StatusAccepted},
		{harness.Request{Method: http.MethodPost, Path: "/mcp", Body: []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`), ContentType: "application/json", Header: mcp}, http.StatusOK},
		{harness.Request{Method: http.MethodPost, Path: "/mcp", Body: []byte(`{"jsonrpc":"2.0","id":3,"method":"no/such/method"}`), ContentType: "application/json", Header: mcp}, http.StatusBadRequest},
		{harness.Request{Method: http.MethodPost, Path: "/mcp", Body: []byte(`[{"jsonrpc":"2.0","id":4,"method":"tools/list"}]`), ContentType: "application/json", Header: mcp}, http.StatusBadRequest},
		{harness.Request{Method: http.MethodPost, Path: "/mcp", Body: []byte(`{}`), ContentType: "application/json", Header: browser}, http.StatusForbidden},
		{harness.Request{Method: http.MethodPost, Path: "/mcp", Body: []byte(`{}`), ContentType: "text/plain", Header: mcp}, http.StatusUnsupportedMediaType},
		{harness.Request{Method: http.MethodGet, Path: "/mcp", Header: mcp}, http.StatusMethodNotAllowed},
		{harness.Request{Method: http.MethodDelete, Path: "/mcp"}, http.StatusMethodNotAllowed},
		{harness.Request{Method: http.MethodPost, Path: "/healthz"}, http.StatusMethodNotAllowed},
		{harness.Request{Method: http.MethodGet, Path: "/services/v1/lease"}, http.StatusMethodNotAllowed},
		{harness.Request{Method: http.MethodGet, Path: "/no/such/endpoint"}, http.StatusNotFound},
		{harness.Request{Method: http.MethodGet, Path: "/debug/pprof", Key: key}, http.StatusNotFound},
		{harness.Request{Method: http.MethodGet, Path: "/services/v1/queue/not-an-id", Header: http.Header{"Authorization": {"Bearer " + randHex(t, 32)}}}, http.StatusNotFound},
		{harness.Request{Method: http.MethodPost, Path: "/services/v1/queue/" + randHex(t, 16) + "/jobs/" + randHex(t, 16) + "/finish", JSON: map[string]any{}}, http.StatusNotFound},
		{harness.Request{Method: http.MethodPost, Path: "/services/v1/lease/namespace"}, http.StatusOK},
	} {
		r, err := n.Do(context.Background(), tc.rq)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != tc.status {
			t.Errorf("%s %s: %s, want HTTP %d", tc.rq.Method, tc.rq.Path, r, tc.status)
		}
	}
}
