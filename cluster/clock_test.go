package cluster

import (
	"testing"
	"time"
)

func TestClockGuardVerdict(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	bound := time.Second
	cases := []struct {
		name    string
		members []string
		samples map[string]time.Duration // peer clock minus ours
		want    bool
	}{
		{"in sync", []string{"a", "b", "c"}, map[string]time.Duration{"b": 100 * time.Millisecond, "c": -200 * time.Millisecond}, false},
		{"this node behind both peers", []string{"a", "b", "c"}, map[string]time.Duration{"b": 10 * time.Second, "c": 10 * time.Second}, true},
		{"this node ahead of both peers", []string{"a", "b", "c"}, map[string]time.Duration{"b": -5 * time.Second, "c": -5 * time.Second}, true},
		{"one peer skewed, not this node", []string{"a", "b", "c"}, map[string]time.Duration{"b": 30 * time.Second, "c": 0}, false},
		{"two clocks that disagree: both step aside", []string{"a", "b", "c"}, map[string]time.Duration{"b": 30 * time.Second}, true},
		{"two clocks that agree", []string{"a", "b", "c"}, map[string]time.Duration{"b": 300 * time.Millisecond}, false},
		{"a stale-but-recent witness breaks the tie", []string{"a", "b", "c"}, map[string]time.Duration{"b": 0, "c": -9 * time.Second}, false},
		{"four clocks split two and two", []string{"a", "b", "c", "d"}, map[string]time.Duration{"b": 0, "c": 9 * time.Second, "d": 9 * time.Second}, true},
		{"four clocks, one off", []string{"a", "b", "c", "d"}, map[string]time.Duration{"b": 0, "c": 0, "d": 9 * time.Second}, false},
		{"five nodes, majority agrees this node is off", []string{"a", "b", "c", "d", "e"},
			map[string]time.Duration{"b": 3 * time.Second, "c": 3 * time.Second, "d": 3 * time.Second, "e": 0}, true},
		{"just inside the bound", []string{"a", "b", "c"}, map[string]time.Duration{"b": time.Second, "c": time.Second}, false},
		{"single node", []string{"a"}, nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var g clockGuard
			for p, off := range tc.samples {
				g.record(p, off, now)
			}
			g.evaluate(tc.members, "a", now, bound)
			if got, _ := g.verdict(); got != tc.want {
				t.Fatalf("skewed=%v, want %v", got, tc.want)
			}
		})
	}
}

func TestClockGuardNeedsMajorityAndFreshSamples(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var g clockGuard
	members := []string{"a", "b", "c"}
	g.record("b", 10*time.Second, now)
	g.record("c", 10*time.Second, now)
	if !g.evaluate(members, "a", now, time.Second) {
		t.Fatal("verdict did not change to skewed")
	}
	// Samples age out: with no fresh evidence the last verdict stands.
	later := now.Add(sampleTTL + time.Second)
	if g.evaluate(members, "a", later, time.Second) {
		t.Fatal("verdict changed without evidence")
	}
	if skewed, _ := g.verdict(); !skewed {
		t.Fatal("verdict dropped without evidence")
	}
	g.record("b", 0, later)
	g.record("c", 0, later)
	if !g.evaluate(members, "a", later, time.Second) {
		t.Fatal("verdict did not recover once the clocks agree")
	}
	if !g.judgedSince(later) || g.judgedSince(later.Add(time.Millisecond)) {
		t.Fatal("judgedSince does not report the last verdict's time")
	}
}
