package server

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast/holdfast/internal/httpfront"
	"github.com/holdfast/holdfast/internal/ratelimit"
)

// A front call with X-Holdfast-Timeout is bounded by a context of its own,
// derived from the caller's deadline.
func TestFrontCallWithATimeoutHasItsOwnContext(t *testing.T) {
	c := &frontCall{fc: &frontConn{}, r: &httpfront.Request{}, ctx: context.Background(), timed: true}
	ctx, end := c.Bounded(20 * time.Millisecond)
	defer end()
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done 5s after a 20ms deadline")
	}
}

// A front request that waits is handed to net/http, and the rate limit's
// token it took goes back.
func TestWaitingFrontCallIsHandedOver(t *testing.T) {
	s := &Server{cfg: Config{RequestTimeout: time.Minute}, limiter: ratelimit.New(1, 2)}
	fc := &frontConn{s: s, ip: "192.0.2.1"}
	c := &frontCall{fc: fc, r: &httpfront.Request{}, ctx: context.Background()}
	now := time.Now()
	for range 2 {
		if ok, _ := s.limiter.Allow(fc.ip, now); !ok {
			t.Fatal("a burst of 2 refused")
		}
	}
	c.charged = true
	if _, _, ok := s.waitingContext(c, 30*time.Second); ok {
		t.Fatal("a call that waits was not handed over")
	}
	if ok, _ := s.limiter.Allow(fc.ip, now); !ok {
		t.Fatal("the handed-over call's token was not given back")
	}
	if ok, _ := s.limiter.Allow(fc.ip, now); ok {
		t.Fatal("more than one token came back")
	}
}
