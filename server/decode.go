package server

import (
	"bytes"
	"errors"
	"fmt"
	"mime"
	"net/http"

	"github.com/holdfast/holdfast/internal/jsonenc"
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
func readJSONBody(c call, limit int64, allowEmpty bool) ([]byte, error) {
	ct := c.Header("Content-Type")
	if ct == "" && allowEmpty && c.ContentLength() <= 0 {
		return []byte("{}"), nil
	}
	if !isJSONMediaType(ct) {
		return nil, &bodyError{http.StatusUnsupportedMediaType, "Content-Type must be application/json", "Content-Type"}
	}
	b, err := c.Body(limit)
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

// bindJSON reads and strictly decodes a JSON body, answering the client
// itself on failure. It reports whether decoding succeeded.
func bindJSON(c call, limit int64, allowEmpty bool, dst any) bool {
	b, err := readJSONBody(c, limit, allowEmpty)
	if err == nil {
		err = decodeStrict(b, dst)
	}
	if err != nil {
		var be *bodyError
		if errors.As(err, &be) {
			var extra jsonenc.H
			if be.field != "" {
				extra = jsonenc.H{"field": be.field}
			}
			c.Reply(errReply(be.status, be.msg, extra))
		} else {
			c.Reply(errReply(http.StatusBadRequest, err.Error(), nil))
		}
		return false
	}
	return true
}

// isJSONMediaType reports whether a Content-Type names application/json,
// with or without parameters; the common exact forms skip the parser.
func isJSONMediaType(ct string) bool {
	if ct == "application/json" || ct == "application/json; charset=utf-8" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "application/json"
}
