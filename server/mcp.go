package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/server/service"
)

// MCPPath is the path of the MCP endpoint (Streamable HTTP, stateless, JSON
// responses) served by every node.
const MCPPath = "/mcp"

// mcpBodyLimit bounds an MCP request body. It is larger than apiBodyLimit
// only by room for the JSON-RPC envelope; the REST body a tool call becomes
// is never larger than its arguments.
const mcpBodyLimit = 1 << 20

// HTTPStatusField is the field every tool result's structured content
// carries: the HTTP status the REST API answers the same request with, so
// an agent can branch on it exactly as a REST client would.
const HTTPStatusField = "http_status"

// mcpInstructions is sent to clients when they connect.
const mcpInstructions = `holdfast: replicated leases (one worker does a job; fencing tokens stop stale workers) and job queues (at-least-once delivery).
Every tool result's structured content is the REST API's JSON body plus "http_status", the HTTP status the REST API would answer. isError is true whenever http_status is not 2xx: read "status", "reason" and "error" to decide what to do next.
http_status 503 with outcome "not_applied": nothing changed, call again after retry_after_seconds. outcome "unknown": the call may or may not have taken effect; read the state, or repeat it only if repeating is safe.
http_status 507 with "storage": node "node_id" cannot write its files; nothing changed, call again after retry_after_seconds (another node may lead by then).
Namespaces, lease keys, fingerprints, owner tokens, queue tokens and receipts are secrets: keep them in your own state, never in logs, URLs or job payloads.`

// mcpCallerKey is the context key of the mcpCaller of an MCP request.
type mcpCallerKey struct{}

// mcpCaller is what a tool handler needs to know about the HTTP request
// that carried the call.
type mcpCaller struct {
	clientIP string
	// request is the HTTP request's context: it ends when the client
	// goes away, which the SDK's handler context does not learn.
	request context.Context
}

// routeMCP registers the MCP endpoint. Only POST is routed: a stateless
// server has no event stream to GET and no session to DELETE, and other
// methods get the router's JSON 405.
func (s *Server) routeMCP() {
	srv := mcp.NewServer(&mcp.Implementation{Name: "holdfast", Title: "holdfast leases and job queues", Version: "1"}, &mcp.ServerOptions{
		Instructions: mcpInstructions,
		// No logger: the SDK would log request details, and tool arguments
		// carry secrets. A nil logger discards everything.
		Logger: nil,
		// Tools only; the list never changes; no logging capability.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, t := range mcpTools() {
		srv.AddTool(t.mcpTool(), s.toolHandler(t))
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:           true,
		JSONResponse:        true,
		Logger:              nil, // see above: never log requests
		MaxRequestBodyBytes: mcpBodyLimit,
	})
	serve := func(c *gin.Context) {
		// A tool call may wait (wait_seconds): the answer may come after the
		// listener's write timeout.
		_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(s.cfg.RequestTimeout + service.MaxAcquireWaitSeconds*time.Second + 5*time.Second))
		ctx := context.WithValue(c.Request.Context(), mcpCallerKey{}, mcpCaller{clientIP: s.clientIP(c), request: c.Request.Context()})
		h.ServeHTTP(c.Writer, c.Request.WithContext(ctx))
	}
	s.engine.POST(MCPPath, refuseCrossOrigin(), s.limit(), s.bufferBody(mcpBodyLimit), checkEnvelope(), serve)
}

// refuseCrossOrigin answers 403 to any request a browser sent on behalf of
// a web page: one with an Origin header, or with Sec-Fetch-Site saying
// another site made it. holdfast serves no web pages, so no origin is ever
// "same origin", and comparing Origin with Host would let a DNS-rebinding
// page through. MCP clients that are programs (CLIs, agents, servers) send
// no Origin and are unaffected.
func refuseCrossOrigin() gin.HandlerFunc {
	return func(c *gin.Context) {
		_, hasOrigin := c.Request.Header["Origin"]
		site := c.GetHeader("Sec-Fetch-Site")
		if hasOrigin || site == "cross-site" || site == "same-site" {
			fail(c, http.StatusForbidden, "cross-origin requests are refused: "+MCPPath+" is for MCP clients, not web pages (requests with an Origin header are rejected)")
			return
		}
		c.Next()
	}
}

