//go:build unix

package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KeyHeader carries the cluster key (the service's cluster.KeyHeader).
const KeyHeader = "X-Holdfast-Cluster-Key"

// Member is one entry of Status.Nodes.
type Member struct {
	ID       string `json:"id"`
	HTTPAddr string `json:"http_addr"`
	RaftAddr string `json:"raft_addr"`
	Voter    bool   `json:"voter"`
	// Level and BuildVersion are what the member last reported of its
	// build (0 and "" for builds before cluster levels).
	Level        uint32 `json:"level"`
	BuildVersion string `json:"build_version"`
}

// Status is the JSON of GET /cluster/status, declared here rather than
// imported so the tests stay black-box.
type Status struct {
	NodeID         string   `json:"node_id"`
	State          string   `json:"state"`
	LeaderID       string   `json:"leader_id"`
	LeaderHTTPAddr string   `json:"leader_http_addr"`
	Term           uint64   `json:"term"`
	CommitIndex    uint64   `json:"commit_index"`
	AppliedIndex   uint64   `json:"applied_index"`
	LastLogIndex   uint64   `json:"last_log_index"`
	Ready          bool     `json:"ready"`
	HTTPAddr       string   `json:"http_addr"`
	RaftAddr       string   `json:"raft_addr"`
	Formed         bool     `json:"formed"`
	IsMember       bool     `json:"member"`
	StateHash      string   `json:"state_hash"`
	Nodes          []Member `json:"nodes"`
}

// Voters returns the ids of the voters in s, in the order listed.
func (s Status) Voters() []string {
	var ids []string
	for _, m := range s.Nodes {
		if m.Voter {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// Member returns the entry for id.
func (s Status) Member(id string) (Member, bool) {
	for _, m := range s.Nodes {
		if m.ID == id {
			return m, true
		}
	}
	return Member{}, false
}

// Request is one HTTP request to a node.
type Request struct {
	Method string
	// Path is the path with its query, e.g. "/cluster/settings?stale=true".
	Path string
	// Body is sent as is. When nil and JSON is not, JSON is marshalled and
	// the content type defaults to application/json.
	Body []byte
	JSON any
	// ContentType overrides the Content-Type header; "-" sends none.
	ContentType string
	// Key, when set, is sent in the cluster key header.
	Key    string
	Header http.Header
	// Host, when set, is sent as the Host header instead of the node's
	// address.
	Host string
}

// Response is a node's answer, body read in full.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// ErrorBody is the JSON of an error answer.
type ErrorBody struct {
	OK                bool   `json:"ok"`
	Error             string `json:"error"`
	Outcome           string `json:"outcome"`
	RetryAfterSeconds int    `json:"retry_after_seconds"`
}

// Decode unmarshals the body into v.
func (r *Response) Decode(v any) error {
	if err := json.Unmarshal(r.Body, v); err != nil {
		return fmt.Errorf("decode HTTP %d body %q: %w", r.Status, truncate(r.Body), err)
	}
	return nil
}

// ErrorBody decodes the body as an error answer.
func (r *Response) ErrorBody() (ErrorBody, error) {
	var e ErrorBody
	err := r.Decode(&e)
	return e, err
}

// RetryAfter parses the Retry-After header as whole seconds.
func (r *Response) RetryAfter() (int, bool) {
	v, err := strconv.Atoi(strings.TrimSpace(r.Header.Get("Retry-After")))
	return v, err == nil
}

// String summarises the response for messages.
func (r *Response) String() string {
	return fmt.Sprintf("HTTP %d %s", r.Status, truncate(r.Body))
}

func truncate(b []byte) string {
	const max = 600
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

func newHTTPClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:               nil, // never send test traffic through a proxy
			DialContext:         loopbackOnlyDialer(),
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     30 * time.Second,
		},
	}
}

// loopbackOnlyDialer refuses to connect anywhere but 127.0.0.1.
func loopbackOnlyDialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			return nil, fmt.Errorf("harness: refusing to dial %q: tests talk to 127.0.0.1 only", addr)
		}
		return d.DialContext(ctx, network, addr)
	}
}

// Do sends req to the node's HTTP address.
func (n *Node) Do(ctx context.Context, req Request) (*Response, error) {
	return n.DoWith(ctx, n.c.client, req)
}

// NewSourceClient returns an HTTP client whose connections come from the
// loopback address localIP (for example "127.0.0.2": Linux routes all of
// 127.0.0.0/8 to the loopback interface), so a test can act as several
// client addresses. Like the cluster's own client it only dials 127.0.0.1
// and never uses a proxy.
func NewSourceClient(localIP string, timeout time.Duration) (*http.Client, error) {
	ip := net.ParseIP(localIP)
	if ip == nil || !ip.IsLoopback() || ip.To4() == nil {
		return nil, fmt.Errorf("harness: source address %q is not an IPv4 loopback address", localIP)
	}
	c := newHTTPClient(timeout)
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: ip}}
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			return nil, fmt.Errorf("harness: refusing to dial %q: tests talk to 127.0.0.1 only", addr)
		}
		return d.DialContext(ctx, network, addr)
	}
	return c, nil
}

