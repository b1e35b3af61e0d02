//go:build unix

package fault

import (
	"context"
	"errors"
	"io"
	"net"
	"sort"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every byte it reads.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func freeAddr(t *testing.T) (string, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

func probe(t *testing.T, l *Link, timeout time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return l.probe(ctx)
}

func TestLinkForwardsCutsAndHeals(t *testing.T) {
	target := echoServer(t)
	addr, err := freeAddr(t)
	if err != nil {
		t.Fatal(err)
	}
	l, err := newLink("a", "b", KindRaft, addr, target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)

	if err := probe(t, l, 2*time.Second); err != nil {
		t.Fatalf("healed link: %v", err)
	}
	// A live connection is closed by a cut.
	live, err := net.Dial("tcp", l.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if _, err := live.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := io.ReadFull(live, b[:]); err != nil {
		t.Fatalf("live connection before the cut: %v", err)
	}

	l.SetMode(Refused)
	_ = live.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := live.Read(b[:]); err == nil {
		t.Error("a live connection survived the cut")
	}
	if err := probe(t, l, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("refused link: want connection refused, got %v", err)
	}

	l.SetMode(BlackHoled)
	if err := probe(t, l, 500*time.Millisecond); err == nil || !errors.Is(err, errLinkDown) {
		t.Errorf("black-holed link: want a connection that never answers, got %v", err)
	}

	l.SetMode(Healed)
	if err := probe(t, l, 2*time.Second); err != nil {
		t.Errorf("healed again: %v", err)
	}

	l.SetDown(true)
	if err := probe(t, l, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("link to a down node: want connection refused, got %v", err)
	}
	l.SetDown(false)
	if err := probe(t, l, 2*time.Second); err != nil {
		t.Errorf("link to a node up again: %v", err)
	}
	if err := l.Err(); err != nil {
		t.Error(err)
	}
}

func TestNetPartitions(t *testing.T) {
	target := echoServer(t)
	ids := []string{"n0", "n1", "n2", "n3", "n4"}
	var eps []Endpoint
	for _, id := range ids {
		eps = append(eps, Endpoint{ID: id, HTTPAddr: target, RaftAddr: target})
	}
	nw, err := NewNet(eps, func() (string, error) { return freeAddr(t) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nw.Close)

	nw.Partition([][]string{{"n0", "n1"}, {"n2", "n3", "n4"}}, Refused)
	for _, a := range ids {
		for _, b := range ids {
			if a == b {
				continue
			}
			sameSide := (a < "n2") == (b < "n2")
			if got := nw.Reachable(a, b); got != sameSide {
				t.Errorf("partition: %s reaches %s = %v, want %v", a, b, got, sameSide)
			}
		}
	}
	if err := probe(t, nw.Link("n0", "n3", KindHTTP), time.Second); err == nil {
		t.Error("HTTP across the partition still connects")
	}
	nw.HealAll()
	if cuts := nw.Cuts(); len(cuts) != 0 {
		t.Errorf("cuts after healing: %v", cuts)
	}
	if err := probe(t, nw.Link("n0", "n3", KindHTTP), 2*time.Second); err != nil {
		t.Errorf("HTTP after healing: %v", err)
	}

	// A ring: every node reaches exactly its two neighbours.
	for _, p := range ringCuts(ids) {
		nw.Cut(p[0], p[1], BlackHoled)
	}
	for i, a := range ids {
		var reach []string
		for _, b := range ids {
			if a != b && nw.Reachable(a, b) {
				reach = append(reach, b)
			}
		}
		want := []string{ids[(i+1)%5], ids[(i+4)%5]}
		sort.Strings(want)
		if len(reach) != 2 || reach[0] != want[0] || reach[1] != want[1] {
			t.Errorf("ring: %s reaches %v, want %v", a, reach, want)
		}
	}
	// Three nodes: a bridge, where the middle one reaches both ends.
	if cuts := ringCuts([]string{"a", "b", "c"}); len(cuts) != 1 || cuts[0] != [2]string{"a", "c"} {
		t.Errorf("three-node ring cuts %v, want [[a c]]", cuts)
	}
	if flag := nw.PeerFlag("n0", KindRaft); flag == "" {
		t.Error("no peer flag for n0")
	}
}
