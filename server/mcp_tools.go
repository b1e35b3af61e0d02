package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
	"github.com/holdfast/holdfast/internal/strictjson"
	"github.com/holdfast/holdfast/server/service"
)

// toolDef is one MCP tool: its schema and contract, how to run it through
// the service layer, and the REST request it is equivalent to.
type toolDef struct {
	name, title, description string
	// Annotations, all set explicitly.
	readOnly, destructive, idempotent bool
	args                              []toolArg

	// leaderOnly tools run on the leader: called directly there, and sent
	// to it as their REST request from any other node.
	leaderOnly bool
	// method and path give the equivalent REST request; path is under
	// APIPrefix and built from the (validated) arguments.
	method string
	path   func(toolArgs) string
	// bearer names the argument sent as the Authorization bearer token.
	bearer string
	// body lists the arguments that form the REST body.
	body []string
	// local runs the tool on this node through the service layer.
	local func(ctx context.Context, s *Server, c *toolCall) reply
}

// toolArg is one argument: its JSON Schema, and the rule stated in a
// protocol error when a value breaks it (never the value itself, which may
// be a secret).
type toolArg struct {
	name     string
	required bool
	schema   *jsonschema.Schema
	rule     string
	resolved *jsonschema.Resolved
}

// Patterns of the specification's identifiers and secrets.
const (
	namespacePattern  = `^ns_[A-Za-z0-9_-]{43}$`
	ownerTokenPattern = `^own_[A-Za-z0-9_-]{43}$`
	idPattern         = `^[0-9a-f]{32}$`
	tokenPattern      = `^[0-9a-f]{64}$`
	jobKeyPattern     = `^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`
	requestIDPattern  = `^[A-Za-z0-9_-]{32,128}$`
)

func strArg(name string, required bool, pattern, rule, desc string) toolArg {
	return toolArg{name: name, required: required, rule: rule,
		schema: &jsonschema.Schema{Type: "string", Pattern: pattern, Description: desc}}
}

func textArg(name string, required bool, minLen, maxLen int, desc string) toolArg {
	return toolArg{name: name, required: required, rule: fmt.Sprintf("must be a string of %d to %d characters", minLen, maxLen),
		schema: &jsonschema.Schema{Type: "string", MinLength: &minLen, MaxLength: &maxLen, Description: desc}}
}

func intArg(name string, lo, hi, def float64, desc string) toolArg {
	return toolArg{name: name, rule: fmt.Sprintf("must be an integer from %d to %d", int64(lo), int64(hi)),
		schema: &jsonschema.Schema{Type: "integer", Minimum: &lo, Maximum: &hi, Default: json.RawMessage(strconv.FormatInt(int64(def), 10)), Description: desc}}
}

func jsonArg(name, desc string) toolArg {
	return toolArg{name: name, required: true, rule: "must be a JSON value",
		schema: &jsonschema.Schema{Description: desc}}
}

// Contract text shared by tool descriptions.
const (
	resultNote = "\n\nResult: the REST API's JSON body as structured content plus http_status (the HTTP status the REST API answers); isError is true whenever http_status is not 2xx. " +
		"http_status 503 with outcome \"not_applied\": nothing changed, call again after retry_after_seconds; outcome \"unknown\": it may or may not have taken effect, so check before repeating anything unsafe to repeat."
	leaseSecrets = "\n\nTreat namespace, key, fingerprint and owner_token as secrets: anyone who knows them can test the lease or read its result."
	queueErrors  = " http_status 404: the queue (or job) does not exist or has expired. 403: the token is not this queue's token for this role."
	atLeastOnce  = "Delivery is at-least-once: a job whose claim ends without an ack (visibility window passed, released) is claimed again, up to 5 attempts, after which it is failed. " +
		"A worker may finish the work and lose its claim before acking, so the work may run twice: make its effects idempotent, keyed by job_key or job_id."
)