// checkEnvelope answers a body that is not one JSON value, or a JSON-RPC
// batch, with a JSON-RPC error before the SDK sees it. The SDK's own answer
// to malformed JSON quotes the body, and tool arguments carry secrets; the
// current MCP specification has no batching, and one HTTP request must be
// one call so the per-address limit counts calls.
func checkEnvelope() gin.HandlerFunc {
	return func(c *gin.Context) {
		body := bufferedBody(c)
		if !json.Valid(body) {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"jsonrpc": "2.0", "id": nil,
				"error": gin.H{"code": jsonrpc.CodeParseError, "message": "the body is not one JSON value (malformed, or followed by more data)"}})
			return
		}
		if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] == '[' {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"jsonrpc": "2.0", "id": nil,
				"error": gin.H{"code": jsonrpc.CodeInvalidRequest, "message": "JSON-RPC batches are not supported: send one request per HTTP request"}})
			return
		}
		c.Next()
	}
}

// toolHandler validates a call's arguments (a failure is a JSON-RPC
// invalid-params error, the only protocol error a tool returns) and runs the
// tool, turning the service layer's reply into the tool result.
func (s *Server) toolHandler(t *toolDef) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (res *mcp.CallToolResult, err error) {
		// The SDK runs handlers outside gin's recovery: a panic must not
		// take the node down.
		defer func() {
			if rec := recover(); rec != nil {
				s.log.Error("tool handler panic", "tool", t.name, "panic", rec)
				res, err = toolResult(replyJSON(errReply(http.StatusInternalServerError, "internal error", nil))), nil
			}
		}()
		var raw json.RawMessage
		if req.Params != nil {
			raw = req.Params.Arguments
		}
		args, perr := t.parseArgs(raw)
		if perr != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: perr.Error()}
		}
		body, berr := args.restBody(t.body)
		if berr != nil {
			return nil, fmt.Errorf("tool %s: encode the request: %w", t.name, berr)
		}
		caller, _ := ctx.Value(mcpCallerKey{}).(mcpCaller)
		call := &toolCall{args: args, body: body, clientIP: caller.clientIP}
		// A waiting tool call may take its wait_seconds more; the caller's
		// cancellation (notifications/cancelled, or the connection closing)
		// ends ctx, and with it the wait here or on the leader.
		ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout+time.Duration(args.waitSeconds())*time.Second)
		defer cancel()
		if caller.request != nil {
			defer context.AfterFunc(caller.request, cancel)()
		}
		status, out := s.runTool(ctx, t, call)
		return toolResult(status, out), nil
	}
}

// runTool runs a tool where the REST API would: through the service, which
// runs leader-only tools on the leader (here, or over the peer link), or,
// when the leader refused this node a link, as the equivalent REST request
// sent once to the leader. It returns the HTTP status and JSON body the REST
// API answers with.
func (s *Server) runTool(ctx context.Context, t *toolDef, call *toolCall) (int, []byte) {
	if !t.leaderOnly {
		return replyJSON(t.local(ctx, s, call))
	}
	addr, bad := s.svc.RESTForwardTarget(ctx, false)
	switch {
	case bad != nil:
		return replyJSON(errorReply(bad))
	case addr == "":
		return replyJSON(t.local(ctx, s, call))
	}
	req := leaderRequest{
		method:   t.method,
		uri:      APIPrefix + t.path(call.args),
		header:   http.Header{"Accept": {"application/json"}},
		clientIP: call.clientIP,
		route:    MCPPath + " " + t.name,
	}
	if t.method != http.MethodGet {
		req.header.Set("Content-Type", "application/json")
		req.body = bytes.NewReader(call.body)
		req.contentLength = int64(len(call.body))
	}
	if t.bearer != "" {
		req.header.Set("Authorization", "Bearer "+call.args.str(t.bearer))
	}
	ans, lost := s.sendToLeader(ctx, addr, req)
	if lost != nil {
		return replyJSON(*lost)
	}
	return ans.status, ans.body
}

