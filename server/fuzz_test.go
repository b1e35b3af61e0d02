package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/server/service"
)

// FuzzDecodeBody decodes arbitrary bytes into every body type, directly and
// as a handler binds a request body. Whatever the bytes, nothing panics, a
// refusal is a 4xx bodyError whose message and field are valid UTF-8, and
// the client's answer is a 4xx JSON error.
func FuzzDecodeBody(f *testing.F) {
	types := append(bodyTypes(), bodyType{name: "empty object", newValue: newOf[struct{}](), limit: apiBodyLimit, allowEmpty: true})
	for _, bt := range types {
		if len(bt.members) == 0 {
			continue
		}
		f.Add([]byte(object(bt.members...)))
		for _, c := range badBodies(bt) {
			f.Add([]byte(c.body))
		}
	}
	gin.SetMode(gin.TestMode)
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, bt := range types {
			if err := bt.decode(body); err != nil {
				var be *bodyError
				switch {
				case !errors.As(err, &be):
					t.Fatalf("%s: %q: error %T %v is not a bodyError", bt.name, body, err, err)
				case be.status < 400 || be.status > 499 || be.msg == "" || be.field == "":
					t.Fatalf("%s: %q: refused with %d %q field %q", bt.name, body, be.status, be.msg, be.field)
				case !utf8.ValidString(be.msg) || !utf8.ValidString(be.field):
					t.Fatalf("%s: %q: message %q or field %q is not valid UTF-8", bt.name, body, be.msg, be.field)
				}
			}

			w := httptest.NewRecorder()
			c, _ := gin.CreateTestContext(w)
			c.Request = httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
			c.Request.Header.Set("Content-Type", "application/json")
			if bindJSON(ginCall{c: c}, bt.limit, bt.allowEmpty, bt.newValue()) {
				continue
			}
			var ans struct {
				OK    *bool  `json:"ok"`
				Error string `json:"error"`
			}
			if w.Code < 400 || w.Code > 499 || json.Unmarshal(w.Body.Bytes(), &ans) != nil || ans.OK == nil || *ans.OK || ans.Error == "" {
				t.Fatalf("%s: %q answered %d %s, want a 4xx JSON error", bt.name, body, w.Code, w.Body)
			}
		}
	})
}

// toolBodies maps each tool whose REST request has a body to that body's
// type.
func toolBodies() map[string]func() any {
	return map[string]func() any{
		"acquire_lease":           newOf[service.AcquireLeaseRequest](),
		"renew_lease":             newOf[service.LeaseOwnerRequest](),
		"release_lease":           newOf[service.LeaseOwnerRequest](),
		"complete_lease":          newOf[service.LeaseOwnerRequest](),
		"enqueue_agent_queue_job": newOf[service.EnqueueRequest](),
		"claim_agent_queue_job":   newOf[service.ClaimRequest](),
		"ack_agent_queue_job":     newOf[service.AckJobRequest](),
		"release_agent_queue_job": newOf[service.ReleaseJobRequest](),
		"retry_agent_queue_job":   newOf[struct{}](),
		"renew_agent_queue_job":   newOf[service.RenewJobRequest](),
	}
}

// FuzzParseArgs validates arbitrary bytes as the arguments of every tool.
// Either parseArgs refuses them with a message for that tool (which the
// handler sends as a JSON-RPC invalid-params error), or they build a REST
// body that the tool's handler decodes without error: what MCP accepts,
// REST accepts too.
func FuzzParseArgs(f *testing.F) {
	tools := mcpTools()
	for _, tool := range tools {
		tool.mcpTool() // resolves the argument schemas
		valid := validArguments(tool)
		f.Add([]byte(object(valid...)))
		for _, c := range badArguments(tool, valid) {
			f.Add([]byte(c.raw))
		}
	}
	f.Add([]byte("null"))
	f.Add([]byte(`{"ttl_seconds":6e1,"key":"` + strings.Repeat("k9_", 14) + `"}`))
	bodies := toolBodies()
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, tool := range tools {
			args, err := tool.parseArgs(raw)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "tool "+tool.name+": ") || !utf8.ValidString(err.Error()) {
					t.Fatalf("%s: %q: error %q does not name the tool, or is not valid UTF-8", tool.name, raw, err)
				}
				continue
			}
			body, err := args.restBody(tool.body)
			if err != nil {
				t.Fatalf("%s: %q: accepted arguments make no REST body: %v", tool.name, raw, err)
			}
			if newValue, ok := bodies[tool.name]; ok {
				if err := decodeStrict(body, newValue()); err != nil {
					t.Fatalf("%s: %q: accepted arguments make the body %q, which the handler refuses: %v", tool.name, raw, body, err)
				}
			}
		}
	})
}
