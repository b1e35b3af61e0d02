package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/server/service"
)

// TestStorageReplies: a request refused for a node's storage answers 507
// naming the node and the kind of file (nothing changed, retry later); one
// whose outcome a failed log made unknown answers 503 "unknown" naming it.
// Both bodies are what the OpenAPI document describes.
func TestStorageReplies(t *testing.T) {
	doc := loadOpenAPI(t)
	se := &cluster.StorageError{NodeID: "n2", Kind: cluster.StorageLog, Err: fmt.Errorf("raftlog: append to /d/raft-log/1.seg: %w", syscall.ENOSPC)}
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		schema     string
		outcome    string
		mustSay    []string
		retryAfter int
	}{
		{"no space", fmt.Errorf("propose: %w", se), http.StatusInsufficientStorage, "StorageError", "not_applied",
			[]string{"node n2", "raft-log", "no space left on device", "nothing was changed"}, 1},
		{"poisoned", fmt.Errorf("%w: %w", cluster.ErrOutcomeUnknown, se), http.StatusServiceUnavailable, "RetryLaterError", "unknown",
			[]string{"node n2", "raft-log", "may or may not have taken effect"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := errorReply(service.ClusterError(tc.err))
			if r.Status != tc.status || r.RetryAfter != tc.retryAfter {
				t.Fatalf("status %d retry-after %d, want %d %d", r.Status, r.RetryAfter, tc.status, tc.retryAfter)
			}
			b, err := r.body(nil)
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatal(err)
			}
			if err := doc.Components.Schemas[tc.schema].Value.VisitJSON(body); err != nil {
				t.Errorf("body %s does not match schema %s: %v", b, tc.schema, err)
			}
			msg, _ := body["error"].(string)
			for _, want := range tc.mustSay {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
			if strings.Contains(msg, "/d/raft-log") {
				t.Errorf("error %q shows the node's file path to a client", msg)
			}
			if body["outcome"] != tc.outcome {
				t.Errorf("outcome %v, want %s", body["outcome"], tc.outcome)
			}
		})
	}
	if r := errorReply(service.ClusterError(errors.New("other"))); r.Status != http.StatusServiceUnavailable {
		t.Errorf("an unrelated error: %d", r.Status)
	}
}
