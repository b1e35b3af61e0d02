package server

import (
	"fmt"
	"net/http"

	"github.com/holdfast/holdfast/internal/strictjson"
)

// decodeStrict decodes exactly one JSON object into dst by the rules of
// internal/strictjson, with an error that names the field.
func decodeStrict(b []byte, dst any) error {
	if err := strictjson.Object(b, dst); err != nil {
		return bodyProblem(err.(*strictjson.Problem))
	}
	return nil
}

// bodyProblem is the 400 a REST or ops body gets for the problem. It names
// the top-level member at fault, or "body" for a problem of the text as a
// whole; a member whose name is empty is reported as "body" too, since an
// answer names a field only when it has a name.
func bodyProblem(p *strictjson.Problem) *bodyError {
	bad := func(msg string) *bodyError { return &bodyError{http.StatusBadRequest, msg, "body"} }
	inField := func(msg string) *bodyError {
		e := bad(msg)
		if p.Field != "" {
			e.field = p.Field
		}
		return e
	}
	switch {
	case p.Kind == strictjson.Duplicate && p.Nested:
		return inField(fmt.Sprintf("field %q holds an object with a duplicate member name", p.Field))
	case p.Kind == strictjson.Duplicate:
		return inField(fmt.Sprintf("duplicate field %q", p.Field))
	case p.Kind == strictjson.InvalidText && !p.Member:
		return bad("member names must be valid UTF-8")
	case p.Kind == strictjson.InvalidText:
		return inField(fmt.Sprintf("field %q must be valid UTF-8", p.Field))
	case p.Kind == strictjson.Unknown:
		return inField(fmt.Sprintf("unknown field %q", p.Field))
	case p.Kind == strictjson.Type:
		return inField(fmt.Sprintf("field %q must be %s", p.Field, p.Want))
	case p.Kind == strictjson.NotObject:
		return bad("request body must be a JSON object")
	case p.Kind == strictjson.Trailing:
		return bad("request body must hold exactly one JSON object")
	case p.Kind == strictjson.Truncated:
		return bad("malformed JSON: unexpected end of body")
	}
	return bad(fmt.Sprintf("malformed JSON at byte %d", p.Offset))
}

// argumentProblem is the message of the JSON-RPC invalid-params error an
// MCP tool call gets for the problem: it names the argument and the rule.
func argumentProblem(p *strictjson.Problem, tool string) error {
	switch {
	case p.Kind == strictjson.Duplicate && p.Nested:
		return fmt.Errorf("tool %s: argument %q holds an object with a duplicate member name", tool, p.Field)
	case p.Kind == strictjson.Duplicate:
		return fmt.Errorf("tool %s: argument %q is given more than once", tool, p.Field)
	case p.Kind == strictjson.InvalidText && !p.Member:
		return fmt.Errorf("tool %s: argument names must be valid UTF-8", tool)
	case p.Kind == strictjson.InvalidText:
		return fmt.Errorf("tool %s: argument %q must be valid UTF-8", tool, p.Field)
	}
	return fmt.Errorf("tool %s: arguments must be a JSON object", tool)
}
