//go:build unix

package fault

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

const apiPrefix = "/services/v1"

// Client sends API requests to nodes by address. It only ever dials
// 127.0.0.1, never uses a proxy, and bounds every request.
type Client struct {
	hc      *http.Client
	timeout time.Duration
	scheme  string
}

// NewClient returns a client whose requests time out after timeout.
func NewClient(timeout time.Duration) *Client {
	d := &net.Dialer{Timeout: 2 * time.Second}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil || host != "127.0.0.1" {
				return nil, fmt.Errorf("fault client: refusing to dial %q: tests talk to 127.0.0.1 only", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     20 * time.Second,
	}
	return &Client{hc: &http.Client{Transport: tr}, timeout: timeout, scheme: "http"}
}

// UseTLS makes the client speak HTTPS with cfg; it must be called before
// the first request.
func (c *Client) UseTLS(cfg *tls.Config) {
	c.hc.Transport.(*http.Transport).TLSClientConfig = cfg
	c.scheme = "https"
}

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// Answer is a node's answer, or the transport error that replaced it.
type Answer struct {
	Status int
	Body   APIBody
	Raw    []byte
	Err    error
	// RetryAfter is the Retry-After header in seconds, 0 if absent.
	RetryAfter int
}

// APIBody is the union of the answer fields the workloads read.
type APIBody struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	Outcome string `json:"outcome"`
	Field   string `json:"field"`

	Namespace string `json:"namespace"`

	Status                     string          `json:"status"`
	OwnerToken                 string          `json:"owner_token"`
	FencingToken               int64           `json:"fencing_token"`
	TTLSeconds                 int64           `json:"ttl_seconds"`
	LeaseExpiresAtTimestamp    int64           `json:"lease_expires_at_timestamp"`
	AbsoluteExpiresAtTimestamp int64           `json:"absolute_expires_at_timestamp"`
	Result                     json.RawMessage `json:"result"`
	RetryAfterSeconds          int64           `json:"retry_after_seconds"`
	Slots                      int64           `json:"slots"`
	Checkpoint                 json.RawMessage `json:"checkpoint"`
	CheckpointFencingToken     int64           `json:"checkpoint_fencing_token"`
	Held                       int64           `json:"held"`

	QueueID      string     `json:"queue_id"`
	WriteToken   string     `json:"write_token"`
	WorkerToken  string     `json:"worker_token"`
	ReadToken    string     `json:"read_token"`
	Counts       *Counts    `json:"counts"`
	Deduplicated bool       `json:"deduplicated"`
	JobID        string     `json:"job_id"`
	Job          *JobAnswer `json:"job"`
	Reason       string     `json:"reason"`
}

// Counts is a queue's job counts.
type Counts struct {
	Pending   int `json:"pending"`
	Claimed   int `json:"claimed"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Total     int `json:"total"`
}

// JobAnswer is the job object of queue answers.
type JobAnswer struct {
	JobID                string          `json:"job_id"`
	JobKey               string          `json:"job_key"`
	Payload              json.RawMessage `json:"payload"`
	Status               string          `json:"status"`
	Attempts             int             `json:"attempts"`
	ClaimExpireTimestamp int64           `json:"claim_expire_timestamp"`
	Receipt              string          `json:"receipt"`
}

// Do sends one request. body is marshalled as JSON when not nil; bearer,
// when set, is sent as Authorization: Bearer.
func (c *Client) Do(ctx context.Context, addr, method, path string, body any, bearer string) Answer {
	return c.DoWaiting(ctx, 0, addr, method, path, body, bearer)
}

// DoWaiting is Do for a request the service may hold for up to wait (its
// wait_seconds): the timeout is that much longer.
func (c *Client) DoWaiting(ctx context.Context, wait time.Duration, addr, method, path string, body any, bearer string) Answer {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+wait)
	defer cancel()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return Answer{Err: fmt.Errorf("encode request: %w", err)}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+addr+path, rd)
	if err != nil {
		return Answer{Err: fmt.Errorf("build request: %w", err)}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return Answer{Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Answer{Status: resp.StatusCode, Err: fmt.Errorf("read answer: %w", err)}
	}
	a := Answer{Status: resp.StatusCode, Raw: raw}
	if v := resp.Header.Get("Retry-After"); v != "" {
		_, _ = fmt.Sscan(v, &a.RetryAfter)
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &a.Body); err != nil {
			a.Err = fmt.Errorf("decode HTTP %d answer %.200q: %w", resp.StatusCode, raw, err)
		}
	}
	return a
}

// Class is how an answer counts in a history.
type Class int

const (
	// Definite is an answer from the service that says what happened (2xx,
	// or a 4xx business outcome such as 409 held or 404).
	Definite Class = iota
	// NotApplied means nothing happened: the request never reached a node
	// (dial error), or the service said so (503 not_applied, 429).
	NotApplied
	// Unknown means it may have happened: a timeout, a broken connection
	// after the request was sent, 503 outcome unknown, or a 5xx.
	Unknown
)

// Classify sorts an answer into Definite, NotApplied or Unknown.
func (a Answer) Classify() Class {
	if a.Err != nil && a.Status == 0 {
		var op *net.OpError
		if errors.As(a.Err, &op) && op.Op == "dial" {
			return NotApplied
		}
		return Unknown
	}
	switch {
	case a.Status == http.StatusServiceUnavailable && a.Body.Outcome == "not_applied":
		return NotApplied
	case a.Status == http.StatusTooManyRequests:
		return NotApplied
	case a.Status >= 500:
		return Unknown
	case a.Err != nil:
		// A 2xx/4xx whose body could not be read: the effect is unknown.
		return Unknown
	}
	return Definite
}

// ErrText summarises a non-2xx answer or transport error for the history.
func (a Answer) ErrText() string {
	if a.Err != nil {
		return a.Err.Error()
	}
	if a.Status >= 300 {
		if a.Body.Error != "" {
			return a.Body.Error
		}
		return fmt.Sprintf("HTTP %d", a.Status)
	}
	return ""
}

// Available reports whether the service gave a definite answer.
func (a Answer) Available() bool { return a.Classify() == Definite }