// replyJSON encodes a reply's body as the REST API would send it.
func replyJSON(r reply) (int, []byte) {
	b, err := r.body(nil)
	if err != nil {
		b, _ = jsonenc.Encode(jsonenc.H{"ok": false, "error": "internal error: the answer could not be encoded"})
		return http.StatusInternalServerError, b
	}
	return r.Status, b
}

// toolResult turns a REST status and body into a tool result: structured
// content is the body plus http_status, a text content carries the same
// JSON, and isError is set for every status outside 2xx.
func toolResult(status int, body []byte) *mcp.CallToolResult {
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		msg, _ := json.Marshal(fmt.Sprintf("the leader answered HTTP %d with a body that is not a JSON object", status))
		fields = map[string]json.RawMessage{"ok": json.RawMessage("false"), "error": msg}
	}
	fields[HTTPStatusField] = json.RawMessage(strconv.Itoa(status))
	out, err := jsonenc.Encode(fields)
	if err != nil {
		out = []byte(`{"ok":false,"error":"internal error: the answer could not be encoded","` + HTTPStatusField + `":500}`)
		status = http.StatusInternalServerError
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(out)}},
		StructuredContent: json.RawMessage(out),
		IsError:           status < 200 || status > 299,
	}
}

// toolCall is one validated tool call.
type toolCall struct {
	args toolArgs
	// body is the REST request body the arguments make.
	body     []byte
	clientIP string
}

// decode decodes the call's REST body into dst exactly as the REST handler
// does, so both transports share one decoding.
func (c *toolCall) decode(dst any) *reply {
	if err := decodeStrict(c.body, dst); err != nil {
		var be *bodyError
		if errors.As(err, &be) {
			r := errReply(be.status, be.msg, nil)
			return &r
		}
		r := errReply(http.StatusBadRequest, err.Error(), nil)
		return &r
	}
	return nil
}

// queueAuth validates the queue id and the role token named by tokenArg.
func (c *toolCall) queueAuth(tokenArg string) (service.QueueAuth, *reply) {
	a, err := service.ParseQueueAuth(c.args.str("queue_id"), c.args.str(tokenArg), true)
	if err != nil {
		r := errorReply(err)
		return a, &r
	}
	return a, nil
}

// toolArgs are a call's arguments, each still raw JSON, after validation.
type toolArgs map[string]json.RawMessage

// str returns a string argument ("" when absent).
func (a toolArgs) str(name string) string {
	var v string
	if raw, ok := a[name]; ok {
		_ = json.Unmarshal(raw, &v) // validated as a string already
	}
	return v
}

// waitSeconds returns the wait_seconds argument (0 when absent); the schema
// has bounded it already.
func (a toolArgs) waitSeconds() int64 {
	var v int64
	if raw, ok := a["wait_seconds"]; ok {
		_ = json.Unmarshal(raw, &v)
	}
	return v
}

// restBody builds the REST body from the named arguments that are present.
func (a toolArgs) restBody(names []string) ([]byte, error) {
	body := make(map[string]json.RawMessage, len(names))
	for _, n := range names {
		if v, ok := a[n]; ok {
			body[n] = v
		}
	}
	return jsonenc.Encode(body)
}

// escapedID path-escapes an id argument (already checked against its
// pattern, so escaping is only a safeguard).
func (a toolArgs) escapedID(name string) string { return url.PathEscape(a.str(name)) }
