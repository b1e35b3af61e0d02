package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/internal/secret"
)

// Exit statuses of the client commands (the README's table).
const (
	exitOK       = 0 // success: granted, completed, enqueued, claimed, acked...
	exitFailed   = 1 // anything else
	exitUsage    = 2 // bad flags or arguments
	exitLater    = 3 // held, rate limited, no leader, a node's storage failing, outcome unknown, empty queue: try later
	exitConflict = 4 // the key is bound to another fingerprint or slot count, the job key to another payload, or a retried job is not failed
	exitLost     = 5 // the owner token or receipt no longer holds the lease or claim
)

// clientOpts are the flags every client command shares.
type clientOpts struct {
	addr, caFile, certFile, keyFile string
	clusterKey                      *secretValue // nil unless the command takes --cluster-key
	timeout                         time.Duration
	field                           string
	showStatus                      bool
	maxConns                        int // connections per node (0: the client's default)
}

// addConnFlags registers the flags that say how to reach the nodes.
func addConnFlags(fs *flag.FlagSet) *clientOpts {
	o := &clientOpts{}
	fs.StringVar(&o.addr, "addr", envOr("HOLDFAST_ADDR", "127.0.0.1:7070"), "comma-separated node addresses, tried in turn (HOLDFAST_ADDR)")
	fs.StringVar(&o.caFile, "ca-file", envOr("HOLDFAST_CA_FILE", ""), "PEM CA bundle that verifies the nodes' HTTPS certificates; addresses without a scheme then use https (HOLDFAST_CA_FILE)")
	w := fs.Output()
	fs.StringVar(&o.certFile, "client-cert-file", envRenamed("HOLDFAST_CLIENT_CERT_FILE", "HOLDFAST_CERT_FILE", w), "PEM client certificate, for nodes that require one (HOLDFAST_CLIENT_CERT_FILE)")
	fs.StringVar(&o.keyFile, "client-key-file", envRenamed("HOLDFAST_CLIENT_KEY_FILE", "HOLDFAST_KEY_FILE", w), "PEM private key of --client-cert-file (HOLDFAST_CLIENT_KEY_FILE); not the lease key, which is --key")
	fs.Var(renamedFlag{&o.certFile, "cert-file", "client-cert-file", w}, "cert-file", "the former name of --client-cert-file")
	fs.Var(renamedFlag{&o.keyFile, "key-file", "client-key-file", w}, "key-file", "the former name of --client-key-file")
	durationVar(fs, &o.timeout, "timeout", 30*time.Second, "bound on each call, failover included; a --wait is added to it")
	return o
}

// renamedFlag is a flag's former name: it still sets the flag, with a
// warning naming the new one.
type renamedFlag struct {
	p         *string
	old, name string
	warn      io.Writer
}

func (f renamedFlag) String() string { return "" }

func (f renamedFlag) Set(v string) error {
	fmt.Fprintf(f.warn, "holdfast: --%s is now --%s; the old name still works for now\n", f.old, f.name)
	*f.p = v
	return nil
}

// envRenamed reads the environment variable name, else its former name
// old, warning that it was renamed.
func envRenamed(name, old string, warn io.Writer) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	v := os.Getenv(old)
	if v != "" {
		fmt.Fprintf(warn, "holdfast: %s is now %s; the old name still works for now\n", old, name)
	}
	return v
}

// addClientFlags registers the flags of a command that makes one API call
// and prints its answer.
func addClientFlags(fs *flag.FlagSet) *clientOpts {
	o := addConnFlags(fs)
	fs.StringVar(&o.field, "field", "", "print only this field of the answer (dotted for nested: job.receipt), strings raw")
	fs.BoolVar(&o.showStatus, "status", envBool("HOLDFAST_SHOW_STATUS"), "also print the HTTP status of a success to stderr (failures always show it) (HOLDFAST_SHOW_STATUS: 1, true, 0 or false)")
	return o
}

// envBool reads a true/false environment variable (1, t, true, 0, f,
// false, any case); unset, empty or anything else is false.
func envBool(name string) bool {
	b, err := strconv.ParseBool(strings.TrimSpace(os.Getenv(name)))
	return err == nil && b
}

// client builds the API client the flags describe.
func (o *clientOpts) client() (*client.Client, error) {
	key := ""
	if o.clusterKey != nil {
		var err error
		if key, err = o.clusterKey.get(); err != nil {
			return nil, err
		}
	}
	return client.New(o.config(client.SplitAddrs(o.addr), o.timeout, key))
}