// mcpTools defines the fifteen tools. The argument names mirror the REST
// bodies; queue tools take the role token as an argument named for its role.
func mcpTools() []*toolDef {
	// Arguments shared by several tools, built afresh for each server.
	argNamespace := func(desc string) toolArg {
		return strArg("namespace", false, namespacePattern, "must be a namespace from create_lease_namespace: ns_ followed by 43 base64url characters", desc)
	}
	argKey := func(desc string) toolArg { return textArg("key", true, 1, 512, desc) }
	argTTL := func(desc string) toolArg { return intArg("ttl_seconds", 1, 86400, 60, desc) }
	argOwnerToken := func() toolArg {
		return strArg("owner_token", true, ownerTokenPattern, "must be an owner token from acquire_lease: own_ followed by 43 base64url characters",
			"SECRET owner token returned by acquire_lease (own_ followed by 43 base64url characters).")
	}
	argQueueID := func() toolArg {
		return strArg("queue_id", true, idPattern, "must be 32 lowercase hex characters",
			"Queue id returned by create_agent_queue (32 lowercase hex characters). The id alone grants no access.")
	}
	argJobID := func() toolArg {
		return strArg("job_id", true, idPattern, "must be 32 lowercase hex characters",
			"Job id returned by enqueue_agent_queue_job or claim_agent_queue_job (32 lowercase hex characters).")
	}
	argReceipt := func() toolArg {
		return strArg("receipt", true, tokenPattern, "must be 64 lowercase hex characters",
			"SECRET receipt returned by claim_agent_queue_job for this claim (64 lowercase hex characters).")
	}
	argVisibility := func(desc string) toolArg { return intArg("visibility_timeout", 30, 900, 60, desc) }
	argRoleToken := func(role, desc string) toolArg {
		return strArg(role, true, tokenPattern, "must be 64 lowercase hex characters", desc)
	}
	workerToken := func() toolArg {
		return argRoleToken("worker_token", "SECRET worker token of the queue (64 lowercase hex characters), from create_agent_queue.")
	}
	writeToken := func() toolArg {
		return argRoleToken("write_token", "SECRET write token of the queue (64 lowercase hex characters), from create_agent_queue.")
	}
	readToken := func() toolArg {
		return argRoleToken("read_token", "SECRET read token of the queue (64 lowercase hex characters), from create_agent_queue.")
	}

	leaseBody := []string{"namespace", "key", "ttl_seconds", "fingerprint", "request_id", "wait_seconds", "owner_token", "result", "slots", "checkpoint"}
	argWait := func(maxSeconds float64, desc string) toolArg { return intArg("wait_seconds", 0, maxSeconds, 0, desc) }
	argRequestID := func(desc string) toolArg {
		return strArg("request_id", false, requestIDPattern, secret.RequestIDRule, desc)
	}
	leaseOwner := func(op func(*service.Service, context.Context, service.LeaseOwnerRequest) (service.LeaseAnswer, error)) func(context.Context, *Server, *toolCall) reply {
		return func(ctx context.Context, s *Server, c *toolCall) reply {
			var in service.LeaseOwnerRequest
			if bad := c.decode(&in); bad != nil {
				return *bad
			}
			return leaseReply(op(s.svc, ctx, in))
		}
	}
	queuePath := func(a toolArgs) string { return "/queue/" + a.escapedID("queue_id") }
	jobPath := func(action string) func(toolArgs) string {
		return func(a toolArgs) string {
			return "/queue/" + a.escapedID("queue_id") + "/jobs/" + a.escapedID("job_id") + "/" + action
		}
	}

	return []*toolDef{
		{
			name:  "create_lease_namespace",
			title: "Create a lease namespace",
			description: "Mint a private namespace for leases: a bearer secret with 256 random bits (ns_ followed by 43 base64url characters). " +
				"Keep it in your own job state: holdfast cannot list or recover it. With a namespace, lease keys can be readable (e.g. invoice:2026-09-05); " +
				"without one, a key must itself be a high-entropy value of 32 to 200 printable ASCII characters. Nothing is stored by this call. " +
				"The namespace is a secret: share it only with the workers that use its leases." + resultNote,
			readOnly: true, idempotent: false, destructive: false,
			method: http.MethodPost, path: func(toolArgs) string { return "/lease/namespace" },
			local: func(_ context.Context, s *Server, _ *toolCall) reply {
				return namespaceReply(s.svc.CreateNamespace())
			},
		},
		{
			name:  "acquire_lease",
			title: "Acquire a lease",
			description: "Acquire the lease on a key so that only one worker does that piece of work. Outcomes:\n" +
				"- http_status 201, status \"held\", with owner_token: you own the lease until lease_expires_at. Keep owner_token secret; it is the only way to renew_lease, release_lease or complete_lease. " +
				"Send fencing_token with every write to the system the lease protects; that system must remember the highest fencing token it has accepted and reject any write with a lower one. " +
				"Fencing tokens only ever grow (a later owner of the same key always gets a higher one), so a worker that paused and lost its lease cannot overwrite newer work.\n" +
				"- http_status 200, status \"completed\", with result: the work was already done; use result and do not redo it. No owner token is issued.\n" +
				"- http_status 409, status \"held\" (isError): someone (possibly you) holds the lease; no owner token is disclosed. Wait retry_after_seconds and call again, or do other work.\n" +
				"- http_status 409, status \"conflict\" (isError): the key is bound to another fingerprint until absolute_expires_at: an idempotency key was reused for different input; use another key. With field \"slots\": the key was first acquired with another slot count (the answer's slots); use that.\n" +
				"- http_status 400/413: an argument broke a rule; the error names it.\n" +
				"- http_status 507 (isError): the key is new and the cluster holds its maximum of lease records (setting max_leases); keys already in use still work. Tell the operator; retrying soon will not help.\n" +
				"The first acquisition starts a fixed 24-hour lifecycle (absolute_expires_at) that renewals never move; after it ends the key starts afresh with a higher fencing token." +
				leaseSecrets + resultNote,
			readOnly: false, idempotent: false, destructive: false,
			args: []toolArg{
				argNamespace("Namespace from create_lease_namespace (SECRET). With it the key may be readable; without it the key must be a high-entropy secret."),
				argKey("SECRET key naming the work: with a namespace 1 to 512 bytes (e.g. invoice:2026-09-05); without one 32 to 200 printable ASCII characters of high entropy."),
				argTTL("Lease length in seconds, 1 to 86400, default 60; never past absolute_expires_at (the returned ttl_seconds is the time actually granted)."),
				textArg("fingerprint", false, 1, 512, "Binds the key to its input (e.g. a hash of the request) for the 24-hour lifecycle; another fingerprint gets status \"conflict\". Omitted counts as a value of its own. SECRET."),
				argRequestID("Your own random SECRET naming this acquire, 32 to 128 letters, digits, '-' or '_' (e.g. a UUID). If the answer is lost, call again with the same request_id: while that grant holds the lease you get the same 201 (owner_token, fencing_token) instead of 409 held. Use a new one for every acquire meant as new."),
				argWait(service.MaxAcquireWaitSeconds, "Seconds to wait while someone else holds the lease, 0 to 60, default 0. Waiters get the lease in arrival order when it is released, expires or completes (201, a higher fencing_token, or 200 with the stored result); at the deadline the ordinary 409 held. Cancelling the call stops the wait."),
				intArg("slots", 1, fsm.MaxSlots, 1, "How many owners may hold the key at once, 1 to 1000, default 1 (e.g. at most 3 crawlers per site). The key's first acquire in its lifecycle fixes it; another count gets 409 \"conflict\" naming slots. Each owner gets its own owner_token and fencing_token; answers show slots and held. complete_lease is refused on a key with more than one slot."),
			},
			leaderOnly: true, method: http.MethodPost, path: func(toolArgs) string { return "/lease" }, body: leaseBody,
			local: func(ctx context.Context, s *Server, c *toolCall) reply {
				var in service.AcquireLeaseRequest
				if bad := c.decode(&in); bad != nil {
					return *bad
				}
				return leaseReply(s.svc.AcquireLease(ctx, in))
			},
		},
		{
			name:  "renew_lease",
			title: "Renew a lease",
			description: "Extend a lease you hold: the lease now ends ttl_seconds from now (never past absolute_expires_at; the returned ttl_seconds is the time granted). The fencing token stays the same. " +
				"Renew well before lease_expires_at while the work continues.\n" +
				"- http_status 200, status \"held\": renewed.\n" +
				"- http_status 409, status \"lost\" (isError): you no longer own the lease (it expired, was released or completed, or a newer owner with a higher fencing token has it). " +
				"Stop the work and make no further writes with your fencing token; call acquire_lease again if the work still needs doing." +
				leaseSecrets + resultNote,
			readOnly: false, idempotent: false, destructive: false,
			args: []toolArg{
				argNamespace("The namespace used to acquire (SECRET)."),
				argKey("The key used to acquire (SECRET)."),
				argOwnerToken(),
				argTTL("New lease length in seconds from now, 1 to 86400, default 60."),
			},
			leaderOnly: true, method: http.MethodPost, path: func(toolArgs) string { return "/lease/renew" }, body: leaseBody,
			local: leaseOwner((*service.Service).RenewLease),
		},
		{
			name:  "release_lease",
			title: "Release a lease",
			description: "Give up a lease you hold without completing it: the key is free at once, and the next owner gets a higher fencing token.\n" +
				"- http_status 200, status \"released\".\n" +
				"- http_status 409, status \"lost\" (isError): you did not hold it any more (expired, released, completed or taken over); nothing changed, and there is nothing left to release." +
				leaseSecrets + resultNote,
			readOnly: false, idempotent: true, destructive: true,
			args: []toolArg{
				argNamespace("The namespace used to acquire (SECRET)."),
				argKey("The key used to acquire (SECRET)."),
				argOwnerToken(),
			},
			leaderOnly: true, method: http.MethodPost, path: func(toolArgs) string { return "/lease/release" }, body: leaseBody,
			local: leaseOwner((*service.Service).ReleaseLease),
		},
		{
			name:  "complete_lease",
			title: "Complete a lease",
			description: "Record the work as done: stores result and removes the owner token. Until absolute_expires_at, acquire_lease with the same namespace, key and fingerprint answers status \"completed\" with this result instead of granting the lease again.\n" +
				"- http_status 200, status \"completed\".\n" +
				"- http_status 409, status \"lost\" (isError): you no longer own the lease, so result was NOT stored; another worker may have done or be doing the work. Call acquire_lease to see the current state.\n" +
				"- http_status 413: result is over 32 KB. result is any JSON value of at most 32 KB; fields named like authorization, password, secret, token, private_key or api_key are replaced with \"[redacted]\" before storage. " +
				"Keep secrets and personal data out of results." + leaseSecrets + resultNote,
			readOnly: false, idempotent: true, destructive: true,
			args: []toolArg{
				argNamespace("The namespace used to acquire (SECRET)."),
				argKey("The key used to acquire (SECRET)."),
				argOwnerToken(),
				jsonArg("result", "Any JSON value to store as the work's result, at most 32 KB as JSON after redaction."),
			},
			leaderOnly: true, method: http.MethodPost, path: func(toolArgs) string { return "/lease/complete" }, body: leaseBody,
			local: leaseOwner((*service.Service).CompleteLease),
		},
		{
			name:  "checkpoint_lease",
			title: "Checkpoint a lease",
			description: "Store your progress on a lease you hold, so that whoever acquires the key next in its 24-hour lifecycle (you after a crash, or another worker) can pick up where you stopped: every later grant (acquire_lease, http_status 201) returns checkpoint with checkpoint_fencing_token (the fencing token of the holder that wrote it) and checkpoint_at. A newer checkpoint replaces the older; complete_lease replaces it with the result.\n" +
				"- http_status 200, status \"checkpointed\", with your fencing_token and checkpoint_at: stored.\n" +
				"- http_status 409, status \"lost\" (isError): you no longer hold the lease, so nothing was stored: a holder that lost its lease can never overwrite its successor's progress. Stop the work.\n" +
				"- http_status 409, status \"conflict\" with field \"slots\" (isError): the key has more than one slot; checkpoints belong to single-slot leases.\n" +
				"- http_status 413: checkpoint is over 32 KB. Fields named like authorization, password, secret, token, private_key or api_key are replaced with \"[redacted]\" before storage." + leaseSecrets + resultNote,
			readOnly: false, idempotent: true, destructive: false,
			args: []toolArg{
				argNamespace("The namespace used to acquire (SECRET)."),
				argKey("The key used to acquire (SECRET)."),
				argOwnerToken(),
				jsonArg("checkpoint", "Any JSON value describing your progress (e.g. {\"step\": 3, \"cursor\": \"...\"}), at most 32 KB as JSON after redaction."),
			},
			leaderOnly: true, method: http.MethodPost, path: func(toolArgs) string { return "/lease/checkpoint" }, body: leaseBody,
			local: leaseOwner((*service.Service).CheckpointLease),
		},
		{
			name:  "create_agent_queue",
			title: "Create a job queue",
			description: "Create a job queue. Returns queue_id, created_at_timestamp, expire_timestamp, counts and three SECRET role tokens, returned only now: " +
				"write_token (producers: enqueue), worker_token (workers: claim, ack, release, renew) and read_token (observers: read). Save them and share each only with the systems that need its role. " +
				"The queue and all its jobs, completed ones included, are deleted at expire_timestamp, 24 hours after creation; nothing extends it. A queue holds at most 100 distinct jobs over its life.\n" +
				"- http_status 201: created.\n" +
				"- http_status 429 (isError): this client address created 20 queues in the last 24 hours; retry after retry_after_seconds.\n" +
				"- http_status 507 (isError): the cluster holds its maximum of live queues (setting max_queues); existing queues still work. Tell the operator; retrying soon will not help." + resultNote,
			readOnly: false, idempotent: false, destructive: false,
			leaderOnly: true, method: http.MethodPost, path: func(toolArgs) string { return "/queue" },
			local: func(ctx context.Context, s *Server, c *toolCall) reply {
				return queueCreatedReply(s.svc.CreateQueue(ctx, service.CreateQueueRequest{ClientIP: c.clientIP}))
			},
		},
		{
			name:  "enqueue_agent_queue_job",
			title: "Enqueue a job",
			description: "Add a keyed JSON job to a queue. A stable job_key makes retries safe.\n" +
				"- http_status 201, deduplicated false: a new pending job; save job_id to read it later.\n" +
				"- http_status 200, deduplicated true: a job with this job_key and the same payload exists; that job is returned (a retry is safe).\n" +
				"- http_status 409 (isError) with job_id: this job_key exists with a different payload; use a new key. 409 with limit: the queue holds its maximum of 100 distinct jobs (completed and failed ones count); create another queue." +
				queueErrors + "\nThe payload is stored unencrypted: never put credentials or personal data in it. holdfast does not execute payloads or fetch URLs." + resultNote,
			readOnly: false, idempotent: true, destructive: false,
			args: []toolArg{
				argQueueID(),
				writeToken(),
				strArg("job_key", true, jobKeyPattern, "must be 1 to 64 characters, start with an ASCII letter or digit, and contain only letters, digits, '.', '_', ':' and '-'",
					"Stable key of the job, 1 to 64 characters: an ASCII letter or digit, then letters, digits, '.', '_', ':' or '-'. The same key and payload always return the same job."),
				jsonArg("payload", "Any JSON value, including null, at most 16384 bytes encoded. Stored unencrypted: no secrets."),
			},
			leaderOnly: true, method: http.MethodPost, bearer: "write_token", body: []string{"job_key", "payload"},
			path: func(a toolArgs) string { return queuePath(a) + "/jobs" },
			local: func(ctx context.Context, s *Server, c *toolCall) reply {
				a, bad := c.queueAuth("write_token")
				if bad != nil {
					return *bad
				}
				in := service.EnqueueRequest{Auth: a}
				if bad := c.decode(&in); bad != nil {
					return *bad
				}
				return jobAnswerReply(s.svc.Enqueue(ctx, in))
			},
		},
		{
			name:  "claim_agent_queue_job",
			title: "Claim the next job",
			description: "Claim the first pending job. The answer's job has job_id, job_key, payload, status \"claimed\", attempts, claim_expire_timestamp and a SECRET receipt, disclosed only here: keep it to ack, release or renew this claim. " +
				"The job stays hidden from other workers until claim_expire_timestamp; renew_agent_queue_job before then if the work takes longer. " +
				"When nothing is pending the answer is job: null (http_status 200, not an error): wait a few seconds before claiming again.\n" +
				atLeastOnce + queueErrors + resultNote,
			readOnly: false, idempotent: false, destructive: false,
			args: []toolArg{
				argQueueID(),
				workerToken(),
				argVisibility("Seconds the claim hides the job from other workers, 30 to 900, default 60; capped at the queue's expiry."),
				argRequestID("Your own random SECRET naming this claim, 32 to 128 letters, digits, '-' or '_' (e.g. a UUID). If the answer is lost, call again with the same request_id: while that claim is active you get the same job and receipt instead of the job staying hidden until its window ends. Use a new one for every claim meant as new."),
				argWait(service.MaxClaimWaitSeconds, "Seconds to wait for a job when none is available, 0 to 20, default 0: the call answers as soon as a job can be claimed (waiting calls are served in arrival order), or job: null at the deadline. Cancelling the call stops the wait."),
			},
			leaderOnly: true, method: http.MethodPost, bearer: "worker_token", body: []string{"visibility_timeout", "request_id", "wait_seconds"},
			path: func(a toolArgs) string { return queuePath(a) + "/claim" },
			local: func(ctx context.Context, s *Server, c *toolCall) reply {
				a, bad := c.queueAuth("worker_token")
				if bad != nil {
					return *bad
				}
				in := service.ClaimRequest{Auth: a}
				if bad := c.decode(&in); bad != nil {
					return *bad
				}
				return jobAnswerReply(s.svc.Claim(ctx, in))
			},
		},
		{
			name:  "read_agent_queue",
			title: "Read queue counts",
			description: "Read a queue's created_at_timestamp, expire_timestamp and job counts (pending, claimed, completed, failed, total). It does not list jobs: keep job ids from enqueue answers. " +
				"The read is linearizable (it reflects every change acknowledged before it)." + queueErrors + resultNote,
			readOnly: true, idempotent: true, destructive: false,
			args:       []toolArg{argQueueID(), readToken()},
			leaderOnly: true, method: http.MethodGet, bearer: "read_token", path: queuePath,
			local: func(ctx context.Context, s *Server, c *toolCall) reply {
				a, bad := c.queueAuth("read_token")
				if bad != nil {
					return *bad
				}
				return queueReply(s.svc.ReadQueue(ctx, service.ReadQueueRequest{Auth: a}))
			},
		},
		{
			name:  "read_agent_queue_job",
			title: "Read one job",
			description: "Read one job: job_id, job_key, payload, status (pending, claimed, completed or failed), attempts and timestamps. Never reveals tokens or receipts. " +
				"The read is linearizable. http_status 404 also when the job id is unknown in this queue." + queueErrors + resultNote,
			readOnly: true, idempotent: true, destructive: false,
			args: []toolArg{argQueueID(), readToken(), argJobID(),
				argWait(service.MaxReadWaitSeconds, "Seconds to wait for the job's outcome, 0 to 60, default 0: the call answers as soon as the job is completed or failed, or with its state at the deadline. Cancelling the call stops the wait.")},
			leaderOnly: true, method: http.MethodGet, bearer: "read_token",
			path: func(a toolArgs) string {
				p := queuePath(a) + "/jobs/" + a.escapedID("job_id")
				if w := a.waitSeconds(); w > 0 {
					p += "?wait_seconds=" + strconv.FormatInt(w, 10)
				}
				return p
			},
			local: func(ctx context.Context, s *Server, c *toolCall) reply {
				a, bad := c.queueAuth("read_token")
				if bad != nil {
					return *bad
				}
				return jobReadReply(s.svc.ReadJob(ctx, service.ReadJobRequest{Auth: a, JobID: c.args.str("job_id"), Wait: time.Duration(c.args.waitSeconds()) * time.Second}))
			},
		},
		{
			name:  "ack_agent_queue_job",
			title: "Acknowledge a job",
			description: "Mark a claimed job completed, with the receipt of its current claim. Only the outcome of the work is up to you: ack stores no result.\n" +
				"- http_status 200: completed. Repeating an ack with the same receipt is safe and answers 200 again.\n" +
				"- http_status 409 (isError) with reason \"expired\" or \"superseded\": your claim ended (window passed, released, or the job was claimed again) and the job was not completed by this call; " +
				"another worker may run it again, so your work's effects must be idempotent. Do not retry the ack." +
				queueErrors + resultNote,
			readOnly: false, idempotent: true, destructive: false,
			args:       []toolArg{argQueueID(), workerToken(), argJobID(), argReceipt()},
			leaderOnly: true, method: http.MethodPost, bearer: "worker_token", body: []string{"receipt"}, path: jobPath("ack"),
			local: receiptTool((*service.Service).AckJob, ackRequest),
		},
		{
			name:  "release_agent_queue_job",
			title: "Release a job",
			description: "Give a claimed job back without completing it: it is pending again for another attempt, or failed if this was its 5th attempt. " +
				"With delay_seconds it is not claimed again for that long (capped at the queue's expiry); the job then shows available_at_timestamp.\n" +
				"- http_status 200: the job as it now is.\n" +
				"- http_status 409 (isError) with reason \"expired\", \"superseded\" or \"completed\": your claim had already ended; nothing changed." +
				queueErrors + resultNote,
			readOnly: false, idempotent: true, destructive: true,
			args: []toolArg{argQueueID(), workerToken(), argJobID(), argReceipt(),
				intArg("delay_seconds", 0, 900, 0, "Seconds before the job may be claimed again, 0 to 900, default 0; capped at the queue's expiry.")},
			leaderOnly: true, method: http.MethodPost, bearer: "worker_token", body: []string{"receipt", "delay_seconds"}, path: jobPath("release"),
			local: receiptTool((*service.Service).ReleaseJob, releaseRequest),
		},
		{
			name:  "retry_agent_queue_job",
			title: "Retry a failed job",
			description: "Give a failed job (it used its 5 attempts) a fresh start: it becomes pending with attempts 0 and is claimed again like a new job. Takes the write token: retrying is the producer's decision.\n" +
				"- http_status 200: the job as it now is (status \"pending\", attempts 0).\n" +
				"- http_status 409 (isError) with job_status: the job is not failed (pending, claimed or completed); nothing changed." +
				queueErrors + resultNote,
			readOnly: false, idempotent: false, destructive: false,
			args:       []toolArg{argQueueID(), writeToken(), argJobID()},
			leaderOnly: true, method: http.MethodPost, bearer: "write_token", path: jobPath("retry"),
			local: func(ctx context.Context, s *Server, c *toolCall) reply {
				a, bad := c.queueAuth("write_token")
				if bad != nil {
					return *bad
				}
				return jobAnswerReply(s.svc.RetryJob(ctx, service.RetryJobRequest{Auth: a, JobID: c.args.str("job_id")}))
			},
		},
		{
			name:  "renew_agent_queue_job",
			title: "Renew a job claim",
			description: "Extend your claim on a job: it stays hidden from other workers until visibility_timeout seconds from now (capped at the queue's expiry). Same attempt, same receipt.\n" +
				"- http_status 200: the job with its new claim_expire_timestamp.\n" +
				"- http_status 409 (isError) with reason \"expired\", \"superseded\" or \"completed\": your claim has ended and the job may be delivered to another worker; stop and do not ack." +
				queueErrors + resultNote,
			readOnly: false, idempotent: false, destructive: false,
			args: []toolArg{argQueueID(), workerToken(), argJobID(), argReceipt(),
				argVisibility("New visibility window in seconds from now, 30 to 900, default 60; capped at the queue's expiry.")},
			leaderOnly: true, method: http.MethodPost, bearer: "worker_token", body: []string{"receipt", "visibility_timeout"}, path: jobPath("renew"),
			local: receiptTool((*service.Service).RenewJob, renewRequest),
		},
	}
}

