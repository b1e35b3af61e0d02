package server

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/internal/jsonenc"
)

// reply is an HTTP answer: the status, the JSON body and an optional
// Retry-After. REST writes it as is; MCP turns it into a tool result.
type reply struct {
	Status     int
	Body       jsonenc.H
	RetryAfter int
	// Bearer asks for a WWW-Authenticate: Bearer challenge (missing token).
	Bearer bool
	// raw, when set, is the body already encoded; Body is then unused.
	raw []byte
	// job, when set, is a job answer's body, encoded when written; Body is
	// then unused.
	job jobBody
}

// body returns the encoded JSON body: a job answer appended to dst, which
// the caller may reuse once the body is written, any other a slice of its
// own.
func (r reply) body(dst []byte) ([]byte, error) {
	switch {
	case r.job.j != nil:
		return r.job.appendTo(dst), nil
	case r.raw != nil:
		return r.raw, nil
	}
	return jsonenc.Encode(r.Body)
}

// write sends r on c.
func (r reply) write(c *gin.Context) {
	if r.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	if r.Bearer {
		c.Header("WWW-Authenticate", `Bearer realm="holdfast"`)
	}
	b, err := r.body(nil)
	if err != nil {
		b = []byte(`{"ok":false,"error":"internal error: the answer could not be encoded"}`)
		r.Status = http.StatusInternalServerError
	}
	c.Abort()
	c.Data(r.Status, "application/json; charset=utf-8", b)
}

func okReply(status int, body jsonenc.H) reply {
	body["ok"] = true
	return reply{Status: status, Body: body}
}

func errReply(status int, msg string, extra jsonenc.H) reply {
	body := jsonenc.H{"ok": false, "error": msg}
	for k, v := range extra {
		body[k] = v
	}
	return reply{Status: status, Body: body}
}