// config is the client configuration of the flags' TLS files and
// connection bound, for the nodes at addrs.
func (o *clientOpts) config(addrs []string, timeout time.Duration, clusterKey string) client.Config {
	return client.Config{
		Addrs:           addrs,
		CAFile:          o.caFile,
		CertFile:        o.certFile,
		KeyFile:         o.keyFile,
		Timeout:         timeout,
		ClusterKey:      clusterKey,
		MaxConnsPerHost: o.maxConns,
	}
}

// secretValue is a flag for a secret: the value itself, @FILE to read it
// from a file, or empty to take it from an environment variable, so that it
// need not appear in a process listing.
type secretValue struct {
	raw, env, name string
	set            bool
}

func (s *secretValue) String() string { return "" } // never print a secret, not even as a default
func (s *secretValue) Set(v string) error {
	s.raw, s.set = v, true
	return nil
}

// secretFlag registers a secret flag name whose fallback is the environment
// variable env.
func secretFlag(fs *flag.FlagSet, name, env, usage string) *secretValue {
	s := &secretValue{env: env, name: name}
	fs.Var(s, name, usage+": the value, @FILE, or the environment variable "+env)
	return s
}

// get resolves the secret ("" when neither the flag nor the environment has it).
func (s *secretValue) get() (string, error) {
	v := s.raw
	if !s.set {
		v = os.Getenv(s.env)
	}
	if file, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("read the secret file of --%s (%s): %w", s.name, s.env, err)
		}
		v = strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return "", fmt.Errorf("the secret file %s of --%s (%s) is empty", file, s.name, s.env)
		}
	}
	return v, nil
}

// leaseTarget resolves the namespace and the lease key of a lease command.
// A key without a namespace is a secret itself: one too short for that is
// refused here, naming the namespace it is missing.
func leaseTarget(ns, key *secretValue) (map[string]any, error) {
	nsv, err := ns.get()
	if err != nil {
		return nil, err
	}
	k, err := key.need("key")
	if err != nil {
		return nil, err
	}
	body := map[string]any{"key": k}
	if nsv != "" {
		body["namespace"] = nsv
	} else if len(k) < secret.MinKeyLen {
		return nil, fmt.Errorf("no namespace: give --namespace (or %s; `holdfast lease namespace` mints one), or use a random key of %d to %d characters, which is a secret itself (this one has %d)",
			ns.env, secret.MinKeyLen, secret.MaxKeyLen, len(k))
	}
	return body, nil
}

// need resolves a secret that the command cannot do without.
func (s *secretValue) need(flagName string) (string, error) {
	v, err := s.get()
	if err == nil && v == "" {
		err = fmt.Errorf("--%s (or %s) is required", flagName, s.env)
	}
	return v, err
}

// jsonArg reads a JSON value given as text, @FILE or - (stdin) and checks
// that it is one JSON value.
func jsonArg(name, v string, stdin io.Reader) (json.RawMessage, error) {
	var b []byte
	var err error
	switch {
	case v == "":
		return nil, fmt.Errorf("--%s is required: JSON text, @FILE or - for stdin", name)
	case v == "-":
		b, err = io.ReadAll(io.LimitReader(stdin, 1<<20))
	case strings.HasPrefix(v, "@"):
		b, err = os.ReadFile(v[1:])
	default:
		b = []byte(v)
	}
	if err != nil {
		return nil, fmt.Errorf("read --%s: %w", name, err)
	}
	b = bytes.TrimSpace(b)
	if !json.Valid(b) {
		return nil, fmt.Errorf("--%s is not one JSON value", name)
	}
	return b, nil
}

// usageError reports a usage problem and returns exitUsage.
func usageError(stderr io.Writer, cmd string, err error) int {
	fmt.Fprintf(stderr, "holdfast %s: %v\n", cmd, err)
	return exitUsage
}

// parseFlags parses args; it returns (status, false) when the command should
// stop now (help asked, or a usage error, already reported by fs).
func parseFlags(fs *flag.FlagSet, args []string) (int, bool) {
	quietUsage(fs, args)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitUsage, false
	}
	return 0, true
}

