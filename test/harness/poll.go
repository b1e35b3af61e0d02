package harness

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// PollInterval is how often the waits of this package check their condition.
const PollInterval = 100 * time.Millisecond

// ErrPermanent marks an error that makes Poll stop at once: the condition
// can never become true (for example, a node died).
var ErrPermanent = errors.New("permanent")

// Poll calls f every interval until it returns nil, ctx ends, or f returns
// an error wrapping ErrPermanent. It returns nil or the last error of f.
func Poll(ctx context.Context, interval time.Duration, f func() error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrPermanent) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// Eventually polls f until it returns nil and fails the test if it does not
// within timeout, reporting what was awaited and f's last error.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	if err := Poll(ctx, PollInterval, f); err != nil {
		t.Fatalf("waiting %v for %s: %v", time.Since(start).Round(time.Millisecond), what, err)
	}
}
