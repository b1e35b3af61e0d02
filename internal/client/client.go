package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// APIPrefix is the path prefix of the REST API.
const APIPrefix = "/services/v1"

// DefaultTimeout bounds one call, its failover and waits included, when
// Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// maxBody bounds how much of an answer is read, unless Request.MaxBody says otherwise.
const maxBody = 4 << 20

// minRoundPause is the pause between two rounds over the address list when no
// node gave a Retry-After.
const minRoundPause = 200 * time.Millisecond

// minAttempt is the least time left for which Do sends a request again once
// it holds an answer: an attempt the deadline cuts short would end in an
// unknown outcome instead of that answer.
const minAttempt = 100 * time.Millisecond

// TimeoutHeader carries, on every attempt, the milliseconds left before the
// call's deadline: a node waiting for a leader answers 503 not_applied
// before then instead of letting the deadline cut the attempt short.
const TimeoutHeader = "X-Holdfast-Timeout"

// MaxTimeoutMillis is the largest TimeoutHeader value a node accepts (one
// hour).
const MaxTimeoutMillis = 3_600_000

// Config says where the nodes are and how to reach them.
type Config struct {
	// Addrs are the nodes' HTTP addresses: host:port, or URLs with a scheme.
	Addrs []string
	// CAFile is a PEM bundle that verifies the nodes' HTTPS certificates;
	// with it (or a client certificate) addresses without a scheme use https.
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// nodes that require one.
	CertFile, KeyFile string
	// Timeout bounds one call including failover and waits (DefaultTimeout
	// when zero).
	Timeout time.Duration
	// ClusterKey is sent as X-Holdfast-Cluster-Key on operator calls.
	ClusterKey string
	// MaxConnsPerHost bounds connections per node (0: unbounded).
	MaxConnsPerHost int
}

// Client sends requests to a list of nodes. Its methods are safe for
// concurrent use; Rotate gives views that prefer another address.
type Client struct {
	bases   []string
	hc      *http.Client
	timeout time.Duration
	key     string
	cur     *atomic.Int64 // index into bases of the address to try first
}

// New checks cfg and builds a client.
func New(cfg Config) (*Client, error) {
	if len(cfg.Addrs) == 0 {
		return nil, errors.New("no node address given")
	}
	tr, secure, err := transport(cfg)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	bases := make([]string, 0, len(cfg.Addrs))
	for _, a := range cfg.Addrs {
		a = strings.TrimRight(strings.TrimSpace(a), "/")
		if a == "" {
			continue
		}
		if !strings.Contains(a, "://") {
			a = scheme + "://" + a
		}
		if !strings.HasPrefix(a, "http://") && !strings.HasPrefix(a, "https://") {
			return nil, fmt.Errorf("address %q: the scheme must be http or https", a)
		}
		if err := checkAddr(a); err != nil {
			return nil, err
		}
		bases = append(bases, a)
	}
	if len(bases) == 0 {
		return nil, errors.New("no node address given")
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{
		bases:   bases,
		hc:      &http.Client{Transport: tr, CheckRedirect: noRedirects},
		timeout: timeout,
		key:     cfg.ClusterKey,
		cur:     new(atomic.Int64),
	}, nil
}

// checkAddr refuses an address no request could be built for: a bad host
// or a port that is not a number from 1 to 65535.
func checkAddr(a string) error {
	u, err := url.Parse(a)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("address %q: %w", a, err)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("address %q: no host", a)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("address %q: the port must be a number from 1 to 65535", a)
		}
	}
	return nil
}

