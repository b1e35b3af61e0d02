//go:build unix

package test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/test/harness"
)

// Strict request decoding (README: "Request decoding"), end to end: every
// body and every MCP tool's arguments refuse duplicate member names at any
// depth, member names that match a field only in case, and strings that
// are not valid UTF-8; keys and fingerprints refuse C1 control characters.
// Each refused request changes nothing, which each scenario checks after.

// decodeMark is in every value and inner member name these scenarios send
// in a refused request: no error message may contain it.
const decodeMark = "S3CRET"

// expectRefused checks a 400 naming field whose message says want and
// echoes no value.
func expectRefused(t *testing.T, what string, a *answer, field, want string) {
	t.Helper()
	if expectError(t, what, a, http.StatusBadRequest, field, nil, want) && strings.Contains(str(t, what, a.m, "error"), decodeMark) {
		t.Errorf("%s: the error echoes a value: %s", what, a)
	}
}

func rawPost(path, body string) call {
	return call{method: http.MethodPost, path: path, raw: []byte(body)}
}

// decodeLease: acquire, complete and renew bodies with duplicate, case
// variant and non-UTF-8 members, and C1 characters in keys and
// fingerprints, are refused; the keys they named stay free.
func decodeLease(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	nsm := fmt.Sprintf(`"namespace":%q`, ns)
	key := func(label string) string { return decodeMark + ":" + label + ":" + randHex(t, 8) }
	k1, k2, kUpper := key("first"), key("second"), key("upper")
	// Two keys differing only in a byte that is not UTF-8, and the key
	// encoding/json would have made of both: U+FFFD in their place.
	prefix, suffix := decodeMark+":invalid:"+randHex(t, 8)+":", ":"+randHex(t, 4)
	replaced := prefix + "\uFFFD" + suffix
	rows := []struct {
		name, body, field, want string
	}{
		{"duplicate key", fmt.Sprintf(`{%s,"key":%q,"key":%q}`, nsm, k1, k2), "key", `duplicate field "key"`},
		{"duplicate key, escaped", fmt.Sprintf(`{%s,"key":%q,"\u006bey":%q}`, nsm, k1, k2), "key", `duplicate field "key"`},
		{"duplicate namespace", fmt.Sprintf(`{%s,%s,"key":%q}`, nsm, nsm, k1), "namespace", `duplicate field "namespace"`},
		{"KEY instead of key", fmt.Sprintf(`{%s,"KEY":%q}`, nsm, kUpper), "KEY", `unknown field "KEY"`},
		{"Key beside key", fmt.Sprintf(`{%s,"key":%q,"Key":%q}`, nsm, k1, k2), "Key", `unknown field "Key"`},
		{"namespaced key with byte 0xff", `{` + nsm + `,"key":"` + prefix + "\xff" + suffix + `"}`, "key", "UTF-8"},
		{"namespaced key with byte 0xfe", `{` + nsm + `,"key":"` + prefix + "\xfe" + suffix + `"}`, "key", "UTF-8"},
		{"namespaced key with a lone surrogate", `{` + nsm + `,"key":"` + prefix + `\ud800` + suffix + `"}`, "key", "UTF-8"},
		{"fingerprint with byte 0xff", fmt.Sprintf(`{%s,"key":%q,"fingerprint":"%s`, nsm, k1, decodeMark) + "\xff\"}", "fingerprint", "UTF-8"},
		{"member name not UTF-8", fmt.Sprintf(`{%s,"key":%q,"%s`, nsm, k1, decodeMark) + "\xff\":1}", "body", "UTF-8"},
		{"key with C1 U+0085, escaped", fmt.Sprintf(`{%s,"key":"%s\u0085x"}`, nsm, k1), "key", "must not contain control characters"},
		{"key with C1 U+0085, raw", fmt.Sprintf(`{%s,"key":"%s`, nsm, k1) + "\u0085" + `x"}`, "key", "must not contain control characters"},
		{"key with C1 U+009F, raw", fmt.Sprintf(`{%s,"key":"%s`, nsm, k1) + "\u009f" + `x"}`, "key", "must not contain control characters"},
		{"fingerprint with C1 U+0085, escaped", fmt.Sprintf(`{%s,"key":%q,"fingerprint":"%s\u0085"}`, nsm, k1, decodeMark), "fingerprint", "must not contain control characters"},
		{"fingerprint with C1 U+0085, raw", fmt.Sprintf(`{%s,"key":%q,"fingerprint":"%s`, nsm, k1, decodeMark) + "\u0085\"}", "fingerprint", "must not contain control characters"},
	}
	for _, r := range rows {
		expectRefused(t, r.name, e.do(t, n, rawPost("/lease", r.body)), r.field, r.want)
	}
	// No refused acquire took a key: each is granted now, the U+FFFD one
	// included, so the invalid bytes never named its lease.
	for _, k := range []string{k1, k2, kUpper, replaced} {
		checkGranted(t, "acquire a key only refused requests named", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": k})), 60)
	}

	// Owner bodies: a duplicate owner_token or result, or one inside the
	// result, leaves the lease held and its result unset.
	hk := key("held")
	g := checkGranted(t, "acquire", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": hk})), 60)
	own := fmt.Sprintf(`%s,"key":%q,"owner_token":%q`, nsm, hk, g.owner)
	for _, r := range []struct {
		name, path, body, field, want string
	}{
		{"complete with a duplicate inside result", "/lease/complete", `{` + own + `,"result":{"a":[{"` + decodeMark + `":1,"` + decodeMark + `":2}]}}`, "result", "duplicate member name"},
		{"complete with result twice", "/lease/complete", `{` + own + `,"result":{"n":1},"result":{"n":2}}`, "result", `duplicate field "result"`},
		{"complete with owner_token twice", "/lease/complete", `{` + own + `,"owner_token":"own_` + strings.Repeat("A", 43) + `","result":1}`, "owner_token", `duplicate field "owner_token"`},
		{"complete with a result not UTF-8", "/lease/complete", `{` + own + `,"result":"` + decodeMark + "\xc0\xaf" + `"}`, "result", "UTF-8"},
		{"renew with TTL_SECONDS", "/lease/renew", `{` + own + `,"TTL_SECONDS":5}`, "TTL_SECONDS", `unknown field "TTL_SECONDS"`},
		{"release with key twice", "/lease/release", `{` + own + fmt.Sprintf(`,"key":%q}`, hk), "key", `duplicate field "key"`},
	} {
		expectRefused(t, r.name, e.do(t, n, rawPost(r.path, r.body)), r.field, r.want)
	}
	h := checkHeld(t, "acquire after refused owner requests", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": hk})))
	if h.fence != g.fence || h.exp != g.exp {
		t.Errorf("after refused owner requests: fence %d expiry %d, want %d %d", h.fence, h.exp, g.fence, g.exp)
	}
}

// decodeQueue: enqueue, claim and ack bodies with duplicates (a payload's
// own members included), case variants and non-UTF-8 strings are refused,
// and the queue stays empty.
func decodeQueue(t *testing.T, e *apiEnv, n *harness.Node) {
	q := e.createQueue(t, n)
	jobs := "/queue/" + q.id + "/jobs"
	claim := "/queue/" + q.id + "/claim"
	ack := "/queue/" + q.id + "/jobs/" + randHex(t, 16) + "/ack"
	rows := []struct {
		name, path, token, body, field, want string
	}{
		{"enqueue with a duplicate inside payload", jobs, q.write, `{"job_key":"d1","payload":{"` + decodeMark + `":1,"` + decodeMark + `":2}}`, "payload", "duplicate member name"},
		{"enqueue with a duplicate deep inside payload", jobs, q.write, `{"job_key":"d2","payload":[{"a":{"` + decodeMark + `":1,"b":0,"` + decodeMark + `":1}}]}`, "payload", "duplicate member name"},
		{"enqueue with payload twice", jobs, q.write, `{"job_key":"d3","payload":{"n":1},"payload":{"n":2}}`, "payload", `duplicate field "payload"`},
		{"enqueue with job_key twice", jobs, q.write, `{"job_key":"d4","job_key":"d5","payload":1}`, "job_key", `duplicate field "job_key"`},
		{"enqueue with JOB_KEY", jobs, q.write, `{"JOB_KEY":"d6","payload":1}`, "JOB_KEY", `unknown field "JOB_KEY"`},
		{"enqueue with Payload", jobs, q.write, `{"job_key":"d7","Payload":1}`, "Payload", `unknown field "Payload"`},
		{"enqueue with a payload string not UTF-8", jobs, q.write, `{"job_key":"d8","payload":{"s":"` + decodeMark + "\xff" + `"}}`, "payload", "UTF-8"},
		{"enqueue with a payload member name not UTF-8", jobs, q.write, `{"job_key":"d9","payload":{"` + decodeMark + "\x80" + `":1}}`, "payload", "UTF-8"},
		{"claim with visibility_timeout twice", claim, q.worker, `{"visibility_timeout":60,"visibility_timeout":30}`, "visibility_timeout", `duplicate field "visibility_timeout"`},
		{"claim with Visibility_Timeout", claim, q.worker, `{"Visibility_Timeout":60}`, "Visibility_Timeout", "unknown field"},
		{"ack with receipt twice", ack, q.worker, fmt.Sprintf(`{"receipt":%q,"receipt":%q}`, randHex(t, 32), randHex(t, 32)), "receipt", `duplicate field "receipt"`},
		{"ack with a receipt not UTF-8", ack, q.worker, `{"receipt":"` + strings.Repeat("a", 63) + "\xff" + `"}`, "receipt", "UTF-8"},
	}
	for _, r := range rows {
		expectRefused(t, r.name, e.do(t, n, call{method: http.MethodPost, path: r.path, token: r.token, raw: []byte(r.body)}), r.field, r.want)
	}
	e.expectCounts(t, n, q, "after refused requests", counts{})
}

// decodeSettings: PUT /cluster/settings (with the cluster key) with a
// setting twice or a name in another case is refused, and the settings
// stay as they were.
func decodeSettings(t *testing.T, e *apiEnv, n *harness.Node) {
	get := func(what string) map[string]any {
		a := e.do(t, n, call{method: http.MethodGet, path: "//cluster/settings"})
		expectStatus(t, what, a, http.StatusOK)
		return object(t, what, a.m, "settings")
	}
	before := get("settings before")
	withKey := http.Header{harness.KeyHeader: {e.key}}
	for _, r := range []struct {
		name, body, field, want string
	}{
		{"a setting twice", `{"queues_per_client":10001,"queues_per_client":10002}`, "queues_per_client", `duplicate field "queues_per_client"`},
		{"a setting twice, escaped", `{"queues_per_client":10007,"\u0071ueues_per_client":10008}`, "queues_per_client", `duplicate field "queues_per_client"`},
		{"a setting in upper case", `{"QUEUES_PER_CLIENT":10003}`, "QUEUES_PER_CLIENT", `unknown field "QUEUES_PER_CLIENT"`},
		{"a case variant beside a setting", `{"queues_per_client":10004,"Queues_per_client":10005}`, "Queues_per_client", `unknown field "Queues_per_client"`},
		{"a member name not UTF-8", "{\"queues_per_client\":10006,\"" + decodeMark + "\xff\":1}", "body", "UTF-8"},
	} {
		a := e.do(t, n, call{method: http.MethodPut, path: "//cluster/settings", raw: []byte(r.body), header: withKey})
		expectRefused(t, "PUT settings with "+r.name, a, r.field, r.want)
	}
	after := get("settings after refused changes")
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("settings changed after only refused PUTs:\n before %v\n after  %v", before, after)
	}
}

// decodeMCP: tool calls sent as raw JSON-RPC (an SDK client cannot send
// duplicate names or invalid UTF-8) with a duplicate argument, KEY for
// key, invalid UTF-8 or a duplicate inside a payload are invalid-params
// protocol errors naming the argument and the rule, and change nothing.
func decodeMCP(t *testing.T, e *apiEnv, n *harness.Node) {
	ns := e.newNamespace(t, n)
	q := e.createQueue(t, n)
	key := func(label string) string { return decodeMark + ":mcp-" + label + ":" + randHex(t, 8) }
	k1, k2, kUpper := key("first"), key("second"), key("upper")
	prefix := decodeMark + ":mcp-invalid:" + randHex(t, 8)
	nsm := fmt.Sprintf(`"namespace":%q`, ns)
	queue := fmt.Sprintf(`"queue_id":%q,"write_token":%q`, q.id, q.write)
	for _, r := range []struct {
		name, tool, args, want string
	}{
		{"duplicate key", "acquire_lease", fmt.Sprintf(`{%s,"key":%q,"key":%q}`, nsm, k1, k2), `argument "key" is given more than once`},
		{"KEY instead of key", "acquire_lease", fmt.Sprintf(`{%s,"KEY":%q}`, nsm, kUpper), `unknown argument "KEY"`},
		{"key not UTF-8", "acquire_lease", `{` + nsm + `,"key":"` + prefix + "\xff" + `"}`, `argument "key" must be valid UTF-8`},
		{"key with a lone surrogate", "acquire_lease", `{` + nsm + `,"key":"` + prefix + `\udbff"}`, `argument "key" must be valid UTF-8`},
		{"duplicate inside payload", "enqueue_agent_queue_job", `{` + queue + `,"job_key":"m1","payload":{"` + decodeMark + `":1,"` + decodeMark + `":2}}`, `argument "payload" holds an object with a duplicate member name`},
		{"duplicate job_key", "enqueue_agent_queue_job", `{` + queue + `,"job_key":"m2","job_key":"m3","payload":1}`, `argument "job_key" is given more than once`},
		{"payload not UTF-8", "enqueue_agent_queue_job", `{` + queue + `,"job_key":"m4","payload":"` + decodeMark + "\xfe" + `"}`, `argument "payload" must be valid UTF-8`},
	} {
		what := "MCP " + r.tool + " with " + r.name
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + r.tool + `","arguments":` + r.args + `}}`
		a := e.send(t, nil, n, call{method: http.MethodPost, path: "//mcp", raw: []byte(body),
			header: http.Header{"Accept": {"application/json, text/event-stream"}}})
		expectStatus(t, what, a, http.StatusOK)
		var rpc struct {
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(a.Body, &rpc); err != nil {
			t.Fatalf("%s: %v: %s", what, err, a)
		}
		switch {
		case rpc.Error == nil:
			t.Errorf("%s: want an invalid-params error, got the result %s", what, rpc.Result)
		case rpc.Error.Code != -32602 || !strings.Contains(rpc.Error.Message, r.want):
			t.Errorf("%s: error %d %q, want -32602 containing %q", what, rpc.Error.Code, rpc.Error.Message, r.want)
		case strings.Contains(rpc.Error.Message, decodeMark):
			t.Errorf("%s: the error echoes a value: %q", what, rpc.Error.Message)
		}
	}
	for _, k := range []string{k1, k2, kUpper, prefix + "\uFFFD"} {
		checkGranted(t, "acquire a key only refused tool calls named", e.do(t, n, post("/lease", map[string]any{"namespace": ns, "key": k})), 60)
	}
	e.expectCounts(t, n, q, "after refused tool calls", counts{})
}
