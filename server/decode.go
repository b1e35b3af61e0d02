package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// bodyError is a client mistake in a request body, with its HTTP status
// and, when one field is at fault, its name.
type bodyError struct {
	status int
	msg    string
	field  string
}

func (e *bodyError) Error() string { return e.msg }

// readJSONBody reads a request body of at most limit bytes after checking
// the content type. An empty body reads as "{}" when allowEmpty is set.
func readJSONBody(c *gin.Context, limit int64, allowEmpty bool) ([]byte, error) {
	ct := c.GetHeader("Content-Type")
	if ct == "" && allowEmpty && c.Request.ContentLength <= 0 {
		return []byte("{}"), nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return nil, &bodyError{http.StatusUnsupportedMediaType, "Content-Type must be application/json", ""}
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, &bodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", limit), "body"}
		}
		return nil, &bodyError{http.StatusBadRequest, "request body could not be read", "body"}
	}
	if len(bytes.TrimSpace(b)) == 0 {
		if allowEmpty {
			return []byte("{}"), nil
		}
		return nil, &bodyError{http.StatusBadRequest, "request body must be a JSON object", "body"}
	}
	return b, nil
}

// decodeStrict decodes exactly one JSON object into dst, refusing unknown
// fields, wrong types and trailing data, with an error that names the field.
func decodeStrict(b []byte, dst any) error {
	if t := bytes.TrimLeft(b, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return &bodyError{http.StatusBadRequest, "request body must be a JSON object", "body"}
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(dst); err != nil {
		msg, field := describeJSONError(err)
		return &bodyError{http.StatusBadRequest, msg, field}
	}
	if d.More() {
		return &bodyError{http.StatusBadRequest, "request body must hold exactly one JSON object", "body"}
	}
	if _, err := d.Token(); err != io.EOF {
		return &bodyError{http.StatusBadRequest, "request body must hold exactly one JSON object", "body"}
	}
	return nil
}

// describeJSONError turns a decoding error into a message and the name of
// the field at fault ("body" when the body as a whole is).
func describeJSONError(err error) (string, string) {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Sprintf("malformed JSON at byte %d: %s", syn.Offset, syn.Error()), "body"
	case errors.As(err, &typ):
		if typ.Field == "" {
			return "request body must be a JSON object", "body"
		}
		return fmt.Sprintf("field %q must be %s", typ.Field, jsonKind(typ.Type.Kind().String())), typ.Field
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return "malformed JSON: unexpected end of body", "body"
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return "unknown field " + rest, strings.Trim(rest, `"`)
	}
	return "malformed JSON: " + msg, "body"
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int", "int64", "int32", "uint64", "uint32", "uint":
		return "an integer"
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "float64", "float32":
		return "a number"
	}
	return "of another JSON type"
}

// bindJSON reads and strictly decodes a JSON body, answering the client
// itself on failure. It reports whether decoding succeeded.
func bindJSON(c *gin.Context, limit int64, allowEmpty bool, dst any) bool {
	b, err := readJSONBody(c, limit, allowEmpty)
	if err == nil {
		err = decodeStrict(b, dst)
	}
	if err != nil {
		var be *bodyError
		if errors.As(err, &be) {
			var extra gin.H
			if be.field != "" {
				extra = gin.H{"field": be.field}
			}
			errReply(be.status, be.msg, extra).write(c)
		} else {
			fail(c, http.StatusBadRequest, err.Error())
		}
		return false
	}
	return true
}