// receiptTool runs ack, release or renew: the worker token's queue and the
// job id start the request newReq makes, the call's body fills in the rest.
func receiptTool[R any](op receiptOp[R], newReq func(service.QueueAuth, string) *R) func(context.Context, *Server, *toolCall) reply {
	return func(ctx context.Context, s *Server, c *toolCall) reply {
		a, bad := c.queueAuth("worker_token")
		if bad != nil {
			return *bad
		}
		in := newReq(a, c.args.str("job_id"))
		if bad := c.decode(in); bad != nil {
			return *bad
		}
		return jobAnswerReply(op(s.svc, ctx, *in))
	}
}

// mcpTool builds the tool's MCP definition and resolves its argument
// schemas for validation.
func (t *toolDef) mcpTool() *mcp.Tool {
	props := make(map[string]*jsonschema.Schema, len(t.args))
	order := make([]string, 0, len(t.args))
	required := []string{}
	for i := range t.args {
		a := &t.args[i]
		r, err := a.schema.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
		if err != nil {
			panic(fmt.Sprintf("tool %s: argument %s: invalid schema: %v", t.name, a.name, err))
		}
		a.resolved = r
		props[a.name] = a.schema
		order = append(order, a.name)
		if a.required {
			required = append(required, a.name)
		}
	}
	f := false
	return &mcp.Tool{
		Name:        t.name,
		Title:       t.title,
		Description: t.description,
		InputSchema: &jsonschema.Schema{
			Type:                 "object",
			Properties:           props,
			PropertyOrder:        order,
			Required:             required,
			AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		},
		Annotations: &mcp.ToolAnnotations{
			Title:           t.title,
			ReadOnlyHint:    t.readOnly,
			DestructiveHint: &t.destructive,
			IdempotentHint:  t.idempotent,
			OpenWorldHint:   &f,
		},
	}
}