// DoWith is Do through the given client (see NewSourceClient).
func (n *Node) DoWith(ctx context.Context, client *http.Client, req Request) (*Response, error) {
	body := req.Body
	ct := req.ContentType
	if body == nil && req.JSON != nil {
		b, err := json.Marshal(req.JSON)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = b
		if ct == "" {
			ct = "application/json"
		}
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.Method, n.URL(req.Path), rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range req.Header {
		hr.Header[k] = append([]string(nil), vs...)
	}
	if req.Host != "" {
		hr.Host = req.Host
	}
	if ct != "" && ct != "-" {
		hr.Header.Set("Content-Type", ct)
	}
	if req.Key != "" {
		hr.Header.Set(KeyHeader, req.Key)
	}
	resp, err := client.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("%s %s on %s: %w", req.Method, req.Path, n.ID, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s on %s: read body: %w", req.Method, req.Path, n.ID, err)
	}
	r := &Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
	n.checkResponse(hr, r)
	return r, nil
}

// checkResponse gives an answer of the node to the Env's CheckResponse, if
// it has one, failing the cluster's test on a mismatch.
func (n *Node) checkResponse(req *http.Request, r *Response) {
	check := n.c.env.CheckResponse
	if check == nil {
		return
	}
	if err := check(req, r.Status, r.Header, r.Body); err != nil {
		msg := err.Error()
		if len(msg) > 3000 {
			msg = msg[:3000] + "…"
		}
		n.c.t.Errorf("%s %s on %s: the answer departs from %s: %s\nanswer: %s", req.Method, req.URL.RequestURI(), n.ID, OpenAPIFile, msg, r)
	}
}

// URL is the URL of path (with its query) on the node's HTTP address.
func (n *Node) URL(path string) string { return n.c.scheme + "://" + n.HTTPAddr + path }

// Get sends a GET.
func (n *Node) Get(path string) (*Response, error) {
	return n.Do(context.Background(), Request{Method: http.MethodGet, Path: path})
}

// PutJSON sends a PUT with body marshalled as JSON and, if key is set, the
// cluster key.
func (n *Node) PutJSON(path string, body any, key string) (*Response, error) {
	return n.Do(context.Background(), Request{Method: http.MethodPut, Path: path, JSON: body, Key: key})
}

// PostJSON sends a POST with body marshalled as JSON and, if key is set,
// the cluster key.
func (n *Node) PostJSON(path string, body any, key string) (*Response, error) {
	return n.Do(context.Background(), Request{Method: http.MethodPost, Path: path, JSON: body, Key: key})
}

// GetJSON sends a GET and decodes a 200 answer into out; other statuses
// are returned with an error.
func (n *Node) GetJSON(path string, out any) (*Response, error) {
	r, err := n.Get(path)
	if err != nil {
		return nil, err
	}
	if r.Status != http.StatusOK {
		return r, fmt.Errorf("GET %s on %s: %s", path, n.ID, r)
	}
	return r, r.Decode(out)
}

// Status returns the node's GET /cluster/status.
func (n *Node) Status() (Status, error) {
	var s Status
	_, err := n.GetJSON("/cluster/status", &s)
	return s, err
}

// StatusWithHash returns the node's status including its state hash.
func (n *Node) StatusWithHash() (Status, error) {
	var s Status
	_, err := n.GetJSON("/cluster/status?hash=true", &s)
	if err == nil && s.StateHash == "" {
		err = fmt.Errorf("status of %s has no state_hash", n.ID)
	}
	return s, err
}

// Ready reports whether GET /readyz answers 200.
func (n *Node) Ready() (bool, error) {
	r, err := n.Get("/readyz")
	if err != nil {
		return false, err
	}
	return r.Status == http.StatusOK, nil
}

// Settings is the replicated settings object.
type Settings map[string]int64

// SettingsAnswer is the JSON of a successful settings GET or PUT.
type SettingsAnswer struct {
	OK       bool     `json:"ok"`
	Settings Settings `json:"settings"`
}

// GetSettings reads /cluster/settings (linearizable, or local with stale)
// and returns the settings of a 200 answer; any other answer is an error
// carrying the response.
func (n *Node) GetSettings(stale bool) (Settings, *Response, error) {
	path := "/cluster/settings"
	if stale {
		path += "?stale=true"
	}
	r, err := n.Get(path)
	if err != nil {
		return nil, nil, err
	}
	if r.Status != http.StatusOK {
		return nil, r, fmt.Errorf("GET %s on %s: %s", path, n.ID, r)
	}
	var a SettingsAnswer
	if err := r.Decode(&a); err != nil {
		return nil, r, err
	}
	if !a.OK || len(a.Settings) == 0 {
		return nil, r, fmt.Errorf("GET %s on %s: unexpected body %s", path, n.ID, r)
	}
	return a.Settings, r, nil
}

// PutSettings sends a partial settings object; key is sent when set.
func (n *Node) PutSettings(patch any, key string) (*Response, error) {
	return n.PutJSON("/cluster/settings", patch, key)
}
