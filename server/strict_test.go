package server

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/server/service"
)

// secretMark is in every string value the decoding tests send: no error
// message may contain it, since values can be secrets.
const secretMark = "S3CRET"

// member is one member of a JSON object: its name and raw JSON value.
type member struct{ name, value string }

// bodyType is a request body type with a valid body for it.
type bodyType struct {
	name string
	// newValue returns a pointer to a fresh value of the type.
	newValue func() any
	// limit and allowEmpty are what its handler reads the body with.
	limit      int64
	allowEmpty bool
	// members make a valid body, in order.
	members []member
	// text names a member whose value is a string ("" when none is).
	text string
	// anyJSON names a member that takes any JSON value ("" when none does).
	anyJSON string
}

func newOf[T any]() func() any { return func() any { return new(T) } }

// decode strictly decodes b into a fresh value of the type.
func (bt bodyType) decode(b []byte) error { return decodeStrict(b, bt.newValue()) }

// bodyTypes lists every type a REST or ops body is decoded into.
func bodyTypes() []bodyType {
	ns := `"ns_` + strings.Repeat("A", 43) + `"`
	str := func(s string) string { return `"` + secretMark + s + `"` }
	receipt := `"` + strings.Repeat("e", 64) + `"`
	return []bodyType{
		{name: "service.AcquireLeaseRequest", newValue: newOf[service.AcquireLeaseRequest](), limit: apiBodyLimit, text: "key",
			members: []member{{"namespace", ns}, {"key", str("-invoice:1")}, {"ttl_seconds", "60"}, {"fingerprint", str("-fp")}}},
		{name: "service.LeaseOwnerRequest", newValue: newOf[service.LeaseOwnerRequest](), limit: apiBodyLimit, text: "key", anyJSON: "result",
			members: []member{{"namespace", ns}, {"key", str("-invoice:1")}, {"owner_token", `"own_` + strings.Repeat("b", 43) + `"`},
				{"ttl_seconds", "60"}, {"result", `{"receipt_id":4817,"note":` + str("-note") + `}`}}},
		{name: "service.EnqueueRequest", newValue: newOf[service.EnqueueRequest](), limit: apiBodyLimit, text: "job_key", anyJSON: "payload",
			members: []member{{"job_key", `"report-42"`}, {"payload", `{"report_id":42,"items":[{"a":` + str("-a") + `}]}`}}},
		{name: "service.ClaimRequest", newValue: newOf[service.ClaimRequest](), limit: apiBodyLimit, allowEmpty: true,
			members: []member{{"visibility_timeout", "60"}}},
		{name: "service.AckJobRequest", newValue: newOf[service.AckJobRequest](), limit: apiBodyLimit, text: "receipt",
			members: []member{{"receipt", receipt}}},
		{name: "service.RenewJobRequest", newValue: newOf[service.RenewJobRequest](), limit: apiBodyLimit, text: "receipt",
			members: []member{{"receipt", receipt}, {"visibility_timeout", "120"}}},
		{name: "fsm.SettingsPatch", newValue: newOf[fsm.SettingsPatch](), limit: opsBodyLimit,
			members: []member{{"queue_max_jobs", "50"}, {"lease_ttl_max_seconds", "100"}}},
		{name: "cluster.JoinRequest", newValue: newOf[cluster.JoinRequest](), limit: opsBodyLimit, text: "node_id",
			members: []member{{"node_id", str("-n4")}, {"raft_addr", `"127.0.0.1:7101"`}, {"http_addr", `"127.0.0.1:7100"`}, {"fresh", "true"}}},
		{name: "cluster.RemoveRequest", newValue: newOf[cluster.RemoveRequest](), limit: opsBodyLimit, text: "node_id",
			members: []member{{"node_id", str("-n4")}}},
	}
}

// object writes members as a JSON object, names as they are (bytes that
// are not UTF-8 included).
func object(ms ...member) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = `"` + m.name + `":` + m.value
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// with returns the members with the named one's value replaced.
func with(ms []member, name, value string) []member {
	out := make([]member, len(ms))
	for i, m := range ms {
		if m.name == name {
			m.value = value
		}
		out[i] = m
	}
	return out
}

