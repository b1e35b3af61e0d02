package server

import (
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/internal/jsonenc"
)

// rateLimiter is a token bucket per client address, local to this node.
type rateLimiter struct {
	rate  float64
	burst float64

	mu      sync.Mutex
	buckets map[string]*bucket
	lastGC  time.Time
}

type bucket struct {
	tokens float64
	last   time.Time
}

// maxBuckets triggers a cleanup of idle buckets.
const maxBuckets = 10000

func newRateLimiter(rate float64, burst int) *rateLimiter {
	if burst < 1 {
		burst = int(math.Max(1, math.Ceil(rate)))
	}
	return &rateLimiter{rate: rate, burst: float64(burst), buckets: make(map[string]*bucket)}
}

// allow takes a token for ip. When none is left it reports how many whole
// seconds until one is.
func (l *rateLimiter) allow(ip string, now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buckets) > maxBuckets && now.Sub(l.lastGC) > time.Second {
		full := time.Duration(l.burst / l.rate * float64(time.Second))
		for k, b := range l.buckets {
			if now.Sub(b.last) > full {
				delete(l.buckets, k)
			}
		}
		l.lastGC = now
	}
	b, ok := l.buckets[ip]
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[ip] = b
	}
	b.tokens = math.Min(l.burst, b.tokens+now.Sub(b.last).Seconds()*l.rate)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, int(math.Ceil((1 - b.tokens) / l.rate))
}

// refund gives back the token allow took for ip, for a request handed to a
// server that counts it again. The bucket is then as if allow had not run:
// the refill allow added is capped at burst either way.
func (l *rateLimiter) refund(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.buckets[ip]; ok {
		b.tokens = math.Min(l.burst, b.tokens+1)
	}
}

// limit applies the per-address request limit to client requests. Requests
// forwarded by an authenticated peer were counted where they entered.
func (s *Server) limit() gin.HandlerFunc {
	return func(c *gin.Context) {
		if s.limiter.rate <= 0 || s.forwardedByPeer(c) {
			c.Next()
			return
		}
		ok, wait := s.limiter.allow(s.clientIP(c), time.Now())
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
