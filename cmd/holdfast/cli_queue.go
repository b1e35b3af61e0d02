package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast/holdfast/internal/client"
)

// queueRole is a queue token's role; its token is read from the
// environment variable HOLDFAST_<ROLE>_TOKEN by default.
type queueRole string

// The three roles of a queue's tokens.
const (
	writeRole  queueRole = "write"
	workerRole queueRole = "worker"
	readRole   queueRole = "read"
)

// env is the environment variable that holds the role's token.
func (r queueRole) env() string { return "HOLDFAST_" + strings.ToUpper(string(r)) + "_TOKEN" }

// queueCommand runs "holdfast queue <verb>".
func queueCommand(args []string, stdout, stderr io.Writer) int {
	return dispatch("queue", []subcommand{
		{"create", "create a queue: its id and three role tokens, shown only now", queueCreate},
		{"enqueue", "add a keyed JSON job (write token)", queueEnqueue},
		{"claim", "claim the next job with a secret receipt (worker token); exit 3 when none is available", queueClaim},
		{"ack", "mark a claimed job completed (worker token)", queueJobAction("ack")},
		{"release", "give a claim up so the job can be claimed again, at once or after --delay seconds (worker token)", queueJobAction("release")},
		{"renew", "extend a claim's visibility window (worker token)", queueJobAction("renew")},
		{"retry", "move a failed job back to pending with its attempts reset (write token)", queueRetry},
		{"get", "read a queue's times and counts (read token)", queueGet},
		{"job", "read one job (read token)", queueJob},
	}, args, stdout, stderr)
}

// queueFlags are the flags of a command on one queue.
type queueFlags struct {
	fs    *flag.FlagSet
	opts  *clientOpts
	queue string
	token *secretValue
}

func newQueueFlags(name string, role queueRole, stderr io.Writer) *queueFlags {
	q := &queueFlags{fs: newFlags(name, stderr)}
	q.opts = addClientFlags(q.fs)
	q.fs.StringVar(&q.queue, "queue", envOr("HOLDFAST_QUEUE", ""), "queue id (HOLDFAST_QUEUE)")
	q.token = secretFlag(q.fs, "token", role.env(), "the queue's "+string(role)+" token")
	return q
}

// resolve checks the queue id and token after parsing.
func (q *queueFlags) resolve() (string, error) {
	if q.queue == "" {
		return "", errors.New("--queue (or HOLDFAST_QUEUE) is required")
	}
	return q.token.need("token")
}

// path is a route under the queue.
func (q *queueFlags) path(rest string) string {
	return client.APIPrefix + "/queue/" + url.PathEscape(q.queue) + rest
}

// jobFlag adds --job.
func (q *queueFlags) jobFlag() *string {
	return q.fs.String("job", envOr("HOLDFAST_JOB_ID", ""), "job id (HOLDFAST_JOB_ID)")
}

// parseWithJob parses args and checks the queue, the token and --job; it
// returns the token, or the exit status when ok is false.
func (q *queueFlags) parseWithJob(args []string, job *string, stderr io.Writer) (token string, code int, ok bool) {
	name := q.fs.Name()[len("holdfast "):]
	if code, ok := parseFlags(q.fs, args); !ok {
		return "", code, false
	}
	token, err := q.resolve()
	if err == nil && *job == "" {
		err = errors.New("--job (or HOLDFAST_JOB_ID) is required")
	}
	if err != nil {
		return "", usageError(stderr, name, err), false
	}
	return token, 0, true
}

// send runs the command's request.
func (q *queueFlags) send(stdout, stderr io.Writer, req client.Request, emptyIsLater bool) int {
	return call{cmd: q.fs.Name()[len("holdfast "):], opts: q.opts, req: req, emptyIsLater: emptyIsLater}.run(stdout, stderr)
}

func queueCreate(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("queue create", stderr)
	o := addClientFlags(fs)
	asEnv := fs.Bool("env", false, `print shell export lines of HOLDFAST_QUEUE and the three token variables instead of the answer (eval "$(holdfast queue create --env)")`)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	c := call{cmd: "queue create", opts: o, req: client.Request{
		Method: http.MethodPost, Path: client.APIPrefix + "/queue", Body: []byte(`{}`),
	}}
	if *asEnv {
		if o.field != "" {
			return usageError(stderr, "queue create", errors.New("--field and --env cannot be combined"))
		}
		c.render = exportQueue
	}
	return c.run(stdout, stderr)
}

// exportQueue writes a queue's creation answer as shell export lines.
func exportQueue(body []byte, stdout io.Writer) error {
	var q queueCreated
	if err := json.Unmarshal(body, &q); err != nil {
		return fmt.Errorf("decode the answer: %w", err)
	}
	vars := []struct{ name, value string }{
		{"HOLDFAST_QUEUE", q.QueueID}, {writeRole.env(), q.WriteToken}, {workerRole.env(), q.WorkerToken}, {readRole.env(), q.ReadToken},
	}
	for _, v := range vars {
		// Ids and tokens are hex: nothing a shell would expand.
		if !isLowerHex(v.value) {
			return fmt.Errorf("the answer's %s is not an id or token", v.name)
		}
		fmt.Fprintf(stdout, "export %s=%s\n", v.name, v.value)
	}
	return nil
}

// isLowerHex says whether s is non-empty lowercase hex.
func isLowerHex(s string) bool {
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return s != ""
}

