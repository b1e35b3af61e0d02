package main

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

// TestTimeFlagsTakeSecondsOrDurations: every --wait, --ttl, --visibility,
// --delay and --grace takes a bare number of seconds or a duration; a bad
// value is one line naming the flag and the rule, not the flag list.
func TestTimeFlagsTakeSecondsOrDurations(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	wait := secondsFlag(fs, "wait", 0, "")
	var grace time.Duration
	durationVar(fs, &grace, "grace", time.Second, "")
	for _, c := range []struct {
		args  []string
		wait  int
		grace time.Duration
	}{
		{[]string{"--wait", "10"}, 10, time.Second},
		{[]string{"--wait", "10s", "--grace", "30"}, 10, 30 * time.Second},
		{[]string{"--wait", "2m", "--grace", "1m30s"}, 120, 90 * time.Second},
	} {
		if err := fs.Parse(c.args); err != nil || *wait != c.wait || grace != c.grace {
			t.Errorf("%q: wait %d, grace %v, %v", c.args, *wait, grace, err)
		}
	}
	for _, bad := range []string{"1.5s", "-3", "10x", "-1s"} {
		if err := fs.Parse([]string{"--wait", bad}); err == nil {
			t.Errorf("--wait %s accepted", bad)
		}
	}
	for _, args := range [][]string{
		{"lease", "acquire", "--key", "k", "--wait", "10x"},
		{"exec", "--key", "k", "--wait", "soon", "--", "true"},
		{"queue", "claim", "--visibility", "1.5s"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		msg := stderr.String()
		if code != exitUsage || strings.Count(strings.TrimSpace(msg), "\n") > 1 || !strings.Contains(msg, "-h lists the flags") ||
			!(strings.Contains(msg, "-wait") || strings.Contains(msg, "-visibility")) {
			t.Errorf("%q: exit %d, stderr:\n%s", args, code, msg)
		}
	}
}

// TestWorkBackoffDoubles: a failed attempt's job waits --retry-delay,
// doubled for each attempt after the first, at most 15 minutes.
func TestWorkBackoffDoubles(t *testing.T) {
	w := &workRun{retryDelay: 5 * time.Second}
	for attempt, want := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 9: 900 * time.Second, 60: 900 * time.Second} {
		if got := w.backoff(attempt); got != want {
			t.Errorf("attempt %d: %v, want %v", attempt, got, want)
		}
	}
	if got := (&workRun{}).backoff(3); got != 0 {
		t.Errorf("--retry-delay 0: %v", got)
	}
}
