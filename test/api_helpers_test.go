//go:build unix

package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// This file holds what the end-to-end API tests share: a client that
// checks what every API answer must have (a JSON object body with the
// application/json content type) and records every secret that crosses the
// wire, and small typed accessors for the fields of an answer.

const apiPrefix = "/services/v1"

// Formats of the values the service mints (spec and README).
var (
	reNamespace  = regexp.MustCompile(`^ns_[A-Za-z0-9_-]{43}$`)
	reOwnerToken = regexp.MustCompile(`^own_[A-Za-z0-9_-]{43}$`)
	reID         = regexp.MustCompile(`^[0-9a-f]{32}$`)
	reToken      = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// apiTarget is a node a test sends its requests to, named by the role it
// had when the cluster formed.
type apiTarget struct {
	name string
	node *harness.Node
}

// apiEnv is a formed cluster with the leader and one follower picked as
// targets, the cluster key, and the set of secrets the tests used on it.
type apiEnv struct {
	c        *harness.Cluster
	leader   *harness.Node
	follower *harness.Node
	key      string
	// secrets are raw values that must never be found on disk or in logs.
	secrets *secretSet
	// ids are queue and job ids seen in answers: metrics must not name them.
	ids *secretSet
	// stored are raw values the service stores as they are by design (job
	// keys, payload text): finding them proves the disk search reads the
	// files.
	stored *secretSet
}

// targets returns the follower and the leader: every example and error row
// runs against both.
func (e *apiEnv) targets() []apiTarget {
	return []apiTarget{{"follower", e.follower}, {"leader", e.leader}}
}

// secretSet is a concurrency-safe set of raw values with the kind each is.
type secretSet struct {
	mu sync.Mutex
	m  map[string]string
}

func newSecretSet() *secretSet { return &secretSet{m: map[string]string{}} }

// add records v unless it is too short or too uniform to be searched for
// in binary files without chance matches.
func (s *secretSet) add(kind, v string) {
	if len(v) < 16 {
		return
	}
	distinct := map[rune]bool{}
	for _, r := range v {
		distinct[r] = true
	}
	if len(distinct) < 8 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[v]; !ok {
		s.m[v] = kind
	}
}

// addExact records v whatever its length.
func (s *secretSet) addExact(kind, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[v] = kind
}

func (s *secretSet) snapshot() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.m))
	for k, v := range s.m {
		out[k] = v
	}
	return out
}

// secretFields are the JSON members whose values are secrets, in requests
// and in answers.
var secretFields = map[string]bool{
	"namespace": true, "key": true, "fingerprint": true, "owner_token": true, "receipt": true,
	"write_token": true, "worker_token": true, "read_token": true, "request_id": true,
}

// collectSecrets walks a decoded JSON value and records the string value
// of every secret member.
func collectSecrets(s *secretSet, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if str, ok := val.(string); ok && secretFields[k] {
				s.add(k, str)
			}
			collectSecrets(s, val)
		}
	case []any:
		for _, val := range x {
			collectSecrets(s, val)
		}
	}
}

// collectIDs records every queue_id and job_id in a decoded answer.
func collectIDs(s *secretSet, v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if str, ok := val.(string); ok && (k == "queue_id" || k == "job_id") {
				s.add(k, str)
			}
			collectIDs(s, val)
		}
	case []any:
		for _, val := range x {
			collectIDs(s, val)
		}
	}
}

// call is one API request.
type call struct {
	method string
	path   string // under /services/v1 unless it starts with "//"
	// token is sent as Authorization: Bearer token; auth, when set, is the
	// whole Authorization header instead.
	token string
	auth  string
	// body is marshalled as JSON; raw is sent as is (and wins).
	body any
	raw  []byte
	// ct overrides the content type (default application/json with a
	// body); "-" sends none.
	ct     string
	header http.Header
}