// exitFor maps an answer to the command's exit status.
func exitFor(r *client.Response) int {
	switch {
	case r.OK():
		return exitOK
	case r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable:
		return exitLater
	case r.Status == http.StatusInsufficientStorage && r.Object()["storage"] != nil:
		// A node cannot write its files: nothing happened, and another
		// node may lead by the time the command runs again.
		return exitLater
	case r.Status != http.StatusConflict:
		return exitFailed
	}
	m := r.Object()
	switch m["status"] {
	case "held":
		return exitLater
	case "conflict":
		return exitConflict
	case "lost":
		return exitLost
	}
	if _, ok := m["reason"]; ok {
		return exitLost // the receipt's claim expired, was superseded or the job completed
	}
	if _, ok := m["job_id"]; ok {
		return exitConflict // the job key exists with another payload
	}
	if _, ok := m["job_status"]; ok {
		return exitConflict // a retry of a job that is not failed
	}
	return exitFailed // e.g. the queue's job limit
}

// errExit reports a call that got no answer and returns its exit status.
func errExit(stderr io.Writer, cmd string, err error) int {
	if errors.Is(err, client.ErrUnknown) {
		fmt.Fprintf(stderr, "holdfast %s: %v; read the state before you repeat it\n", cmd, err)
		return exitLater
	}
	fmt.Fprintf(stderr, "holdfast %s: %v\n", cmd, err)
	return exitFailed
}

// printAnswer writes the answer (or its --field) to stdout, a one-line
// summary of a failure to stderr, and returns the exit status.
func printAnswer(stdout, stderr io.Writer, cmd, field string, showStatus bool, r *client.Response) int {
	code := exitFor(r)
	if code == exitOK && showStatus {
		fmt.Fprintf(stderr, "HTTP %d %s\n", r.Status, http.StatusText(r.Status))
	}
	if code != exitOK {
		fmt.Fprintf(stderr, "holdfast %s: HTTP %d: %s\n", cmd, r.Status, r.ErrorMessage())
	}
	if field == "" {
		stdout.Write(bytes.TrimRight(r.Body, "\n"))
		fmt.Fprintln(stdout)
		return code
	}
	v, ok := lookupField(r.Body, field)
	if !ok {
		if code == exitOK {
			fmt.Fprintf(stderr, "holdfast %s: the answer has no field %q\n", cmd, field)
			return exitFailed
		}
		return code
	}
	fmt.Fprintln(stdout, v)
	return code
}

// lookupField finds a dotted field in a JSON object: strings come back raw,
// other values as JSON.
func lookupField(body []byte, path string) (string, bool) {
	var cur json.RawMessage = body
	for _, name := range strings.Split(path, ".") {
		var m map[string]json.RawMessage
		if json.Unmarshal(cur, &m) != nil {
			return "", false
		}
		v, ok := m[name]
		if !ok {
			return "", false
		}
		cur = v
	}
	var s string
	if json.Unmarshal(cur, &s) == nil {
		return s, true
	}
	return string(cur), true
}

// call is one client command's request and how its answer is shown.
type call struct {
	cmd  string
	opts *clientOpts
	req  client.Request
	// emptyIsLater makes a 200 whose answer is {"job":null} exit exitLater.
	emptyIsLater bool
	// render, when set, writes a successful answer to stdout instead of
	// the JSON body.
	render func(body []byte, stdout io.Writer) error
}

// run sends the call and prints its answer.
func (c call) run(stdout, stderr io.Writer) int {
	cl, err := c.opts.client()
	if err != nil {
		return usageError(stderr, c.cmd, err)
	}
	defer cl.CloseIdle()
	r, err := cl.Do(context.Background(), c.req)
	if err != nil {
		return errExit(stderr, c.cmd, err)
	}
	if c.render != nil && !r.OK() {
		// The rendered form (shell lines, say) is what stdout is for: a
		// refusal goes to stderr whole, so nothing of it is evaluated.
		return printAnswer(stderr, stderr, c.cmd, "", c.opts.showStatus, r)
	}
	if c.render != nil {
		printAnswer(io.Discard, stderr, c.cmd, "", c.opts.showStatus, r)
		if err := c.render(r.Body, stdout); err != nil {
			fmt.Fprintf(stderr, "holdfast %s: %v\n", c.cmd, err)
			return exitFailed
		}
		return exitOK
	}
	if c.emptyIsLater && r.OK() && isEmptyClaim(r.Body) {
		// No job: try later, whatever field was asked for (a field inside
		// the job is absent, so nothing is printed for it).
		if f := c.opts.field; f != "" && f != "job" {
			printAnswer(io.Discard, stderr, c.cmd, "", c.opts.showStatus, r)
			fmt.Fprintf(stderr, "holdfast %s: no job to claim\n", c.cmd)
			return exitLater
		}
		printAnswer(stdout, stderr, c.cmd, c.opts.field, c.opts.showStatus, r)
		return exitLater
	}
	return printAnswer(stdout, stderr, c.cmd, c.opts.field, c.opts.showStatus, r)
}

