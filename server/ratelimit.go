package server

import (
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/internal/jsonenc"
)

// limit applies the per-address request limit to client requests. Requests
// forwarded by an authenticated peer were counted where they entered.
func (s *Server) limit() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.limiter.Limits() || s.forwardedByPeer(c) {
			c.Next()
			return
		}
		ok, wait := s.limiter.Allow(s.clientIP(c), time.Now())
		if ok {
			c.Next()
			return
		}
		rateLimited(wait).write(c)
	}
}

// rateLimited is the answer to a request over the client address's limit.
func rateLimited(wait int) reply {
	r := errReply(http.StatusTooManyRequests, fmt.Sprintf("request rate limit exceeded for this client address (--rate-limit of each node); retry in %d seconds", wait),
		jsonenc.H{"retry_after_seconds": wait})
	r.RetryAfter = wait
	return r
}