// badBody is a body the decoder must refuse: the field it must name and
// words its message must contain.
type badBody struct {
	name  string
	body  string
	field string
	want  string
}

// badBodies derives every refused variant of bt's valid body.
func badBodies(bt bodyType) []badBody {
	ms := bt.members
	valid := object(ms...)
	var out []badBody
	for _, m := range ms {
		out = append(out,
			badBody{"duplicate " + m.name, object(append(ms, m)...), m.name, `duplicate field "` + m.name + `"`},
			// The second value differs: encoding/json would keep it silently.
			badBody{"duplicate " + m.name + " before the rest", object(append([]member{m}, with(ms, m.name, ms[0].value)...)...), m.name, "duplicate field"},
			badBody{"upper-case " + m.name, object(append(ms[:0:0], member{strings.ToUpper(m.name), m.value})...), strings.ToUpper(m.name), "unknown field"},
			badBody{"case variant of " + m.name + " beside it", object(append(ms, member{strings.ToUpper(m.name[:1]) + m.name[1:], m.value})...), strings.ToUpper(m.name[:1]) + m.name[1:], "unknown field"},
		)
		if m.name != bt.anyJSON {
			wrong := `"` + secretMark + `"`
			if strings.HasPrefix(m.value, `"`) {
				wrong = "5"
			}
			out = append(out, badBody{"wrong type for " + m.name, object(with(ms, m.name, wrong)...), m.name, "must be"})
		}
	}
	// A duplicate whose name is escaped differently is still a duplicate.
	first := ms[0].name
	out = append(out, badBody{"escaped duplicate", valid[:len(valid)-1] + `,"\u` + fmt.Sprintf("%04x", first[0]) + first[1:] + `":` + ms[0].value + "}", first, "duplicate"})
	if bt.text != "" {
		for name, v := range map[string]string{
			"invalid byte":           "\"" + secretMark + "a\xffb\"",
			"overlong encoding":      "\"" + secretMark + "\xc0\xaf\"",
			"encoded surrogate":      "\"" + secretMark + "\xed\xa0\x80\"",
			"truncated sequence":     "\"" + secretMark + "\xe2\x82\"",
			"lone high surrogate":    `"` + secretMark + `\ud800"`,
			"lone low surrogate":     `"` + secretMark + `\udc00x"`,
			"high surrogate, no low": `"` + secretMark + `\ud800\u0041"`,
		} {
			out = append(out, badBody{name + " in " + bt.text, object(with(ms, bt.text, v)...), bt.text, "UTF-8"})
		}
	}
	if bt.anyJSON != "" {
		f := bt.anyJSON
		for name, v := range map[string]string{
			"duplicate inside":             `{"` + secretMark + `":1,"` + secretMark + `":2}`,
			"duplicate deep inside":        `[1,{"x":{"` + secretMark + `":1,"y":2,"` + secretMark + `":3}}]`,
			"escaped duplicate inside":     `{"a` + secretMark + `":1,"\u0061` + secretMark + `":2}`,
			"duplicate inside, same value": `{"` + secretMark + `":1,"` + secretMark + `":1}`,
		} {
			out = append(out, badBody{name + " " + f, object(with(ms, f, v)...), f, "duplicate member name"})
		}
		for name, v := range map[string]string{
			"invalid byte inside":       "{\"a\":\"" + secretMark + "\xff\"}",
			"invalid name inside":       "{\"" + secretMark + "\xff\":1}",
			"lone surrogate inside":     `["` + secretMark + `\udfff"]`,
			"invalid byte deep inside":  "[[[{\"a\":[\"" + secretMark + "\x80\"]}]]]",
			"invalid byte, bare string": "\"" + secretMark + "\xfe\"",
		} {
			out = append(out, badBody{name + " " + f, object(with(ms, f, v)...), f, "UTF-8"})
		}
	}
	return append(out,
		badBody{"member name not UTF-8", valid[:len(valid)-1] + ",\"" + secretMark + "\xff\":1}", "body", "UTF-8"},
		badBody{"empty member name", valid[:len(valid)-1] + `,"":1}`, "body", `unknown field ""`},
		badBody{"trailing object", valid + " {}", "body", "exactly one JSON object"},
		badBody{"trailing garbage", valid + " " + secretMark, "body", "exactly one JSON object"},
		badBody{"trailing copy", valid + valid, "body", "exactly one JSON object"},
		badBody{"truncated", valid[:len(valid)-1], "body", "malformed JSON"},
		badBody{"syntax error", strings.Replace(valid, ":", " ", 1), "body", "malformed JSON"},
		badBody{"array", "[" + valid + "]", "body", "JSON object"},
		badBody{"string", `"` + secretMark + `"`, "body", "JSON object"},
		badBody{"null", "null", "body", "JSON object"},
		badBody{"empty", "", "body", "JSON object"},
	)
}

