package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// argSamples are valid values of every tool argument, by name, as raw
// JSON. Every string a client could make a secret carries secretMark.
func argSamples() map[string]string {
	hex := func(n int) string { return `"` + strings.Repeat("a", n) + `"` }
	return map[string]string{
		"namespace":          `"ns_` + strings.Repeat("A", 43) + `"`,
		"key":                `"` + secretMark + `-invoice:2026-09-05"`,
		"ttl_seconds":        "60",
		"fingerprint":        `"` + secretMark + `-fp"`,
		"owner_token":        `"own_` + strings.Repeat("b", 43) + `"`,
		"result":             `{"receipt_id":4817,"note":"` + secretMark + `"}`,
		"checkpoint":         `{"step":3,"note":"` + secretMark + `"}`,
		"queue_id":           hex(32),
		"job_id":             hex(32),
		"write_token":        hex(64),
		"worker_token":       hex(64),
		"read_token":         hex(64),
		"receipt":            hex(64),
		"job_key":            `"report-42"`,
		"payload":            `{"report_id":42,"tags":["` + secretMark + `"]}`,
		"visibility_timeout": "60",
		"delay_seconds":      "30",
		"wait_seconds":       "0",
		"slots":              "1",
		"request_id":         `"` + secretMark + `-0b7c6a8e-3f2d-4c1b-9a8e-7d6c5b4a3f2e"`,
	}
}

// badArgs is a tool's arguments that parseArgs must refuse, and what its
// error must say.
type badArgs struct {
	name string
	raw  string
	want string
}

// badArguments derives every refused variant of a tool's valid arguments.
func badArguments(t *toolDef, valid []member) []badArgs {
	q := func(format string, a ...any) string {
		return fmt.Sprintf("tool %s: "+format, append([]any{t.name}, a...)...)
	}
	out := []badArgs{
		{"duplicate unknown name", object(append(valid, member{"x", "1"}, member{"x", "2"})...), q(`argument "x" is given more than once`)},
		{"name not UTF-8", object(append(valid, member{secretMark + "\xff", "1"})...), q("argument names must be valid UTF-8")},
		{"upper-case unknown name", object(append(valid, member{"KEY", `"` + secretMark + `"`})...), q(`unknown argument "KEY"`)},
		{"not an object", `["` + secretMark + `"]`, q("arguments must be a JSON object")},
	}
	for _, m := range valid {
		upper := strings.ToUpper(m.name)
		out = append(out,
			badArgs{"duplicate " + m.name, object(append(valid, m)...), q("argument %q is given more than once", m.name)},
			badArgs{"escaped duplicate " + m.name, object(valid...)[:len(object(valid...))-1] + fmt.Sprintf(`,"\u%04x%s":%s}`, m.name[0], m.name[1:], m.value), q("argument %q is given more than once", m.name)},
			badArgs{"upper-case " + m.name + " beside it", object(append(valid, member{upper, m.value})...), q("unknown argument %q", upper)},
		)
		arg := t.arg(m.name)
		switch {
		case arg.schema.Type == "string":
			for what, v := range map[string]string{
				"invalid byte":   "\"" + secretMark + "\xff\"",
				"lone surrogate": `"` + secretMark + `\ud800"`,
			} {
				out = append(out, badArgs{what + " in " + m.name, object(with(valid, m.name, v)...), q("argument %q must be valid UTF-8", m.name)})
			}
		case arg.schema.Type == "":
			out = append(out,
				badArgs{"duplicate inside " + m.name, object(with(valid, m.name, `{"a":{"`+secretMark+`":1,"`+secretMark+`":2}}`)...), q("argument %q holds an object with a duplicate member name", m.name)},
				badArgs{"invalid byte inside " + m.name, object(with(valid, m.name, "[\""+secretMark+"\x80\"]")...), q("argument %q must be valid UTF-8", m.name)},
			)
		}
	}
	return out
}

// arg returns the tool's argument of that name.
func (t *toolDef) arg(name string) toolArg {
	for _, a := range t.args {
		if a.name == name {
			return a
		}
	}
	panic("tool " + t.name + " has no argument " + name)
}

// validArguments returns arguments every tool accepts: each of its
// arguments with a sample value.
func validArguments(t *toolDef) []member {
	samples := argSamples()
	var ms []member
	for _, a := range t.args {
		v, ok := samples[a.name]
		if !ok {
			panic("no sample for argument " + a.name)
		}
		ms = append(ms, member{a.name, v})
	}
	return ms
}

// TestParseArgsIsStrict checks every tool's argument decoding: duplicate
// names at any depth, names differing only in case, and strings that are
// not valid UTF-8 are refused with a message naming the argument and the
// rule, never the value.
func TestParseArgsIsStrict(t *testing.T) {
	for _, tool := range mcpTools() {
		tool.mcpTool() // resolves the argument schemas
		t.Run(tool.name, func(t *testing.T) {
			valid := validArguments(tool)
			if _, err := tool.parseArgs([]byte(object(valid...))); err != nil {
				t.Fatalf("valid arguments %s refused: %v", object(valid...), err)
			}
			for _, c := range badArguments(tool, valid) {
				_, err := tool.parseArgs([]byte(c.raw))
				switch {
				case err == nil:
					t.Errorf("%s: %q accepted", c.name, c.raw)
				case err.Error() != c.want:
					t.Errorf("%s: %q: error %q, want %q", c.name, c.raw, err, c.want)
				case strings.Contains(err.Error(), secretMark):
					t.Errorf("%s: error %q echoes a value", c.name, err)
				}
			}
		})
	}
}

// TestEveryArgumentReachesTheLeader: a leader-only tool called on a
// follower is sent as its REST request, so each of its arguments must go
// into the body, the path or the bearer token; one that goes nowhere would
// be dropped silently through a follower.
func TestEveryArgumentReachesTheLeader(t *testing.T) {
	samples := argSamples()
	for _, tool := range mcpTools() {
		if !tool.leaderOnly {
			continue
		}
		args := toolArgs{}
		for _, a := range tool.args {
			args[a.name] = json.RawMessage(samples[a.name])
			if a.schema.Type == "integer" {
				args[a.name] = json.RawMessage("7") // a value no default leaves out
			}
		}
		path := tool.path(args)
		for _, a := range tool.args {
			if a.name == tool.bearer || slices.Contains(tool.body, a.name) || strings.Contains(path, a.name+"=7") {
				continue
			}
			var s string
			if json.Unmarshal(args[a.name], &s) == nil && s != "" && strings.Contains(path, s) {
				continue
			}
			t.Errorf("%s: argument %s goes neither into the REST body, the path nor the bearer token", tool.name, a.name)
		}
	}
}