// isEmptyClaim says whether a claim's answer is {"job": null}.
func isEmptyClaim(body []byte) bool {
	var a struct {
		Job json.RawMessage `json:"job"`
	}
	return json.Unmarshal(body, &a) == nil && (a.Job == nil || string(a.Job) == "null")
}

// marshalBody encodes a request body built by a command.
func marshalBody(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode the request: %w", err)
	}
	return b, nil
}

// subcommand is one verb of a command group.
type subcommand struct {
	name, summary string
	run           func(args []string, stdout, stderr io.Writer) int
}

// dispatch runs the verb args[0] of group.
func dispatch(group string, subs []subcommand, args []string, stdout, stderr io.Writer) int {
	list := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: holdfast %s <command> [flags]\n\nCommands:\n", group)
		for _, s := range subs {
			fmt.Fprintf(w, "  %-10s %s\n", s.name, s.summary)
		}
		fmt.Fprintf(w, "\nRun \"holdfast %s <command> -h\" for its flags.\n", group)
	}
	if len(args) == 0 {
		list(stderr)
		return exitUsage
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(args[1:], stdout, stderr)
		}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		list(stdout)
		return exitOK
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	fmt.Fprintf(stderr, "holdfast %s: unknown command %q%s\n\n", group, args[0], suggest(args[0], names))
	list(stderr)
	return exitUsage
}

// asksHelp reports whether a command's arguments ask for its help (before
// any "--", after which they belong to the command it runs).
func asksHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// suggest names the closest of names to a mistyped one, as
// ` (did you mean "lease"?)`, or "" when none is within two edits.
func suggest(typed string, names []string) string {
	best, bestD := "", 3
	for _, n := range names {
		if d := editDistance(typed, n); d < bestD {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// newFlags makes the flag set of a client command.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("holdfast "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseTime reads a time flag: whole seconds ("30") or a Go duration
// ("30s", "10m", "1h30m"); never negative.
func parseTime(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("%s is negative", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("want whole seconds (30) or a duration (30s, 10m), not %q", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s is negative", s)
	}
	return d, nil
}

// secondsValue is a flag of whole seconds, given as a number or a duration.
type secondsValue struct{ n *int }

func (v secondsValue) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.Itoa(*v.n)
}

func (v secondsValue) Set(s string) error {
	d, err := parseTime(s)
	if err != nil {
		return err
	}
	if d%time.Second != 0 {
		return fmt.Errorf("%s is not a whole number of seconds", s)
	}
	*v.n = int(d / time.Second)
	return nil
}

// secondsVar registers a flag of whole seconds that also takes a duration.
func secondsVar(fs *flag.FlagSet, p *int, name string, def int, usage string) {
	*p = def
	fs.Var(secondsValue{p}, name, usage+" (seconds: 30, or a duration: 30s, 2m)")
}

// secondsFlag is secondsVar with a new variable.
func secondsFlag(fs *flag.FlagSet, name string, def int, usage string) *int {
	p := new(int)
	secondsVar(fs, p, name, def, usage)
	return p
}

// durationValue is a duration flag that also takes a bare number of seconds.
type durationValue struct{ d *time.Duration }

func (v durationValue) String() string {
	if v.d == nil {
		return "0s"
	}
	return v.d.String()
}

func (v durationValue) Set(s string) error {
	d, err := parseTime(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// durationVar registers a duration flag that also takes a bare number of
// seconds.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var(durationValue{p}, name, usage+" (a duration: 30s, 10m, or seconds: 30)")
}

// quietUsage makes a parse error one line naming the flag and why, and
// a pointer to -h, instead of the whole flag list; -h still lists them.
func quietUsage(fs *flag.FlagSet, args []string) {
	if asksHelp(args) {
		return
	}
	fs.Usage = func() { fmt.Fprintf(fs.Output(), "(%s -h lists the flags)\n", fs.Name()) }
}