// TestDecodeStrictEveryBodyType checks every body type against the rules:
// duplicates at any depth, exact names, valid UTF-8, types, trailing data
// and non-objects each give a 400 naming the field, never the value.
func TestDecodeStrictEveryBodyType(t *testing.T) {
	for _, bt := range bodyTypes() {
		t.Run(bt.name, func(t *testing.T) {
			if err := bt.decode([]byte(object(bt.members...))); err != nil {
				t.Fatalf("valid body %s refused: %v", object(bt.members...), err)
			}
			for _, c := range badBodies(bt) {
				err := bt.decode([]byte(c.body))
				var be *bodyError
				switch {
				case err == nil:
					t.Errorf("%s: %q accepted", c.name, c.body)
				case !errors.As(err, &be):
					t.Errorf("%s: %q: error %T %v is not a bodyError", c.name, c.body, err, err)
				case be.status != http.StatusBadRequest || be.field != c.field || !strings.Contains(be.msg, c.want):
					t.Errorf("%s: %q: got %d field %q %q, want 400 field %q mentioning %q", c.name, c.body, be.status, be.field, be.msg, c.field, c.want)
				case strings.Contains(be.msg, secretMark):
					t.Errorf("%s: %q: message %q echoes a value", c.name, c.body, be.msg)
				}
			}
		})
	}
}

// TestDecodeStrictKeepsValues checks what a valid body decodes to: a
// payload of null is the JSON null, escapes are decoded, and member names
// differing only in case from the type's are not taken for them.
func TestDecodeStrictKeepsValues(t *testing.T) {
	var in service.EnqueueRequest
	if err := decodeStrict([]byte(`{"job_key":"k\u002d1","payload":null}`), &in); err != nil {
		t.Fatal(err)
	}
	if in.JobKey == nil || *in.JobKey != "k-1" || string(in.Payload) != "null" {
		t.Fatalf("decoded %+v (payload %q)", in, in.Payload)
	}
	var acq service.AcquireLeaseRequest
	if err := decodeStrict([]byte(` {"key":"a\u0085b","fingerprint":"`+"\u00a0"+`"} `), &acq); err != nil {
		t.Fatal(err)
	}
	if *acq.Key != "a\u0085b" || *acq.Fingerprint != "\u00a0" || acq.Namespace != nil || acq.TTLSeconds != nil {
		t.Fatalf("decoded %+v", acq)
	}
}

func TestIsJSONMediaType(t *testing.T) {
	for ct, want := range map[string]bool{
		"application/json":                  true,
		"application/json; charset=utf-8":   true,
		"Application/JSON":                  true,
		"application/json ; charset=UTF-8":  true,
		"application/json;charset=utf-8":    true,
		"":                                  false,
		"text/plain":                        false,
		"application/jsonx":                 false,
		"application/json; charset":         false,
		"application/x-www-form-urlencoded": false,
	} {
		if got := isJSONMediaType(ct); got != want {
			t.Errorf("isJSONMediaType(%q) = %v, want %v", ct, got, want)
		}
	}
}
