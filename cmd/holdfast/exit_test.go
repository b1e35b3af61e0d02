package main

import (
	"net/http"
	"testing"

	"github.com/holdfast/holdfast/internal/client"
)

// TestExitForInsufficientStorage: a 507 naming a node's storage is "try
// later" (nothing happened, another node may lead by then); a 507 for the
// cluster's max_leases or max_queues stays a failure.
func TestExitForInsufficientStorage(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"ok":false,"error":"node n1 cannot write its raft-log","outcome":"not_applied","node_id":"n1","storage":"raft-log","retry_after_seconds":1}`, exitLater},
		{`{"ok":false,"error":"the cluster holds its maximum","status":"limit_reached","setting":"max_leases","limit":10}`, exitFailed},
	} {
		r := &client.Response{Status: http.StatusInsufficientStorage, Body: []byte(tc.body)}
		if got := exitFor(r); got != tc.want {
			t.Errorf("exitFor(507 %s) = %d, want %d", tc.body, got, tc.want)
		}
	}
}
