package server_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/server"
)

// apiCall sends one API request and checks its status.
func apiCall(b *testing.B, method, url, token, body string, want int) map[string]any {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != want {
		b.Fatalf("%s %s: %d %v %v, want %d", method, url, resp.StatusCode, out, err, want)
	}
	return out
}

// BenchmarkAPI runs the API's hot paths over loopback on a three-node
// cluster, on the leader and on a follower (through the peer link). An
// iteration of lease is an acquire that is granted, one that finds the
// lease held and the owner's release; of queue, an enqueue, a claim and
// its ack.
func BenchmarkAPI(b *testing.B) {
	nodes := startCluster(b, io.Discard)
	// Every queue comes from 127.0.0.1: lift the per-client quota, so that
	// -count and -benchtime may ask for as many as they need.
	req, err := http.NewRequest(http.MethodPut, nodes[0].url+"/cluster/settings", strings.NewReader(`{"queues_per_client":100000000}`))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Holdfast-Cluster-Key", "mcp-test-cluster-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("raising queues_per_client: %v %v", resp, err)
	}
	resp.Body.Close()
	for _, n := range []struct {
		name string
		url  string
	}{{"leader", nodes[0].url}, {"follower", nodes[1].url}} {
		api := n.url + server.APIPrefix
		b.Run(n.name+"/lease", func(b *testing.B) {
			ns := apiCall(b, http.MethodPost, api+"/lease/namespace", "", "", http.StatusOK)["namespace"].(string)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				acquire := fmt.Sprintf(`{"namespace":%q,"key":"bench:%d","ttl_seconds":60}`, ns, i)
				owner := apiCall(b, http.MethodPost, api+"/lease", "", acquire, http.StatusCreated)["owner_token"].(string)
				apiCall(b, http.MethodPost, api+"/lease", "", acquire, http.StatusConflict)
				apiCall(b, http.MethodPost, api+"/lease/release", "", fmt.Sprintf(`{"namespace":%q,"key":"bench:%d","owner_token":%q}`, ns, i, owner), http.StatusOK)
				i++
			}
		})
		b.Run(n.name+"/queue", func(b *testing.B) {
			b.ReportAllocs()
			var q map[string]any
			for i := 0; b.Loop(); i++ {
				if i%100 == 0 { // a queue holds at most 100 distinct jobs
					q = apiCall(b, http.MethodPost, api+"/queue", "", "", http.StatusCreated)
				}
				base := api + "/queue/" + q["queue_id"].(string)
				write, worker := q["write_token"].(string), q["worker_token"].(string)
				apiCall(b, http.MethodPost, base+"/jobs", write, fmt.Sprintf(`{"job_key":"j%d","payload":{"n":%d}}`, i, i), http.StatusCreated)
				job := apiCall(b, http.MethodPost, base+"/claim", worker, "", http.StatusOK)["job"].(map[string]any)
				apiCall(b, http.MethodPost, base+"/jobs/"+job["job_id"].(string)+"/ack", worker, fmt.Sprintf(`{"receipt":%q}`, job["receipt"]), http.StatusOK)
			}
		})
	}
}
