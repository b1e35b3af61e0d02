package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"unicode/utf8"

	json "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Kind says what is wrong with a client's JSON text.
type Kind int

const (
	// Malformed is a syntax error other than those below.
	Malformed Kind = iota
	// Truncated is text that ends inside a value.
	Truncated
	// Duplicate is a member name given twice in one object.
	Duplicate
	// InvalidText is a string (value or member name) holding invalid UTF-8
	// or an escaped UTF-16 surrogate that is not half of a pair.
	InvalidText
	// Unknown is a member the destination type does not have.
	Unknown
	// Type is a value of the wrong JSON kind for its field.
	Type
	// NotObject is text whose top-level value is not an object.
	NotObject
	// Trailing is a sound first value followed by more text.
	Trailing
)

// Problem is a decoding error reduced to what a client may be told.
type Problem struct {
	Kind Kind
	// Member is set when the fault lies in a top-level member, named by
	// Field (which may be ""); otherwise it lies in the text as a whole,
	// or in a member name that is not valid UTF-8 and cannot be named.
	Member bool
	Field  string
	// Nested is set when the fault lies inside Field's value, not in the
	// member itself.
	Nested bool
	// Offset is the byte offset at which the decoder stopped.
	Offset int64
	// Want is the JSON kind the field takes, for Type.
	Want string
}

func (p *Problem) Error() string {
	return fmt.Sprintf("JSON problem %d at byte %d (field %q)", p.Kind, p.Offset, p.Field)
}

// Object decodes exactly one JSON object into dst, refusing unknown
// members, wrong types and trailing data; its error is a *Problem.
func Object(b []byte, dst any) error {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return &Problem{Kind: NotObject}
	}
	err := json.Unmarshal(b, dst, json.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) && oneValue(b) {
		// The first value is sound: what follows it is at fault.
		return &Problem{Kind: Trailing}
	}
	return Describe(b, err)
}

// oneValue reports whether b starts with one complete, valid JSON value.
// Only refused bodies pay for this second look.
func oneValue(b []byte) bool {
	_, err := jsontext.NewDecoder(bytes.NewBuffer(b)).ReadValue()
	return err == nil
}

// Describe classifies an error of the JSON v2 decoder on input b.
func Describe(b []byte, err error) *Problem {
	var syn *jsontext.SyntacticError
	var sem *json.SemanticError
	switch {
	case errors.As(err, &syn):
		p := problemAt(syn.JSONPointer, syn.ByteOffset)
		switch {
		case errors.Is(syn.Err, jsontext.ErrDuplicateName):
			p.Kind = Duplicate
		case invalidTextAt(b, syn.ByteOffset):
			p.Kind = InvalidText
		case errors.Is(syn.Err, io.ErrUnexpectedEOF):
			p.Kind = Truncated
		default:
			p.Kind = Malformed
		}
		return p
	case errors.As(err, &sem):
		p := problemAt(sem.JSONPointer, sem.ByteOffset)
		switch {
		case errors.Is(sem.Err, json.ErrUnknownName):
			p.Kind = Unknown
		case !p.Member:
			p.Kind = NotObject
		default:
			p.Kind, p.Want = Type, jsonKind(sem.GoType)
		}
		return p
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return &Problem{Kind: Truncated}
	}
	return &Problem{Kind: Malformed}
}

// problemAt locates a problem by the JSON Pointer the decoder reported:
// its first token is the top-level member.
func problemAt(ptr jsontext.Pointer, offset int64) *Problem {
	p := &Problem{Offset: offset}
	depth := 0
	for tok := range ptr.Tokens() {
		if depth == 0 {
			p.Field = tok
		}
		depth++
	}
	p.Member, p.Nested = depth > 0, depth > 1
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