// SplitAddrs splits a comma-separated list (of addresses), trimming spaces
// and dropping empty items.
func SplitAddrs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// transport builds the HTTP transport; secure says whether addresses without
// a scheme use https.
func transport(cfg Config) (*http.Transport, bool, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	if cfg.MaxConnsPerHost > 0 {
		tr.MaxConnsPerHost = cfg.MaxConnsPerHost
		tr.MaxIdleConnsPerHost = cfg.MaxConnsPerHost
	}
	tr.Proxy = nil // a node is reached directly, never through an environment proxy
	if cfg.CAFile == "" && cfg.CertFile == "" && cfg.KeyFile == "" {
		return tr, false, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, false, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, false, fmt.Errorf("CA file %s holds no PEM certificate", cfg.CAFile)
		}
		tc.RootCAs = pool
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, false, errors.New("a client certificate needs both the certificate file and the key file")
	}
	if cfg.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, false, fmt.Errorf("load client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	tr.TLSClientConfig = tc
	tr.ForceAttemptHTTP2 = true
	return tr, true, nil
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// Rotate returns a view of c that tries address i (modulo the list) first
// and keeps its own failover position; it shares c's connections.
func (c *Client) Rotate(i int) *Client {
	v := *c
	v.cur = new(atomic.Int64)
	v.cur.Store(int64(i % len(c.bases)))
	return &v
}

// Addrs returns the base URLs of the nodes, in order.
func (c *Client) Addrs() []string { return append([]string(nil), c.bases...) }

// HTTP returns the underlying HTTP client, for calls outside the API.
func (c *Client) HTTP() *http.Client { return c.hc }

// CloseIdle closes idle connections.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// Request is one API call.
type Request struct {
	// Method is the HTTP method; Path starts at the node's root
	// (APIPrefix+"/lease", "/cluster/status").
	Method, Path string
	// Token is sent as Authorization: Bearer when not empty.
	Token string
	// Body is sent as application/json when not nil.
	Body []byte
	// Operator sends the cluster key.
	Operator bool
	// Repeatable marks a request that may be sent again after an unknown
	// outcome.
	Repeatable bool
	// Once sends the request to the first address only, one attempt: a
	// probe of one node, not a call to the cluster.
	Once bool
	// MaxBody bounds the answer's size in bytes (0: 4 MiB); a larger answer
	// is an error, never silently cut.
	MaxBody int64
	// Wait is how long the server may hold the request before answering
	// (its wait_seconds); it is added to the call's timeout.
	Wait time.Duration
	// Into, when set, receives the body of a 200 answer as it arrives
	// (up to MaxBody bytes), and Response.Body stays empty: for answers
	// too large to hold in memory. Any other answer is read as usual.
	Into BodySink
}

// BodySink receives a streamed answer (Request.Into).
type BodySink interface {
	io.Writer
	// Reset discards what an earlier attempt wrote: an answer cut short is
	// asked for again, from the start.
	Reset() error
}

// Response is a node's answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// Addr is the base URL of the node that answered.
	Addr string
}

// RetryAfter is the answer's Retry-After in whole seconds (0 when absent).
func (r *Response) RetryAfter() time.Duration {
	if r == nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(r.Header.Get("Retry-After")))
	if err != nil || n < 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// Object decodes the body as a JSON object (nil when it is not one).
func (r *Response) Object() map[string]any {
	var m map[string]any
	if r == nil || json.Unmarshal(r.Body, &m) != nil {
		return nil
	}
	return m
}

// ErrorMessage is the "error" of a JSON error answer, else "".
func (r *Response) ErrorMessage() string {
	var e struct {
		Error string `json:"error"`
	}
	if r == nil || json.Unmarshal(r.Body, &e) != nil {
		return ""
	}
	return e.Error
}

// Outcome is the "outcome" ("not_applied", "unknown") of a 503, or of a
// 507 from a node that cannot write its storage, else "".
func (r *Response) Outcome() string {
	if r == nil || (r.Status != http.StatusServiceUnavailable && r.Status != http.StatusInsufficientStorage) {
		return ""
	}
	var o struct {
		Outcome string `json:"outcome"`
	}
	if json.Unmarshal(r.Body, &o) != nil {
		return ""
	}
	return o.Outcome
}

// OK says whether the status is 2xx.
func (r *Response) OK() bool { return r != nil && r.Status/100 == 2 }

// ErrUnknown marks a call whose request may have reached a node and whose
// answer was lost: it may have taken effect.
var ErrUnknown = errors.New("outcome unknown: the request may have taken effect")

