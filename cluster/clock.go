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
	judged  time.Time // when a verdict last had enough evidence
}

type clockSample struct {
	offset time.Duration // peer clock minus ours
	at     time.Time
}

// maxSampleRTT discards samples whose round trip makes the offset too uncertain.
const maxSampleRTT = 250 * time.Millisecond

// sampleTTL is how long a sample counts. A peer that becomes unreachable
// keeps witnessing with its last sample for this long: clocks drift slowly,
// and a witness is what lets two disagreeing clocks be told apart.
const sampleTTL = 2 * time.Minute

// verdictTTL is how recent a verdict must be for a new leader to trust it.
const verdictTTL = 5 * time.Second

func (g *clockGuard) record(peer string, offset time.Duration, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.offsets == nil {
		g.offsets = make(map[string]clockSample)
	}
	g.offsets[peer] = clockSample{offset: offset, at: at}
}

// evaluate recomputes the verdict over the members of the configuration:
// this node (offset 0) and every peer with a sample. A verdict needs clocks
// from a majority of members. With an odd count the node is skewed when the
// median is beyond the bound; with an even count, when either middle value
// is: two clocks that disagree with no third to side with one of them both
// refuse to lead, since neither can know it is the right one. It reports
// whether the verdict changed.
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
	skewed := absDur(med) > bound
	if len(offs)%2 == 0 {
		lo := offs[len(offs)/2-1]
		skewed = skewed || absDur(lo) > bound
		if absDur(lo) > absDur(med) {
			med = lo
		}
	}
	changed = skewed != g.skewed
	g.skewed, g.median, g.judged = skewed, med, now
	return changed
}

// judgedSince reports whether a verdict with enough evidence was reached
// at or after t.
func (g *clockGuard) judgedSince(t time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return !g.judged.Before(t)
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
	// The first samples are taken at once, so a node that has just started
	// has a verdict before it may have to lead.
	for first := true; first || n.sleep(time.Second); first = false {
		members := n.sampleClocks()
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
		n.tendLevel()
	}
}

// sampleClocks records a clock sample from every voter it can reach —
// through the directory, or the --join addresses while the directory is
// not yet known — and what every member it reaches reports of its build;
// it returns the voters' ids.
func (n *Node) sampleClocks() []string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var members []string
	targets := map[string]bool{}
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if s.Suffrage == raft.Voter {
			members = append(members, id)
		}
		if id == n.cfg.NodeID {
			continue
		}
		if info, ok := n.fsm.Node(id); ok && info.HTTPAddr != "" {
			targets[n.httpDialAddr(id, info.HTTPAddr)] = true
		}
	}
	joinCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	joins, _, _ := n.joinAddrs(joinCtx)
	cancel()
	for _, a := range joins {
		targets[a] = true
	}
	for addr := range targets {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t0 := n.cfg.Now()
		st, err := n.PeerStatus(ctx, addr)
		t1 := n.cfg.Now()
		cancel()
		if err != nil || st.NodeID == n.cfg.NodeID {
			continue
		}
		// Builds before the cluster level report none: level 0.
		n.levels.report(st.NodeID, st.Level, st.BuildVersion, time.Now())
		if st.ClockUnixMs == 0 || t1.Sub(t0) > maxSampleRTT {
			continue
		}
		mid := t0.Add(t1.Sub(t0) / 2)
		n.clock.record(st.NodeID, time.UnixMilli(st.ClockUnixMs).Sub(mid), t1)
	}
	return members
}

// awaitClockVerdict waits, for at most timeout, until the clock guard has
// judged this node's clock with fresh evidence, so a new leader does not
// stamp commands before it knows whether its clock can be trusted. A
// single-voter cluster has nothing to compare and does not wait.
func (n *Node) awaitClockVerdict(ctx context.Context, timeout time.Duration) bool {
	if n.voters() < 2 {
		return true
	}
	since := n.cfg.Now().Add(-verdictTTL)
	deadline := time.Now().Add(timeout)
	for !n.clock.judgedSince(since) {
		if time.Now().After(deadline) || !n.sleepCtx(ctx, 100*time.Millisecond) {
			return false
		}
	}
	return true
}

// ClockSkew reports whether this node considers its clock too far from the
// cluster's, and its offset from the cluster's median (positive: ahead).
func (n *Node) ClockSkew() (bool, time.Duration) {
	skewed, med := n.clock.verdict()
	return skewed, -med
}
