//go:build unix

package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// LinkMode is what a fault proxy does with the traffic of its link.
type LinkMode int

const (
	// Healed forwards every connection to the target.
	Healed LinkMode = iota
	// Refused closes live connections and closes every new one at once:
	// the dialer sees its connection reset (like an ICMP-rejected route).
	Refused
	// BlackHoled closes live connections and accepts new ones but never
	// forwards or answers: the dialer waits for its own timeout, as it
	// would behind a partition that drops packets.
	BlackHoled
)

// String names the mode.
func (m LinkMode) String() string {
	switch m {
	case Healed:
		return "healed"
	case Refused:
		return "refused"
	case BlackHoled:
		return "black-holed"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Link is a TCP forwarder for one directed link: the connections node From
// opens to node To for one kind of traffic (Raft or node-to-node HTTP).
// From is started with the link's address as its dial address for To, so
// cutting the link cuts exactly what From sends to To (and the answers on
// those connections), nothing else.
//
// While the link is refused, or its target is marked down (the harness
// killed it), the proxy does not listen at all, so a dialer gets
// "connection refused" exactly as it would from a host whose process is
// gone; an accepting proxy would turn that into a connection reset after
// the request was written, which the service rightly reports as an unknown
// outcome.
type Link struct {
	From, To string
	// Kind is "raft" or "http".
	Kind string
	// Addr is where the proxy listens (127.0.0.1 only).
	Addr   string
	target string

	mu     sync.Mutex
	ln     net.Listener // nil while not listening
	mode   LinkMode
	down   bool
	conns  map[net.Conn]struct{}
	closed bool
	err    error // the last failure to listen again
	wg     sync.WaitGroup
}

// newLink listens on addr and forwards to target.
func newLink(from, to, kind, addr, target string) (*Link, error) {
	l := &Link{From: from, To: to, Kind: kind, Addr: addr, target: target, conns: map[net.Conn]struct{}{}}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.listenLocked(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *Link) listenLocked() error {
	var ln net.Listener
	var err error
	// The port was ours a moment ago; a few tries cover a slow release.
	for i := 0; i < 20; i++ {
		if ln, err = net.Listen("tcp", l.Addr); err == nil {
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	if err != nil {
		l.err = fmt.Errorf("listen for link %s on %s: %w", l, l.Addr, err)
		return l.err
	}
	l.ln = ln
	l.wg.Add(1)
	go l.acceptLoop(ln)
	return nil
}

// String names the link: from->to/kind.
func (l *Link) String() string { return fmt.Sprintf("%s->%s/%s", l.From, l.To, l.Kind) }

// Mode returns the link's current mode.
func (l *Link) Mode() LinkMode {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode
}

// effectiveLocked is the mode the link acts in: refused while its target
// is down.
func (l *Link) effectiveLocked() LinkMode {
	if l.down {
		return Refused
	}
	return l.mode
}

// SetMode changes the partition mode of the link.
func (l *Link) SetMode(m LinkMode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applyLocked(func() { l.mode = m })
}

// SetDown marks the link's target as down (killed) or up again.
func (l *Link) SetDown(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.applyLocked(func() { l.down = down })
}

// applyLocked makes a change and, if the effective mode changed, closes
// every connection (a cut must stop live connections, and a heal must not
// revive a black-holed connection whose bytes were dropped) and starts or
// stops listening.
func (l *Link) applyLocked(change func()) {
	before := l.effectiveLocked()
	change()
	after := l.effectiveLocked()
	if before == after || l.closed {
		return
	}
	l.closeConnsLocked()
	switch {
	case after == Refused && l.ln != nil:
		_ = l.ln.Close()
		l.ln = nil
	case after != Refused && l.ln == nil:
		_ = l.listenLocked()
	}
}

// Err returns the last failure to listen again, if any.
func (l *Link) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Link) closeConnsLocked() {
	for c := range l.conns {
		_ = c.Close()
	}
	clear(l.conns)
}

// track registers c unless the link is closed or no longer in mode want.
func (l *Link) track(c net.Conn, want LinkMode) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.effectiveLocked() != want {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *Link) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		delete(l.conns, c)
		_ = c.Close()
	}
}

func (l *Link) acceptLoop(ln net.Listener) {
	defer l.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed
		}
		l.mu.Lock()
		mode := l.effectiveLocked()
		l.mu.Unlock()
		switch mode {
		case BlackHoled:
			if !l.track(c, BlackHoled) {
				_ = c.Close()
				continue
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				_, _ = io.Copy(io.Discard, c)
				l.untrack(c)
			}()
		case Healed:
			if !l.track(c, Healed) {
				_ = c.Close()
				continue
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.forward(c)
			}()
		default:
			_ = c.Close()
		}
	}
}

