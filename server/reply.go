package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
)

// reply is a transport-independent answer of the service layer: the HTTP
// status, the JSON body and an optional Retry-After. REST writes it as is;
// MCP turns it into a tool result.
type reply struct {
	Status     int
	Body       gin.H
	RetryAfter int
	// Bearer asks for a WWW-Authenticate: Bearer challenge (missing token).
	Bearer bool
	// raw, when set, is the body already encoded (a reply the leader made
	// and sent over the peer link); Body is then unused.
	raw []byte
}

// body returns the encoded JSON body.
func (r reply) body() ([]byte, error) {
	if r.raw != nil {
		return r.raw, nil
	}
	return encodeJSON(r.Body)
}

// write sends r on c.
func (r reply) write(c *gin.Context) {
	if r.RetryAfter > 0 {
		c.Header("Retry-After", strconv.Itoa(r.RetryAfter))
	}
	if r.Bearer {
		c.Header("WWW-Authenticate", `Bearer realm="holdfast"`)
	}
	b, err := r.body()
	if err != nil {
		b = []byte(`{"ok":false,"error":"internal error: the answer could not be encoded"}`)
		r.Status = http.StatusInternalServerError
	}
	c.Abort()
	c.Data(r.Status, "application/json; charset=utf-8", b)
}

// ok reports whether the reply is a success.
func (r reply) ok() bool { return r.Status >= 200 && r.Status < 300 }

func okReply(status int, body gin.H) reply {
	body["ok"] = true
	return reply{Status: status, Body: body}
}

func errReply(status int, msg string, extra gin.H) reply {
	body := gin.H{"ok": false, "error": msg}
	for k, v := range extra {
		body[k] = v
	}
	return reply{Status: status, Body: body}
}

// invalid names the field and the rule it broke.
func invalid(field, rule string) reply {
	return errReply(http.StatusBadRequest, field+" "+rule, gin.H{"field": field})
}

// tooLarge names a field over its size limit.
func tooLarge(field, rule string) reply {
	return errReply(http.StatusRequestEntityTooLarge, field+" "+rule, gin.H{"field": field})
}

// retryLater is a 503 whose outcome is stated: "not_applied" (safe to
// retry) or "unknown" (the request may have taken effect).
func retryLater(msg, outcome string) reply {
	r := errReply(http.StatusServiceUnavailable, msg, gin.H{"outcome": outcome, "retry_after_seconds": 1})
	r.RetryAfter = 1
	return r
}

// secondsOf converts state milliseconds to whole Unix seconds, rounded down.
func secondsOf(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return ms / 1000
}

// rfc3339Of formats state milliseconds as an RFC 3339 UTC time with
// second precision, rounded down like secondsOf.
func rfc3339Of(ms int64) string {
	return time.Unix(secondsOf(ms), 0).UTC().Format(time.RFC3339)
}