// answer is the service's answer with its body decoded.
type answer struct {
	*harness.Response
	// m is the body as a JSON object (numbers as json.Number), nil when the
	// body is not one.
	m map[string]any
	// before and after bracket the request on the test's clock.
	before, after time.Time
}

func (a *answer) String() string { return a.Response.String() }

func (c call) request() (harness.Request, error) {
	path := c.path
	if strings.HasPrefix(path, "//") {
		path = path[1:]
	} else {
		path = apiPrefix + path
	}
	rq := harness.Request{Method: c.method, Path: path, ContentType: c.ct, Header: http.Header{}}
	for k, vs := range c.header {
		rq.Header[k] = vs
	}
	switch {
	case c.raw != nil:
		rq.Body = c.raw
		if rq.ContentType == "" {
			rq.ContentType = "application/json"
		}
	case c.body != nil:
		b, err := json.Marshal(c.body)
		if err != nil {
			return rq, err
		}
		rq.Body = b
		if rq.ContentType == "" {
			rq.ContentType = "application/json"
		}
	}
	switch {
	case c.auth != "":
		rq.Header.Set("Authorization", c.auth)
	case c.token != "":
		rq.Header.Set("Authorization", "Bearer "+c.token)
	}
	return rq, nil
}

// send makes one request through client (nil: the cluster's) without any
// retry and checks what every API answer must satisfy: a JSON object body
// served as application/json, that never echoes the bearer token sent.
func (e *apiEnv) send(t *testing.T, client *http.Client, n *harness.Node, c call) *answer {
	t.Helper()
	a, err := e.trySend(t, client, n, c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// trySend is send for other goroutines than the test's: a transport error
// is returned, not fatal.
func (e *apiEnv) trySend(t *testing.T, client *http.Client, n *harness.Node, c call) (*answer, error) {
	t.Helper()
	rq, err := c.request()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", c.method, c.path, err)
	}
	if len(rq.Body) > 0 {
		var v any
		if json.Unmarshal(rq.Body, &v) == nil {
			collectSecrets(e.secrets, v)
		}
	}
	if tok := bearerOf(rq.Header.Get("Authorization")); tok != "" {
		e.secrets.add("bearer token", tok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := time.Now()
	var r *harness.Response
	if client == nil {
		r, err = n.Do(ctx, rq)
	} else {
		r, err = n.DoWith(ctx, client, rq)
	}
	after := time.Now()
	if err != nil {
		return nil, fmt.Errorf("%s %s via %s: %w", c.method, c.path, n.ID, err)
	}
	a := &answer{Response: r, before: before, after: after}
	what := fmt.Sprintf("%s %s via %s (HTTP %d)", c.method, c.path, n.ID, r.Status)
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: Content-Type %q, want application/json; body %s", what, ct, r)
	}
	d := json.NewDecoder(bytes.NewReader(r.Body))
	d.UseNumber()
	if err := d.Decode(&a.m); err != nil || a.m == nil {
		t.Errorf("%s: body is not a JSON object: %v: %s", what, err, r)
	} else {
		collectSecrets(e.secrets, a.m)
		collectIDs(e.ids, a.m)
	}
	if tok := bearerOf(rq.Header.Get("Authorization")); len(tok) >= 8 && bytes.Contains(r.Body, []byte(tok)) {
		t.Errorf("%s: the answer contains the bearer token that was sent: %s", what, r)
	}
	return a, nil
}

func bearerOf(h string) string {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// do sends c to n. An answer of 503 with outcome "not_applied" (nothing
// happened: an election moved the leader) is retried for a bounded time,
// so that a leadership change on a busy machine does not fail a test about
// something else; every other answer is returned as it is.
func (e *apiEnv) do(t *testing.T, n *harness.Node, c call) *answer {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		a := e.send(t, nil, n, c)
		if a.Status != http.StatusServiceUnavailable || a.m["outcome"] != "not_applied" || time.Now().After(deadline) {
			return a
		}
		t.Logf("%s %s via %s: %s; retrying (nothing was applied)", c.method, c.path, n.ID, a)
		<-time.After(200 * time.Millisecond)
	}
}

// randHex returns n random bytes as hex.
func randHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// randB64 returns n random bytes as unpadded base64url.
func randB64(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// ---- field accessors: each reports a missing or ill-typed field ----

func (a *answer) has(k string) bool {
	_, ok := a.m[k]
	return ok
}

// str returns the string field k of m.
func str(t testing.TB, what string, m map[string]any, k string) string {
	t.Helper()
	v, ok := m[k]
	if !ok {
		t.Errorf("%s: no field %q in %v", what, k, m)
		return ""
	}
	s, ok := v.(string)
	if !ok {
		t.Errorf("%s: field %q is %T %v, want a string", what, k, v, v)
	}
	return s
}

// integer returns the integer field k of m: a JSON number without fraction
// or exponent.
func integer(t testing.TB, what string, m map[string]any, k string) int64 {
	t.Helper()
	v, ok := m[k]
	if !ok {
		t.Errorf("%s: no field %q in %v", what, k, m)
		return 0
	}
	num, ok := v.(json.Number)
	if !ok {
		t.Errorf("%s: field %q is %T %v, want an integer", what, k, v, v)
		return 0
	}
	i, err := num.Int64()
	if err != nil || strings.ContainsAny(num.String(), ".eE") {
		t.Errorf("%s: field %q is %s, want an integer", what, k, num)
	}
	return i
}

func boolean(t testing.TB, what string, m map[string]any, k string) bool {
	t.Helper()
	v, ok := m[k]
	if !ok {
		t.Errorf("%s: no field %q in %v", what, k, m)
		return false
	}
	b, ok := v.(bool)
	if !ok {
		t.Errorf("%s: field %q is %T %v, want a boolean", what, k, v, v)
	}
	return b
}

func object(t testing.TB, what string, m map[string]any, k string) map[string]any {
	t.Helper()
	v, ok := m[k]
	if !ok {
		t.Errorf("%s: no field %q in %v", what, k, m)
		return map[string]any{}
	}
	o, ok := v.(map[string]any)
	if !ok {
		t.Errorf("%s: field %q is %T %v, want an object", what, k, v, v)
		return map[string]any{}
	}
	return o
}

// fields checks that m has every required member and nothing outside
// required and optional.
func fields(t testing.TB, what string, m map[string]any, required, optional []string) {
	t.Helper()
	var missing, extra []string
	for _, k := range required {
		if _, ok := m[k]; !ok {
			missing = append(missing, k)
		}
	}
	for k := range m {
		if !slices.Contains(required, k) && !slices.Contains(optional, k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("%s: missing fields %v, unexpected fields %v in %v", what, missing, extra, m)
	}
}

func matches(t testing.TB, what, name, v string, re *regexp.Regexp) {
	t.Helper()
	if !re.MatchString(v) {
		t.Errorf("%s: %s %q does not match %s", what, name, v, re)
	}
}

// between checks lo <= v <= hi.
func between(t testing.TB, what, name string, v, lo, hi int64) {
	t.Helper()
	if v < lo || v > hi {
		t.Errorf("%s: %s = %d, want %d..%d", what, name, v, lo, hi)
	}
}

// timePair checks the *_at field is RFC 3339 UTC and names the same second
// as its *_timestamp, and returns the timestamp. Without the timestamp in
// m (it is optional in some answers) it parses the *_at field alone.
func timePair(t testing.TB, what string, m map[string]any, at, ts string) int64 {
	t.Helper()
	s := str(t, what, m, at)
	p, err := time.Parse(time.RFC3339, s)
	if err != nil || !strings.HasSuffix(s, "Z") {
		t.Errorf("%s: %s %q is not RFC 3339 UTC: %v", what, at, s, err)
	}
	if _, ok := m[ts]; !ok {
		return p.Unix()
	}
	v := integer(t, what, m, ts)
	if p.Unix() != v {
		t.Errorf("%s: %s %q is not %s %d (%s)", what, at, s, ts, v, time.Unix(v, 0).UTC().Format(time.RFC3339))
	}
	return v
}

// expectStatus fails the test unless a has the status.
func expectStatus(t testing.TB, what string, a *answer, status int) {
	t.Helper()
	if a.Status != status {
		t.Fatalf("%s: want HTTP %d, got %s", what, status, a)
	}
}

// expectError checks an error answer: the status, {"ok":false,"error":…},
// the error mentioning each of want (case-insensitive), a "field" member
// equal to field when field is set, and no member outside optional. It
// returns false (after reporting) when the status differs.
func expectError(t testing.TB, what string, a *answer, status int, field string, optional []string, want ...string) bool {
	t.Helper()
	if a.Status != status {
		t.Errorf("%s: want HTTP %d, got %s", what, status, a)
		return false
	}
	if a.m == nil {
		return false
	}
	if ok, isBool := a.m["ok"].(bool); !isBool || ok {
		t.Errorf("%s: want ok:false, got %s", what, a)
	}
	msg := str(t, what, a.m, "error")
	if msg == "" {
		t.Errorf("%s: empty error message", what)
	}
	for _, w := range want {
		if !strings.Contains(strings.ToLower(msg), strings.ToLower(w)) {
			t.Errorf("%s: error %q does not mention %q", what, msg, w)
		}
	}
	required := []string{"ok", "error"}
	if field != "" {
		required = append(required, "field")
		if got, _ := a.m["field"].(string); got != field {
			t.Errorf("%s: field %q, want %q (%s)", what, got, field, a)
		}
	}
	fields(t, what, a.m, required, append([]string{"field"}, optional...))
	return true
}

// expectRetryAfter checks the Retry-After header is whole seconds >= 1 and
// equals the body's retry_after_seconds, and returns it.
func expectRetryAfter(t testing.TB, what string, a *answer) int64 {
	t.Helper()
	ra, ok := a.RetryAfter()
	if !ok || ra < 1 {
		t.Errorf("%s: want a Retry-After header of whole seconds >= 1, got %q", what, a.Header.Get("Retry-After"))
	}
	if body := integer(t, what, a.m, "retry_after_seconds"); body != int64(ra) {
		t.Errorf("%s: retry_after_seconds %d differs from Retry-After %d", what, body, ra)
	}
	return int64(ra)
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(a, b []byte) bool {
	var x, y any
	da := json.NewDecoder(bytes.NewReader(a))
	da.UseNumber()
	db := json.NewDecoder(bytes.NewReader(b))
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// rawField returns the JSON text of member k of a's body.
func rawField(t testing.TB, what string, a *answer, k string) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(a.Body, &m); err != nil {
		t.Errorf("%s: %v", what, err)
		return nil
	}
	v, ok := m[k]
	if !ok {
		t.Errorf("%s: no field %q", what, k)
	}
	return v
}

// putKey changes settings on the cluster through n with the cluster key.
func (e *apiEnv) putKey(t *testing.T, n *harness.Node, patch harness.Settings) {
	t.Helper()
	put(t, n, patch, e.key)
}

// formAPICluster forms a three-node cluster with a cluster key and picks the
// leader and a follower as targets.
func formAPICluster(t *testing.T, opts harness.Options) *apiEnv {
	t.Helper()
	opts.ClusterKey = randHex(t, 16)
	c, leader := formCluster(t, 3, opts)
	return &apiEnv{
		c: c, leader: leader, follower: harness.Except(c.Nodes(), leader)[0], key: opts.ClusterKey,
		secrets: newSecretSet(), stored: newSecretSet(), ids: newSecretSet(),
	}
}

func jsonUnmarshalString(s string, v any) error { return json.Unmarshal([]byte(s), v) }
