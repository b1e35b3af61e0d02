package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"unicode/utf8"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Client JSON (REST bodies, ops bodies, MCP tool arguments) is decoded with
// the JSON v2 decoder, whose defaults are the rules holdfast promises:
// duplicate member names are refused at every depth, member names match
// exactly, and strings must be valid UTF-8 (an escaped lone surrogate
// included). encoding/json would keep the last duplicate, match names
// case-insensitively and replace invalid bytes with U+FFFD, so that two
// different byte strings could name the same lease.

// decodeStrict decodes exactly one JSON object into dst, refusing unknown
// fields, wrong types and trailing data, with an error that names the field.
func decodeStrict(b []byte, dst any) error {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return &bodyError{http.StatusBadRequest, "request body must be a JSON object", "body"}
	}
	err := json.Unmarshal(b, dst, json.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) && oneValue(b) {
		// The first value is sound: what follows it is at fault.
		return &bodyError{http.StatusBadRequest, "request body must hold exactly one JSON object", "body"}
	}
	return describeJSONError(b, err).bodyError()
}

// oneValue reports whether b starts with one complete, valid JSON value.
// Only refused bodies pay for this second look.
func oneValue(b []byte) bool {
	_, err := jsontext.NewDecoder(bytes.NewBuffer(b)).ReadValue()
	return err == nil
}

// problemKind says what is wrong with a client's JSON text.
type problemKind int

const (
	// problemMalformed is a syntax error other than those below.
	problemMalformed problemKind = iota
	// problemTruncated is text that ends inside a value.
	problemTruncated
	// problemDuplicate is a member name given twice in one object.
	problemDuplicate
	// problemInvalidText is a string (value or member name) holding
	// invalid UTF-8 or an escaped UTF-16 surrogate that is not half of a
	// pair.
	problemInvalidText
	// problemUnknown is a member the destination type does not have.
	problemUnknown
	// problemType is a value of the wrong JSON kind for its field.
	problemType
	// problemNotObject is text whose top-level value is not an object.
	problemNotObject
)

// jsonProblem is a decoding error reduced to what a client may be told:
// what is wrong and where, never the offending value (values can be
// secrets, and the decoder's own messages quote them).
type jsonProblem struct {
	kind problemKind
	// member is set when the fault lies in a top-level member, named by
	// field (which may be ""); otherwise it lies in the text as a whole,
	// or in a member name that is not valid UTF-8 and cannot be named.
	member bool
	field  string
	// nested is set when the fault lies inside field's value, not in the
	// member itself.
	nested bool
	// offset is the byte offset at which the decoder stopped.
	offset int64
	// want is the JSON kind the field takes, for problemType.
	want string
}

// describeJSONError classifies an error of the JSON v2 decoder on input b.
func describeJSONError(b []byte, err error) jsonProblem {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &syn):
		p := problemAt(syn.JSONPointer, syn.ByteOffset)
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			p.kind = problemDuplicate
		case invalidTextAt(b, syn.ByteOffset):
			p.kind = problemInvalidText
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			p.kind = problemTruncated
		default:
			p.kind = problemMalformed
		}
		return p
	case errors.As(err, &sem):
		p := problemAt(sem.JSONPointer, sem.ByteOffset)
		switch {
		case errors.Is(sem.Err, json.ErrUnknownName):
			p.kind = problemUnknown
		case !p.member:
			p.kind = problemNotObject
		default:
			p.kind, p.want = problemType, jsonKind(sem.GoType)
		}
		return p
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return jsonProblem{kind: problemTruncated}
	}
	return jsonProblem{kind: problemMalformed}
}

// problemAt locates a problem by the JSON Pointer the decoder reported:
// its first token is the top-level member.
func problemAt(ptr jsontext.Pointer, offset int64) jsonProblem {
	p := jsonProblem{offset: offset}
	depth := 0
	for tok := range ptr.Tokens() {
		if depth == 0 {
			p.field = tok
		}
		depth++
	}
	p.member, p.nested = depth > 0, depth > 1
	return p
}

// invalidTextAt reports whether the decoder stopped at text that is not
// Unicode: a byte that does not begin valid UTF-8, or the escape of a
// surrogate that is not half of a pair (the decoder stops at the escape).
// The decoder's own sentinel for invalid UTF-8 is internal to its module,
// so the input at the offset decides.
func invalidTextAt(b []byte, offset int64) bool {
	if offset < 0 || offset >= int64(len(b)) {
		return false
	}
	rest := b[offset:]
	if r, size := utf8.DecodeRune(rest); r == utf8.RuneError && size <= 1 {
		return true
	}
	if len(rest) < 6 || rest[0] != '\\' || rest[1] != 'u' {
		return false
	}
	v, err := strconv.ParseUint(string(rest[2:6]), 16, 16)
	return err == nil && v >= 0xd800 && v <= 0xdfff
}

// bodyError is the 400 a REST or ops body gets for the problem. It names
// the top-level member at fault, or "body" for a problem of the text as a
// whole; a member whose name is empty is reported as "body" too, since an
// answer names a field only when it has a name.
func (p jsonProblem) bodyError() *bodyError {
	bad := func(msg string) *bodyError { return &bodyError{http.StatusBadRequest, msg, "body"} }
	inField := func(msg string) *bodyError {
		e := bad(msg)
		if p.field != "" {
			e.field = p.field
		}
		return e
	}
	switch {
	case p.kind == problemDuplicate && p.nested:
		return inField(fmt.Sprintf("field %q holds an object with a duplicate member name", p.field))
	case p.kind == problemDuplicate:
		return inField(fmt.Sprintf("duplicate field %q", p.field))
	case p.kind == problemInvalidText && !p.member:
		return bad("member names must be valid UTF-8")
	case p.kind == problemInvalidText:
		return inField(fmt.Sprintf("field %q must be valid UTF-8", p.field))
	case p.kind == problemUnknown:
		return inField(fmt.Sprintf("unknown field %q", p.field))
	case p.kind == problemType:
		return inField(fmt.Sprintf("field %q must be %s", p.field, p.want))
	case p.kind == problemNotObject:
		return bad("request body must be a JSON object")
	case p.kind == problemTruncated:
		return bad("malformed JSON: unexpected end of body")
	}
	return bad(fmt.Sprintf("malformed JSON at byte %d", p.offset))
}

// argumentError is the message of the JSON-RPC invalid-params error an MCP
// tool call gets for the problem: it names the argument and the rule.
func (p jsonProblem) argumentError(tool string) error {
	switch {
	case p.kind == problemDuplicate && p.nested:
		return fmt.Errorf("tool %s: argument %q holds an object with a duplicate member name", tool, p.field)
	case p.kind == problemDuplicate:
		return fmt.Errorf("tool %s: argument %q is given more than once", tool, p.field)
	case p.kind == problemInvalidText && !p.member:
		return fmt.Errorf("tool %s: argument names must be valid UTF-8", tool)
	case p.kind == problemInvalidText:
		return fmt.Errorf("tool %s: argument %q must be valid UTF-8", tool, p.field)
	}
	return fmt.Errorf("tool %s: arguments must be a JSON object", tool)
}

// jsonKind names the JSON kind a Go type takes, for messages.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "of another JSON type"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "of another JSON type"
}
