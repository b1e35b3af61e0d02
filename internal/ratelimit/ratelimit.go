package ratelimit

import (
	"math"
	"sync"
	"time"
)

// Limiter is a token bucket per client address.
type Limiter struct {
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

// New returns a limiter of rate requests a second per address, burst at
// once (at least one, and by default the rate rounded up).
func New(rate float64, burst int) *Limiter {
	if burst < 1 {
		burst = int(math.Max(1, math.Ceil(rate)))
	}
	return &Limiter{rate: rate, burst: float64(burst), buckets: make(map[string]*bucket)}
}

// Allow takes a token for ip. When none is left it reports how many whole
// seconds until one is.
func (l *Limiter) Allow(ip string, now time.Time) (bool, int) {
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

// Refund gives back the token Allow took for ip, for a request handed to a
// server that counts it again. The bucket is then as if Allow had not run:
// the refill Allow added is capped at burst either way.
func (l *Limiter) Refund(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if b, ok := l.buckets[ip]; ok {
		b.tokens = math.Min(l.burst, b.tokens+1)
	}
}

// Limits reports whether the limiter limits at all (a rate above zero).
func (l *Limiter) Limits() bool { return l.rate > 0 }