// Do sends req, failing over as the package comment says, within the
// client's timeout and ctx. It returns the first answer that is not a reason
// to move on; when the time runs out, the last answer (a 503) if there was
// one, else the last error. An error wrapping ErrUnknown means the request
// may have taken effect.
func (c *Client) Do(ctx context.Context, req Request) (*Response, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout+req.Wait)
	defer cancel()
	var (
		last    *Response
		lastErr error
		pause   time.Duration
		unknown bool
		reach   = make([]error, len(c.bases)) // why each node could not be reached
	)
	// finalErr names every node and its error when none was reached.
	finalErr := func() error {
		if unknown || lastErr == nil {
			return lastErr
		}
		return unreachableErr(c.bases, reach, lastErr)
	}
	// setup stays true through a round in which every node failed for a
	// reason another round cannot change (a certificate that does not
	// verify, TLS spoken to a plain listener or the reverse): then the call
	// ends at once rather than at its timeout.
	setup := true
	for tried := 1; ; tried++ {
		if ctx.Err() != nil {
			return giveUp(last, finalErr(), ctx.Err())
		}
		if d, ok := ctx.Deadline(); ok && (last != nil || lastErr != nil) && time.Until(d) < minAttempt {
			return giveUp(last, finalErr(), context.DeadlineExceeded)
		}
		i := int(c.cur.Load()) % len(c.bases)
		resp, err := c.send(ctx, c.bases[i], req)
		if se := (*SinkError)(nil); errors.As(err, &se) {
			return nil, err
		}
		// A read never takes effect; any other request may have, unless it
		// certainly never reached a node.
		harmless := err != nil && (neverSent(err) || readOnly(req.Method))
		setup = setup && err != nil && setupErr(err)
		if req.Once {
			if err != nil && !harmless {
				err = unknownErr(req, c.bases[i], err)
			}
			return resp, err
		}
		// Once an attempt may have taken effect, the final answer must say
		// so: later attempts that certainly did nothing do not replace it.
		// Nor does an attempt the deadline cut short replace the reason of
		// an earlier failure.
		switch outcome := resp.Outcome(); {
		case harmless:
			if !unknown && (lastErr == nil || ctx.Err() == nil) {
				last, lastErr = nil, err
			}
			reach[i] = err
		case err != nil:
			e := unknownErr(req, c.bases[i], err)
			if !req.Repeatable || ctx.Err() != nil {
				return nil, e
			}
			last, lastErr, unknown = nil, e, true
		case outcome == "not_applied" || (outcome == "unknown" && req.Repeatable):
			if !unknown {
				last, lastErr = resp, nil
			}
			unknown = unknown || outcome == "unknown"
			pause = max(pause, resp.RetryAfter())
		default:
			return resp, nil
		}
		c.cur.CompareAndSwap(int64(i), int64((i+1)%len(c.bases)))
		if tried%len(c.bases) != 0 {
			continue
		}
		if setup {
			return nil, finalErr()
		}
		setup = true
		t := time.NewTimer(max(pause, minRoundPause))
		pause = 0
		select {
		case <-ctx.Done():
			t.Stop()
			return giveUp(last, finalErr(), ctx.Err())
		case <-t.C:
		}
	}
}

// unreachable is the error of a request no node was reached for: it names
// each node tried with its error, and wraps the last.
type unreachable struct {
	msg  string
	last error
}

func (e *unreachable) Error() string { return e.msg }
func (e *unreachable) Unwrap() error { return e.last }

// unreachableErr is last, naming every node tried when there were several.
func unreachableErr(bases []string, reach []error, last error) error {
	var parts []string
	for i, err := range reach {
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: %v", bases[i], err))
		}
	}
	if len(parts) < 2 {
		return last
	}
	return &unreachable{msg: fmt.Sprintf("no node could be reached (%d tried): %s", len(parts), strings.Join(parts, "; ")), last: last}
}

