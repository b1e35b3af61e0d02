package harness

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// checkerCase is one answer to one request and whether the document
// describes it.
type checkerCase struct {
	name, method, path string
	status             int
	header             http.Header
	body               string
	ok                 bool
}

var jsonHeader = http.Header{"Content-Type": {"application/json; charset=utf-8"}}

func withHeader(k, v string) http.Header {
	h := jsonHeader.Clone()
	h.Set(k, v)
	return h
}

const (
	namespaceBody = `{"entropy_bits":256,"namespace":"ns_GP4ejHc6N5hOpUbfqoay4QsfV315TP9lSnzHxRpr4f8","ok":true}`
	jobBody       = `{"job":{"attempts":1,"completed_at_timestamp":1796150780,"created_at_timestamp":1796150771,"expire_timestamp":1796237170,"job_id":"6813593a8c578c1fa057b11b58343986","job_key":"report:42","payload":{"report_id":42},"status":"completed","updated_at_timestamp":1796150780},"ok":true}`
	queuePath     = "/services/v1/queue/51fe14e4c051ccf8af458fed70949a7d"
)

var checkerCases = []checkerCase{
	{"namespace", http.MethodPost, "/services/v1/lease/namespace", 200, jsonHeader, namespaceBody, true},
	{"undocumented field", http.MethodPost, "/services/v1/lease/namespace", 200, jsonHeader,
		strings.Replace(namespaceBody, `"ok":true`, `"ok":true,"extra":1`, 1), false},
	{"missing field", http.MethodPost, "/services/v1/lease/namespace", 200, jsonHeader, `{"ok":true,"entropy_bits":256}`, false},
	{"undocumented status", http.MethodPost, "/services/v1/lease/namespace", 500, jsonHeader, `{"ok":false,"error":"internal error"}`, false},
	{"wrong content type", http.MethodPost, "/services/v1/lease/namespace", 200, http.Header{"Content-Type": {"text/plain"}}, namespaceBody, false},
	{"validation error", http.MethodPost, "/services/v1/lease", 400, jsonHeader, `{"error":"key is required","field":"key","ok":false}`, true},
	{"held", http.MethodPost, "/services/v1/lease/acquire", 409, withHeader("Retry-After", "60"),
		`{"absolute_expires_at":"2026-12-02T18:45:49Z","absolute_expires_at_timestamp":1796237149,"error":"Lease is held","fencing_token":1,"lease_expires_at":"2026-12-01T18:46:49Z","lease_expires_at_timestamp":1796150809,"ok":false,"retry_after_seconds":60,"status":"held"}`, true},
	{"lost is not an acquire answer", http.MethodPost, "/services/v1/lease", 409, jsonHeader, `{"error":"x","ok":false,"status":"lost"}`, false},
	{"503 without Retry-After", http.MethodPost, "/services/v1/queue", 503, jsonHeader,
		`{"error":"x","ok":false,"outcome":"not_applied","retry_after_seconds":1}`, false},
	{"503 outcome", http.MethodPost, "/services/v1/queue", 503, withHeader("Retry-After", "1"),
		`{"error":"x","ok":false,"outcome":"maybe","retry_after_seconds":1}`, false},
	{"job read", http.MethodGet, queuePath + "/jobs/6813593a8c578c1fa057b11b58343986", 200, jsonHeader, jobBody, true},
	{"a read never carries a receipt", http.MethodGet, queuePath + "/jobs/6813593a8c578c1fa057b11b58343986", 200, jsonHeader,
		strings.Replace(jobBody, `"job_key"`, `"receipt":"`+strings.Repeat("ab", 32)+`","job_key"`, 1), false},
	{"completed without its time", http.MethodGet, queuePath + "/jobs/6813593a8c578c1fa057b11b58343986", 200, jsonHeader,
		strings.Replace(jobBody, `"completed_at_timestamp":1796150780,`, "", 1), false},
	{"401 with the challenge", http.MethodGet, queuePath, 401, withHeader("WWW-Authenticate", `Bearer realm="holdfast"`), `{"error":"x","ok":false}`, true},
	{"401 without the challenge", http.MethodGet, queuePath, 401, jsonHeader, `{"error":"x","ok":false}`, false},
	{"unknown path", http.MethodPost, "/services/v1/nothing", 404, jsonHeader, `{"error":"no such endpoint","ok":false}`, true},
	{"unknown path answered", http.MethodPost, "/services/v1/nothing", 200, jsonHeader, `{"ok":true}`, false},
	{"wrong method", http.MethodGet, queuePath + "/jobs", 405, withHeader("Allow", "POST"), `{"error":"method not allowed on this endpoint","ok":false}`, true},
	{"wrong method without Allow", http.MethodGet, "/services/v1/lease", 405, jsonHeader, `{"error":"method not allowed on this endpoint","ok":false}`, false},
	{"metrics", http.MethodGet, "/metrics", 200, http.Header{"Content-Type": {"text/plain; version=0.0.4; charset=utf-8"}}, "# HELP x\n", true},
	{"pprof index", http.MethodGet, "/debug/pprof/", 200, http.Header{"Content-Type": {"text/html; charset=utf-8"}}, "<html></html>", true},
	{"pprof profile", http.MethodGet, "/debug/pprof/heap", 200, http.Header{"Content-Type": {"application/octet-stream"}}, "\x1f\x8b", true},
}

// TestOpenAPICheckerJudgesAnswers runs the checker on answers the service
// gives and on answers it must not give, against server/openapi.json.
func TestOpenAPICheckerJudgesAnswers(t *testing.T) {
	chk, err := LoadOpenAPIChecker(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range checkerCases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://127.0.0.1:1"+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = chk.Check(req, tc.status, tc.header, []byte(tc.body))
			switch {
			case tc.ok && err != nil:
				t.Errorf("a documented answer is refused: %v", err)
			case !tc.ok && err == nil:
				t.Errorf("an undocumented answer passes: HTTP %d %v %s", tc.status, tc.header, tc.body)
			}
		})
	}
}

// BenchmarkOpenAPICheck measures the check of one answer, which every
// request of the end-to-end tests pays.
func BenchmarkOpenAPICheck(b *testing.B) {
	chk, err := LoadOpenAPIChecker(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, "http://127.0.0.1:1"+queuePath+"/jobs/6813593a8c578c1fa057b11b58343986", nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := chk.Check(req, 200, jsonHeader, []byte(jobBody)); err != nil {
			b.Fatal(err)
		}
	}
}