// parseArgs validates raw arguments against the tool's schema. Its errors
// name the argument and the rule, never the value. The SDK hands the
// arguments over as the client sent them, so they are decoded here as
// strictly as a REST body: a duplicate name at any depth or a string that
// is not valid UTF-8 is refused, and names match exactly.
func (t *toolDef) parseArgs(raw json.RawMessage) (toolArgs, error) {
	args := toolArgs{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := jsonv2.Unmarshal(raw, &args); err != nil {
			return nil, argumentProblem(strictjson.Describe(raw, err), t.name)
		}
		if args == nil {
			return nil, fmt.Errorf("tool %s: arguments must be a JSON object", t.name)
		}
	}
	known := make(map[string]bool, len(t.args))
	for _, a := range t.args {
		known[a.name] = true
	}
	for name := range args {
		if !known[name] {
			return nil, fmt.Errorf("tool %s: unknown argument %q", t.name, name)
		}
	}
	for _, a := range t.args {
		v, ok := args[a.name]
		if !ok {
			if a.required {
				return nil, fmt.Errorf("tool %s: argument %q is required", t.name, a.name)
			}
			continue
		}
		var inst any
		if err := json.Unmarshal(v, &inst); err != nil {
			return nil, fmt.Errorf("tool %s: argument %q is not valid JSON", t.name, a.name)
		}
		if err := a.resolved.Validate(&inst); err != nil {
			return nil, fmt.Errorf("tool %s: argument %q %s", t.name, a.name, a.rule)
		}
		if a.schema.Type == "integer" {
			// 60.0 and 6e1 are the integer 60: pass it on in the form the
			// REST decoder takes.
			f, _ := inst.(float64)
			if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
				return nil, fmt.Errorf("tool %s: argument %q %s", t.name, a.name, a.rule)
			}
			args[a.name] = json.RawMessage(strconv.FormatInt(int64(f), 10))
		}
	}
	return args, nil
}