func queueEnqueue(args []string, stdout, stderr io.Writer) int {
	q := newQueueFlags("queue enqueue", writeRole, stderr)
	key := q.fs.String("key", "", "job_key (required): the same key and payload again is deduplicated")
	payload := q.fs.String("payload", "", "the payload (required): JSON text, @FILE or - for stdin")
	if code, ok := parseFlags(q.fs, args); !ok {
		return code
	}
	if *key == "" {
		return usageError(stderr, "queue enqueue", errors.New("--key is required"))
	}
	token, err := q.resolve()
	if err != nil {
		return usageError(stderr, "queue enqueue", err)
	}
	p, err := jsonArg("payload", *payload, os.Stdin)
	if err != nil {
		return usageError(stderr, "queue enqueue", err)
	}
	b, err := marshalBody(map[string]any{"job_key": *key, "payload": p})
	if err != nil {
		return usageError(stderr, "queue enqueue", err)
	}
	// An enqueue has a key: repeating it is deduplicated.
	return q.send(stdout, stderr, client.Request{Method: http.MethodPost, Path: q.path("/jobs"), Token: token, Body: b, Repeatable: true}, false)
}

func queueClaim(args []string, stdout, stderr io.Writer) int {
	q := newQueueFlags("queue claim", workerRole, stderr)
	vis := secondsFlag(q.fs, "visibility", 0, "visibility_timeout (0: the server's default)")
	requestID := secretFlag(q.fs, "request-id", "HOLDFAST_REQUEST_ID", "request_id naming this claim: the same one again, while its claim is active, answers that claim")
	wait := secondsFlag(q.fs, "wait", 0, "wait_seconds: wait up to this long for a job when none is available, 0 to 20")
	if code, ok := parseFlags(q.fs, args); !ok {
		return code
	}
	token, err := q.resolve()
	if err != nil {
		return usageError(stderr, "queue claim", err)
	}
	rid, err := requestID.get()
	if err != nil {
		return usageError(stderr, "queue claim", err)
	}
	// A claim with a request id may be repeated after an unknown outcome.
	return q.send(stdout, stderr, client.Request{Method: http.MethodPost, Path: q.path("/claim"), Token: token, Body: claimBody(*vis, rid, *wait),
		Repeatable: rid != "", Wait: time.Duration(max(*wait, 0)) * time.Second}, true)
}

// claimBody is a claim's request body; visibility 0, requestID "" and
// wait 0 are left out.
func claimBody(visibility int, requestID string, wait int) []byte {
	m := map[string]any{}
	if visibility != 0 {
		m["visibility_timeout"] = visibility
	}
	if requestID != "" {
		m["request_id"] = requestID
	}
	if wait != 0 {
		m["wait_seconds"] = wait
	}
	b, _ := json.Marshal(m)
	return b
}

// queueJobAction builds ack, release and renew.
func queueJobAction(action string) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		name := "queue " + action
		q := newQueueFlags(name, workerRole, stderr)
		job := q.jobFlag()
		receipt := secretFlag(q.fs, "receipt", "HOLDFAST_RECEIPT", "the claim's receipt")
		var vis, delay *int
		switch action {
		case "renew":
			vis = secondsFlag(q.fs, "visibility", 0, "the new visibility_timeout (0: the server's default)")
		case "release":
			delay = secondsFlag(q.fs, "delay", 0, "delay_seconds: keep the job from claims for this long, 0 to 900")
		}
		token, code, ok := q.parseWithJob(args, job, stderr)
		if !ok {
			return code
		}
		rc, err := receipt.need("receipt")
		if err != nil {
			return usageError(stderr, name, err)
		}
		body := map[string]any{"receipt": rc}
		if vis != nil && *vis != 0 {
			body["visibility_timeout"] = *vis
		}
		if delay != nil && *delay != 0 {
			body["delay_seconds"] = *delay
		}
		b, err := marshalBody(body)
		if err != nil {
			return usageError(stderr, name, err)
		}
		// An ack may be repeated with its receipt (the README's error table).
		return q.send(stdout, stderr, client.Request{
			Method: http.MethodPost, Path: q.path("/jobs/" + url.PathEscape(*job) + "/" + action),
			Token: token, Body: b, Repeatable: action == "ack",
		}, false)
	}
}

func queueRetry(args []string, stdout, stderr io.Writer) int {
	q := newQueueFlags("queue retry", writeRole, stderr)
	job := q.jobFlag()
	token, code, ok := q.parseWithJob(args, job, stderr)
	if !ok {
		return code
	}
	return q.send(stdout, stderr, client.Request{Method: http.MethodPost, Path: q.path("/jobs/" + url.PathEscape(*job) + "/retry"), Token: token, Body: []byte(`{}`)}, false)
}

func queueGet(args []string, stdout, stderr io.Writer) int {
	q := newQueueFlags("queue get", readRole, stderr)
	if code, ok := parseFlags(q.fs, args); !ok {
		return code
	}
	token, err := q.resolve()
	if err != nil {
		return usageError(stderr, "queue get", err)
	}
	return q.send(stdout, stderr, client.Request{Method: http.MethodGet, Path: q.path(""), Token: token, Repeatable: true}, false)
}

func queueJob(args []string, stdout, stderr io.Writer) int {
	q := newQueueFlags("queue job", readRole, stderr)
	job := q.jobFlag()
	wait := secondsFlag(q.fs, "wait", 0, "wait_seconds: wait up to this long for the job to be completed or failed, 0 to 60")
	token, code, ok := q.parseWithJob(args, job, stderr)
	if !ok {
		return code
	}
	path := q.path("/jobs/" + url.PathEscape(*job))
	if *wait != 0 {
		path += "?wait_seconds=" + strconv.Itoa(*wait)
	}
	return q.send(stdout, stderr, client.Request{Method: http.MethodGet, Path: path, Token: token, Repeatable: true, Wait: time.Duration(max(*wait, 0)) * time.Second}, false)
}