// readOnly says whether a request with this method changes nothing.
func readOnly(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// unknownErr marks err, from a request that may have reached base, as an
// unknown outcome.
func unknownErr(req Request, base string, err error) error {
	return fmt.Errorf("%s %s at %s: %w (%w)", req.Method, req.Path, base, ErrUnknown, err)
}

// giveUp is Do's answer when its time is up: the last 503, else the last
// error, else the context's.
func giveUp(last *Response, lastErr, ctxErr error) (*Response, error) {
	if last != nil {
		return last, nil
	}
	if lastErr != nil {
		return nil, lastErr
	}
	return nil, ctxErr
}

// send makes one attempt at one node.
func (c *Client) send(ctx context.Context, base string, req Request) (*Response, error) {
	var body io.Reader
	if req.Body != nil {
		body = bytes.NewReader(req.Body)
	}
	// Whether the whole request was written: until it was, no node can
	// have acted on it, whatever cut the attempt short (the deadline in the
	// middle of a dial or a TLS handshake, a connection reset).
	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(i httptrace.WroteRequestInfo) {
			if i.Err == nil {
				wrote.Store(true)
			}
		},
	})
	hr, err := http.NewRequestWithContext(ctx, req.Method, base+req.Path, body)
	if err != nil {
		return nil, fmt.Errorf("build %s %s: %w", req.Method, req.Path, err)
	}
	if req.Body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if req.Token != "" {
		hr.Header.Set("Authorization", "Bearer "+req.Token)
	}
	if d, ok := ctx.Deadline(); ok {
		hr.Header.Set(TimeoutHeader, strconv.FormatInt(min(max(time.Until(d).Milliseconds(), 1), MaxTimeoutMillis), 10))
	}
	if req.Operator && c.key != "" {
		hr.Header.Set("X-Holdfast-Cluster-Key", c.key)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		if !wrote.Load() {
			return nil, &unsentError{err}
		}
		return nil, err
	}
	defer resp.Body.Close()
	limit := req.MaxBody
	if limit <= 0 {
		limit = maxBody
	}
	if req.Into != nil && resp.StatusCode == http.StatusOK {
		if err := req.Into.Reset(); err != nil {
			return nil, &SinkError{fmt.Errorf("keep the answer to %s %s: %w", req.Method, req.Path, err)}
		}
		n, err := io.Copy(sinkWriter{req.Into}, io.LimitReader(resp.Body, limit+1))
		var se *SinkError
		if errors.As(err, &se) {
			return nil, fmt.Errorf("keep the answer to %s %s: %w", req.Method, req.Path, err)
		}
		if err != nil {
			return nil, fmt.Errorf("read the answer to %s %s: %w", req.Method, req.Path, err)
		}
		if n > limit {
			return nil, fmt.Errorf("the answer to %s %s is larger than %d bytes", req.Method, req.Path, limit)
		}
		return &Response{Status: resp.StatusCode, Header: resp.Header, Addr: base}, nil
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read the answer to %s %s: %w", req.Method, req.Path, err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("the answer to %s %s is larger than %d bytes", req.Method, req.Path, limit)
	}
	if resp.StatusCode == http.StatusBadRequest && bytes.HasPrefix(raw, []byte(plainToTLS)) {
		// Go's TLS server answers plain HTTP so, before any handler runs.
		return nil, &unsentError{&plainToTLSError{base}}
	}
	return &Response{Status: resp.StatusCode, Header: resp.Header, Body: raw, Addr: base}, nil
}

// plainToTLS begins the answer of a TLS listener to a plain HTTP request.
const plainToTLS = "Client sent an HTTP request to an HTTPS server"

// setupErr says whether err is a TLS set-up mistake that trying again
// cannot mend: the node's certificate does not verify, the node speaks
// plain HTTP to a TLS client or answers a plain client as a TLS server, or
// it refused the handshake with an alert (no client certificate, say).
func setupErr(err error) bool {
	var plain *plainToTLSError
	var op *net.OpError // crypto/tls reports a TLS alert from the peer as a "remote error"
	var rec tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	return errors.As(err, &plain) || errors.As(err, &op) && op.Op == "remote error" ||
		errors.As(err, &rec) || errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) ||
		// net/http's own text for a TLS record that looks like HTTP, which
		// it returns instead of the tls.RecordHeaderError.
		strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

// plainToTLSError is the answer of a TLS listener to a plain HTTP request.
type plainToTLSError struct{ base string }

func (e *plainToTLSError) Error() string {
	return e.base + " serves HTTPS, and this call spoke plain HTTP: give --ca-file (or HOLDFAST_CA_FILE) with the cluster's CA certificate"
}

// unsentError is the failure of an attempt that never wrote its whole request.
// SinkError is a failure of a Request.Into to keep an answer: asking
// again cannot mend it, so the call ends with it.
type SinkError struct{ err error }

func (e *SinkError) Error() string { return e.err.Error() }
func (e *SinkError) Unwrap() error { return e.err }

// sinkWriter marks its sink's write errors as SinkErrors.
type sinkWriter struct{ w io.Writer }

func (s sinkWriter) Write(p []byte) (int, error) {
	n, err := s.w.Write(p)
	if err != nil {
		err = &SinkError{err}
	}
	return n, err
}

type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// neverSent says whether err shows that the request never left this process
// or never reached a node's handler: an attempt that did not write the whole
// request, a failed dial, a TLS handshake that failed here, or a TLS alert
// from the node (it refused the connection, e.g. for want of a client
// certificate, and so never read a request on it).
func neverSent(err error) bool {
	var unsent *unsentError
	if errors.As(err, &unsent) {
		return true
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return setupErr(err)
}
