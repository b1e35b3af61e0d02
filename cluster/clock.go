package cluster

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ErrClockSkew is returned by Propose on a leader whose wall clock is
// further from the cluster's than the configured bound: such a node must not
// stamp commands, since an early clock would expire leases and claims early.
var ErrClockSkew = errors.New("this node's clock is too far from the cluster's to lead")

// clockGuard estimates how far this node's wall clock is from the median of
// the cluster's clocks, from the clock each peer reports in its status.
type clockGuard struct {
	mu      sync.Mutex
	offsets map[string]clockSample // peer id -> latest sample
	skewed  bool
	median  time.Duration
}

type clockSample struct {
	offset time.Duration // peer clock minus ours
	at     time.Time
}

// maxSampleRTT discards samples whose round trip makes the offset too uncertain.
const maxSampleRTT = 250 * time.Millisecond

// sampleTTL is how long a sample counts.
const sampleTTL = 10 * time.Second

func (g *clockGuard) record(peer string, offset time.Duration, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.offsets == nil {
		g.offsets = make(map[string]clockSample)
	}
	g.offsets[peer] = clockSample{offset: offset, at: at}
}

// evaluate recomputes the verdict over the members of the configuration:
// this node (offset 0) and every peer with a fresh sample. A verdict needs a
// majority of members; the median of an even count is the middle value
// nearer to zero, so a tie never condemns a node. It reports whether the
// verdict changed.
func (g *clockGuard) evaluate(members []string, self string, now time.Time, bound time.Duration) (changed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	offs := []time.Duration{0}
	for _, m := range members {
		if m == self {
			continue
		}
		if s, ok := g.offsets[m]; ok && now.Sub(s.at) < sampleTTL {
			offs = append(offs, s.offset)
		}
	}
	if len(offs)*2 <= len(members) {
		return false // not enough evidence either way; keep the last verdict
	}
	slices.Sort(offs)
	med := offs[len(offs)/2]
	if len(offs)%2 == 0 {
		lo := offs[len(offs)/2-1]
		if absDur(lo) < absDur(med) {
			med = lo
		}
	}
	skewed := absDur(med) > bound
	changed = skewed != g.skewed
	g.skewed, g.median = skewed, med
	return changed
}

func (g *clockGuard) verdict() (bool, time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.skewed, g.median
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// clockLoop samples every peer's clock once a second and acts on the
// verdict: a skewed leader hands leadership over.
func (n *Node) clockLoop() {
	for n.sleep(time.Second) {
		members, addrs := n.peerHTTPAddrs()
		for id, addr := range addrs {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			t0 := n.cfg.Now()
			st, err := n.peerStatus(ctx, addr)
			t1 := n.cfg.Now()
			cancel()
			if err != nil || st.ClockUnixMs == 0 || t1.Sub(t0) > maxSampleRTT {
				continue
			}
			mid := t0.Add(t1.Sub(t0) / 2)
			n.clock.record(id, time.UnixMilli(st.ClockUnixMs).Sub(mid), t1)
		}
		if n.clock.evaluate(members, n.cfg.NodeID, n.cfg.Now(), n.cfg.MaxClockSkew) {
			skewed, med := n.clock.verdict()
			if skewed {
				n.log.Error("this node's clock is off the cluster's median by more than the bound; it will not lead",
					"offset_ms", -med.Milliseconds(), "bound_ms", n.cfg.MaxClockSkew.Milliseconds())
			} else {
				n.log.Info("this node's clock is back within the bound", "offset_ms", -med.Milliseconds())
			}
		}
		if skewed, _ := n.clock.verdict(); skewed && n.IsLeader() {
			n.log.Warn("handing leadership over because of clock skew")
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			n.TransferLeadership(ctx)
			cancel()
		}
	}
}

// peerHTTPAddrs lists the configuration's members and the HTTP addresses of
// the other members known to the directory.
func (n *Node) peerHTTPAddrs() ([]string, map[string]string) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil, nil
	}
	var members []string
	addrs := map[string]string{}
	for _, s := range f.Configuration().Servers {
		if s.Suffrage != raft.Voter {
			continue
		}
		id := string(s.ID)
		members = append(members, id)
		if id == n.cfg.NodeID {
			continue
		}
		if info, ok := n.fsm.Node(id); ok && info.HTTPAddr != "" {
			addrs[id] = n.httpDialAddr(id, info.HTTPAddr)
		}
	}
	return members, addrs
}

// ClockSkew reports whether this node considers its clock too far from the
// cluster's, and its offset from the cluster's median (positive: ahead).
func (n *Node) ClockSkew() (bool, time.Duration) {
	skewed, med := n.clock.verdict()
	return skewed, -med
}