// forward connects c to the target and copies both ways until either side
// closes or the link's mode changes.
func (l *Link) forward(c net.Conn) {
	d := net.Dialer{Timeout: 2 * time.Second}
	up, err := d.Dial("tcp", l.target)
	if err != nil {
		l.untrack(c)
		return
	}
	if !l.track(up, Healed) {
		// Cut while dialling.
		_ = up.Close()
		l.untrack(c)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	l.untrack(c, up) // closing both ends ends the other copy
	<-done
}

// close stops the listener and every connection and waits for the
// goroutines of the link.
func (l *Link) close() {
	l.mu.Lock()
	l.closed = true
	l.closeConnsLocked()
	if l.ln != nil {
		_ = l.ln.Close()
		l.ln = nil
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// Net is the fault proxies of a cluster: one Link per directed pair of node
// slots and kind of traffic. Partitions are sets of cut links.
type Net struct {
	ids   []string
	links map[linkKey]*Link
}

type linkKey struct{ from, to, kind string }

// Kinds of node-to-node traffic a Net proxies.
const (
	KindRaft = "raft"
	KindHTTP = "http"
)

// Endpoint is a node slot's identity and real listening addresses.
type Endpoint struct {
	ID       string
	HTTPAddr string
	RaftAddr string
}

// NewNet creates a link for every ordered pair of endpoints and both kinds,
// each listening on an address from alloc.
func NewNet(eps []Endpoint, alloc func() (string, error)) (*Net, error) {
	n := &Net{links: map[linkKey]*Link{}}
	for _, e := range eps {
		n.ids = append(n.ids, e.ID)
	}
	for _, from := range eps {
		for _, to := range eps {
			if from.ID == to.ID {
				continue
			}
			for _, kind := range []string{KindRaft, KindHTTP} {
				addr, err := alloc()
				if err != nil {
					n.Close()
					return nil, fmt.Errorf("allocate a proxy port: %w", err)
				}
				target := to.RaftAddr
				if kind == KindHTTP {
					target = to.HTTPAddr
				}
				l, err := newLink(from.ID, to.ID, kind, addr, target)
				if err != nil {
					n.Close()
					return nil, err
				}
				n.links[linkKey{from.ID, to.ID, kind}] = l
			}
		}
	}
	return n, nil
}

// Close stops every proxy.
func (n *Net) Close() {
	var wg sync.WaitGroup
	for _, l := range n.links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.close()
		}()
	}
	wg.Wait()
}

// PeerFlag is the value of --test-raft-peer-addrs (kind raft) or
// --test-http-peer-addrs (kind http) for node from: every other slot's
// address through the proxy of the link from -> that slot.
func (n *Net) PeerFlag(from, kind string) string {
	var parts []string
	for _, to := range n.ids {
		if l, ok := n.links[linkKey{from, to, kind}]; ok {
			parts = append(parts, to+"="+l.Addr)
		}
	}
	return strings.Join(parts, ",")
}

// Link returns the link from -> to of kind, or nil.
func (n *Net) Link(from, to, kind string) *Link { return n.links[linkKey{from, to, kind}] }

// CutOneWay cuts both kinds of traffic from a to b (b can still reach a).
func (n *Net) CutOneWay(a, b string, mode LinkMode) {
	for _, kind := range []string{KindRaft, KindHTTP} {
		if l := n.links[linkKey{a, b, kind}]; l != nil {
			l.SetMode(mode)
		}
	}
}

// Cut cuts both directions between a and b.
func (n *Net) Cut(a, b string, mode LinkMode) {
	n.CutOneWay(a, b, mode)
	n.CutOneWay(b, a, mode)
}

// Partition cuts every link between nodes of different groups; links
// inside a group and to nodes in no group are left as they are.
func (n *Net) Partition(groups [][]string, mode LinkMode) {
	for i, g := range groups {
		for j, h := range groups {
			if i == j {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					n.CutOneWay(a, b, mode)
				}
			}
		}
	}
}

// SetDown marks every link into node id as down (its process was killed or
// stopped) or up again.
func (n *Net) SetDown(id string, down bool) {
	for k, l := range n.links {
		if k.to == id {
			l.SetDown(down)
		}
	}
}

// Errs returns the links' failures to listen again.
func (n *Net) Errs() []error {
	var out []error
	for _, l := range n.links {
		if err := l.Err(); err != nil {
			out = append(out, err)
		}
	}
	return out
}

// HealAll heals every link.
func (n *Net) HealAll() {
	for _, l := range n.links {
		l.SetMode(Healed)
	}
}

// Cuts lists the links that are not healed, sorted, for messages.
func (n *Net) Cuts() []string {
	var out []string
	for _, l := range n.links {
		if m := l.Mode(); m != Healed {
			out = append(out, l.String()+"="+m.String())
		}
	}
	sort.Strings(out)
	return out
}

// Reachable reports whether a can currently send Raft traffic to b.
func (n *Net) Reachable(a, b string) bool {
	l := n.links[linkKey{a, b, KindRaft}]
	return l == nil || l.Mode() == Healed
}

// ringCuts returns the pairs to cut so that, in the cyclic order given,
// every node reaches only its two neighbours. With three nodes every pair
// are neighbours, so one pair is cut instead: a line a-b-c where the middle
// node bridges two nodes that cannot reach each other.
func ringCuts(order []string) [][2]string {
	k := len(order)
	if k < 3 {
		return nil
	}
	if k == 3 {
		return [][2]string{{order[0], order[2]}}
	}
	var cuts [][2]string
	for i := 0; i < k; i++ {
		for j := i + 1; j < k; j++ {
			d := j - i
			if d != 1 && d != k-1 {
				cuts = append(cuts, [2]string{order[i], order[j]})
			}
		}
	}
	return cuts
}

// errLinkDown is returned by probes of a cut link.
var errLinkDown = errors.New("link is cut")

// probe dials the link and reports whether a byte round trip to the target
// is possible, for the proxy's own test.
func (l *Link) probe(ctx context.Context) error {
	d := net.Dialer{}
	c, err := d.DialContext(ctx, "tcp", l.Addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		return err
	}
	var b [1]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("%w: %w", errLinkDown, err)
	}
	return nil
}

// groupsString formats partition groups for messages.
func groupsString(groups [][]string) string {
	parts := make([]string, len(groups))
	for i, g := range groups {
		g = slices.Clone(g)
		sort.Strings(g)
		parts[i] = "{" + strings.Join(g, ",") + "}"
	}
	return strings.Join(parts, " | ")
}
