package main

import (
	"io"
	"net/http"
	"os"
	"time"

	"github.com/holdfast/holdfast/internal/client"
)

// leaseCommand runs "holdfast lease <verb>".
func leaseCommand(args []string, stdout, stderr io.Writer) int {
	return dispatch("lease", []subcommand{
		{"namespace", "mint a private namespace (a bearer secret)", leaseNamespace},
		{"acquire", "acquire a key: 201 held with an owner token and fencing token, 200 completed with the stored result", leaseVerb("acquire")},
		{"renew", "extend a held lease (same fencing token)", leaseVerb("renew")},
		{"release", "give a held lease up", leaseVerb("release")},
		{"complete", "finish a held lease with a result others then receive", leaseVerb("complete")},
		{"checkpoint", "store progress on a held lease; the key's next grant returns it", leaseVerb("checkpoint")},
	}, args, stdout, stderr)
}

func leaseNamespace(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("lease namespace", stderr)
	o := addClientFlags(fs)
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	return call{cmd: "lease namespace", opts: o, req: client.Request{
		Method: http.MethodPost, Path: client.APIPrefix + "/lease/namespace", Body: []byte(`{}`),
	}}.run(stdout, stderr)
}

// leaseVerb builds acquire, renew, release and complete: they share the
// namespace and key, and all but acquire need the owner token.
func leaseVerb(verb string) func(args []string, stdout, stderr io.Writer) int {
	return func(args []string, stdout, stderr io.Writer) int {
		name := "lease " + verb
		fs := newFlags(name, stderr)
		o := addClientFlags(fs)
		ns := secretFlag(fs, "namespace", "HOLDFAST_NAMESPACE", "the namespace")
		key := secretFlag(fs, "key", "HOLDFAST_KEY", "the lease key (a secret itself when there is no namespace)")
		var owner *secretValue
		if verb != "acquire" {
			owner = secretFlag(fs, "owner-token", "HOLDFAST_OWNER_TOKEN", "the owner token from the acquire")
		}
		var ttl *int
		if verb == "acquire" || verb == "renew" {
			ttl = secondsFlag(fs, "ttl", 0, "ttl_seconds (0: the server's default)")
		}
		fingerprint := ""
		var requestID *secretValue
		wait := new(int)
		var slots *int
		if verb == "acquire" {
			slots = fs.Int("slots", 1, "how many owners may hold the key at once, 1 to 1000 (the key's first acquire fixes it)")
			fs.StringVar(&fingerprint, "fingerprint", "", "what this work is for: a completed key answers its result only to the same fingerprint")
			requestID = secretFlag(fs, "request-id", "HOLDFAST_REQUEST_ID", "request_id naming this acquire: the same one again, while its grant holds, answers that grant")
			wait = secondsFlag(fs, "wait", 0, "wait_seconds: wait up to this long while the lease is held, 0 to 60")
		}
		result := ""
		switch verb {
		case "complete":
			fs.StringVar(&result, "result", "", "the result: JSON text, @FILE or - for stdin (required)")
		case "checkpoint":
			fs.StringVar(&result, "checkpoint", "", "the progress: JSON text, @FILE or - for stdin (required)")
		}
		if code, ok := parseFlags(fs, args); !ok {
			return code
		}
		body, err := leaseTarget(ns, key)
		if err != nil {
			return usageError(stderr, name, err)
		}
		if owner != nil {
			if body["owner_token"], err = owner.need("owner-token"); err != nil {
				return usageError(stderr, name, err)
			}
		}
		if ttl != nil && *ttl != 0 {
			body["ttl_seconds"] = *ttl
		}
		if fingerprint != "" {
			body["fingerprint"] = fingerprint
		}
		if *wait != 0 {
			body["wait_seconds"] = *wait
		}
		if slots != nil && *slots != 1 {
			body["slots"] = *slots
		}
		rid := ""
		if requestID != nil {
			if rid, err = requestID.get(); err != nil {
				return usageError(stderr, name, err)
			}
			if rid != "" {
				body["request_id"] = rid
			}
		}
		if verb == "complete" || verb == "checkpoint" {
			field := map[string]string{"complete": "result", "checkpoint": "checkpoint"}[verb]
			if body[field], err = jsonArg(field, result, os.Stdin); err != nil {
				return usageError(stderr, name, err)
			}
		}
		b, err := marshalBody(body)
		if err != nil {
			return usageError(stderr, name, err)
		}
		path := client.APIPrefix + "/lease"
		if verb != "acquire" {
			path += "/" + verb
		}
		return call{cmd: name, opts: o, req: client.Request{
			Method: http.MethodPost, Path: path, Body: b,
			// The README's error table: an acquire with a fingerprint or a
			// request id may be repeated after an unknown outcome.
			Repeatable: verb == "acquire" && (fingerprint != "" || rid != ""),
			Wait:       time.Duration(max(*wait, 0)) * time.Second,
		}}.run(stdout, stderr)
	}
}
