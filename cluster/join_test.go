package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// fakeResolver answers from a map that a test may change between lookups.
type fakeResolver map[string][]string

func (r fakeResolver) LookupHost(_ context.Context, host string) ([]string, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func TestDNSJoinEntriesAreResolvedAtEachAttempt(t *testing.T) {
	r := fakeResolver{"holdfast-peers.default.svc": {"10.0.0.12", "10.0.0.11"}}
	n := &Node{cfg: Config{Join: []string{"dns:holdfast-peers.default.svc:7070", "10.0.0.11:7070", "other:7070"}, Resolver: r}}
	addrs, seen, err := n.joinAddrs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(addrs, ","); got != "10.0.0.11:7070,10.0.0.12:7070,other:7070" {
		t.Fatalf("join addresses %s", got)
	}
	if seen != "dns:holdfast-peers.default.svc:7070 resolved to 10.0.0.11, 10.0.0.12" {
		t.Fatalf("seen %q", seen)
	}
	// With peer TLS, each address found by the name is verified against
	// the name; a plain entry is verified against its own host.
	names := *n.joinNames.Load()
	if len(names) != 2 || names["10.0.0.12:7070"] != "holdfast-peers.default.svc" || names["10.0.0.11:7070"] != "holdfast-peers.default.svc" {
		t.Fatalf("names to verify addresses against: %v", names)
	}

	// A pod recreated on a new IP, a third one started: the next attempt
	// sees them.
	r["holdfast-peers.default.svc"] = []string{"10.0.0.21", "10.0.0.12", "10.0.0.13"}
	addrs, _, _ = n.joinAddrs(context.Background())
	if got := strings.Join(addrs, ","); got != "10.0.0.12:7070,10.0.0.13:7070,10.0.0.21:7070,10.0.0.11:7070,other:7070" {
		t.Fatalf("join addresses after the change %s", got)
	}

	// A name that does not resolve: the error names the entry, the
	// others are still tried.
	n.cfg.Join = []string{"dns:nowhere.svc:7070", "10.0.0.11:7070"}
	addrs, seen, err = n.joinAddrs(context.Background())
	if err == nil || !strings.Contains(err.Error(), "dns:nowhere.svc:7070") || !strings.Contains(err.Error(), "no such host") {
		t.Fatalf("unresolvable name: %v", err)
	}
	if len(addrs) != 1 || !strings.Contains(seen, "dns:nowhere.svc:7070 resolved to nothing") {
		t.Fatalf("unresolvable name: %v %q", addrs, seen)
	}
	// A failed lookup forgets no name an earlier one found.
	if names := *n.joinNames.Load(); names["10.0.0.21:7070"] != "holdfast-peers.default.svc" || names["10.0.0.11:7070"] != "holdfast-peers.default.svc" {
		t.Fatalf("names after a failed lookup: %v", names)
	}
	r["empty.svc"] = nil
	n.cfg.Join = []string{"dns:empty.svc:7070"}
	if _, _, err := n.joinAddrs(context.Background()); err == nil || !strings.Contains(err.Error(), "no addresses") {
		t.Fatalf("a name with no addresses: %v", err)
	}
}

func TestJoinEntriesAreChecked(t *testing.T) {
	for _, good := range []string{"10.0.0.1:7070", "holdfast-0.holdfast-peers:7070", "dns:holdfast-peers.default.svc.cluster.local:7070", "dns:[fd00::1]:7070"} {
		c := Config{Join: []string{good}}
		if err := c.joinError(); err != nil {
			t.Errorf("join %q refused: %v", good, err)
		}
	}
	for _, bad := range []string{"dns:holdfast-peers", "dns::7070", "dns:name:", "holdfast-0", ""} {
		c := Config{Join: []string{bad}}
		if err := c.joinError(); err == nil || !strings.Contains(err.Error(), "join") {
			t.Errorf("join %q accepted: %v", bad, err)
		}
	}
}
