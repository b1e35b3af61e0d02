package server

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/internal/jsonenc"
)

// bufferBody reads the whole request body, at most limit bytes and within
// the body timeout, before anything else looks at it, on every node alike.
// So a follower answers a body that is too large, shorter than its
// Content-Length or stalled exactly as the leader would — a JSON 413, 400 or
// 408 — and forwards only complete bodies: once the leader has the whole
// request, a lost answer really is an unknown outcome.
func (s *Server) bufferBody(limit int64) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			c.Next()
			return
		}
		if r.ContentLength > limit {
			tooLargeBody(limit).write(c)
			return
		}
		rc := http.NewResponseController(c.Writer)
		_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
		b, err := readAllSized(http.MaxBytesReader(c.Writer, r.Body, limit), r.ContentLength)
		if err != nil {
			// The connection is closed after the answer: what is left of
			// the body is never read (the deadline stays, so net/http's
			// own attempt to drain it ends at once).
			c.Header("Connection", "close")
			s.bodyReadFailure(err, limit).write(c)
			return
		}
		// The deadline must not outlive the body: net/http would cancel the
		// request once it passed.
		_ = rc.SetReadDeadline(time.Time{})
		setBody(c, b)
		c.Next()
	}
}

// bufferedRequestBody is a request body read whole: a reader for any later reader of
// the request's body, and the bytes for handlers that decode them in place.
type bufferedRequestBody struct {
	bytes.Reader
	b []byte
}

// Close implements io.Closer; there is nothing to release.
func (h *bufferedRequestBody) Close() error { return nil }

// setBody makes b the request's body again, for a later reader.
func setBody(c *gin.Context, b []byte) {
	h := &bufferedRequestBody{b: b}
	h.Reset(b)
	c.Request.Body = h
	c.Request.ContentLength = int64(len(b))
}

// bufferedBody is the body bufferBody read (nil when there was none).
func bufferedBody(c *gin.Context) []byte {
	if h, ok := c.Request.Body.(*bufferedRequestBody); ok {
		return h.b
	}
	return nil
}

func tooLargeBody(limit int64) reply {
	return errReply(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", limit), jsonenc.H{"field": "body"})
}

// bodyReadFailure is the answer to a body that could not be read whole.
func (s *Server) bodyReadFailure(err error, limit int64) reply {
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		return tooLargeBody(limit)
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return errReply(http.StatusRequestTimeout, fmt.Sprintf("request body not received within %s; nothing was changed", s.cfg.BodyTimeout), jsonenc.H{"field": "body"})
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errReply(http.StatusBadRequest, "request body is shorter than its Content-Length; nothing was changed", jsonenc.H{"field": "body"})
	}
	return errReply(http.StatusBadRequest, "request body could not be read; nothing was changed", jsonenc.H{"field": "body"})
}

// readAllSized reads r to its end, in one allocation when size (a
// Content-Length, or -1) is right.
func readAllSized(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, size+1) // +1: the read that sees EOF needs room
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)] // longer than announced: grow
		}
	}
}
