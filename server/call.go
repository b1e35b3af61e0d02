package server

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// call is one API request, whichever HTTP server read it: gin's router
// (every request) or the front (the common API requests on plain HTTP, see
// internal/httpfront). The
// REST handlers read their input and write their answer only through it, so
// both servers run the same handler and answer alike.
type call interface {
	// Header returns the first value of a request header ("" if absent).
	Header(name string) string
	// Param returns a path parameter of the route.
	Param(name string) string
	// Query returns a query parameter and whether it is present.
	Query(name string) (string, bool)
	// Body returns the request body, read whole within limit bytes.
	Body(limit int64) ([]byte, error)
	// ContentLength is the request's Content-Length (-1 when unknown).
	ContentLength() int64
	// Context is the request's context.
	Context() context.Context
	// Bounded is the request's context bounded by timeout; its
	// CancelFunc must be called when the call's work is done, and the
	// context is not used after.
	Bounded(timeout time.Duration) (context.Context, context.CancelFunc)
	// ClientIP is the address the request came from.
	ClientIP() string
	// Waits readies the call to wait until t before its answer (the write
	// deadline moves there). It reports false when this server cannot
	// notice the client leaving while the call waits and has handed the
	// request, unanswered, to one that can: the caller returns at once.
	Waits(t time.Time) bool
	// Reply writes the answer.
	Reply(r reply)
}

// ginCall is a call read by gin's router.
type ginCall struct {
	s *Server
	c *gin.Context
}

func (g ginCall) Header(name string) string        { return g.c.GetHeader(name) }
func (g ginCall) Param(name string) string         { return g.c.Param(name) }
func (g ginCall) Query(name string) (string, bool) { return g.c.GetQuery(name) }
func (g ginCall) ContentLength() int64             { return g.c.Request.ContentLength }
func (g ginCall) Context() context.Context         { return g.c.Request.Context() }
func (g ginCall) ClientIP() string                 { return g.s.clientIP(g.c) }
func (g ginCall) Reply(r reply)                    { r.write(g.c) }

func (g ginCall) Bounded(timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(g.c.Request.Context(), timeout)
}

func (g ginCall) Waits(t time.Time) bool {
	_ = http.NewResponseController(g.c.Writer).SetWriteDeadline(t)
	return true
}

// Body returns what bufferBody read, or reads an unbuffered body.
func (g ginCall) Body(limit int64) ([]byte, error) {
	if b := bufferedBody(g.c); b != nil {
		return b, nil
	}
	if g.c.Request.Body == nil {
		return nil, nil
	}
	return readAllSized(http.MaxBytesReader(g.c.Writer, g.c.Request.Body, limit), -1)
}

// handle adapts a handler of calls to gin.
func (s *Server) handle(h func(call)) gin.HandlerFunc {
	return func(c *gin.Context) { h(ginCall{s: s, c: c}) }
}

// callOf is the call of a request gin read.
func (s *Server) callOf(c *gin.Context) call { return ginCall{s: s, c: c} }
