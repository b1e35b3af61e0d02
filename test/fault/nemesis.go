//go:build unix

package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// fault is one injected fault and how to heal it.
type fault struct {
	desc string
	hold time.Duration
	heal func()
}

// nemesis injects faults from outside the node processes, one at a time:
// a quiet spell, a fault held for a while, its heal, and again, until its
// context ends. Every fault it injects it heals before returning.
type nemesis struct {
	r     *run
	kinds []string
	rng   *rand.Rand

	// probes counts the upgrade walks' write probes; lastFence is the
	// highest fencing token they were granted.
	probes    int
	lastFence int64

	// powerCuts and wholeCuts count the power nemesis's cuts, all and of
	// every member; stalls and eios the disk nemeses' faults.
	powerCuts, wholeCuts, stalls, eios int
}

func newNemesis(r *run) *nemesis {
	nm := &nemesis{r: r, rng: r.rng(7)}
	switch r.sc.Nemesis {
	case NemesisMix:
		nm.kinds = []string{NemesisKill, NemesisPause, NemesisPartition, NemesisClock, NemesisMembership}
	case NemesisNone, "":
	default:
		nm.kinds = []string{r.sc.Nemesis}
	}
	return nm
}

func (nm *nemesis) loop(ctx context.Context) {
	if scripted(nm.r.sc.Nemesis) {
		nm.walk(ctx)
		return
	}
	if len(nm.kinds) == 0 {
		<-ctx.Done()
		return
	}
	defer nm.checkPower()
	order := append([]string(nil), nm.kinds...)
	for i := 0; ; i++ {
		if i%len(order) == 0 {
			nm.rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		if !sleepCtx(ctx, between(nm.rng, 2*time.Second, 4*time.Second)) {
			return
		}
		kind := order[i%len(order)]
		id := nm.r.rec.FaultStart(kind)
		f := nm.inject(ctx, kind)
		if f == nil {
			nm.r.rec.FaultEnd(id, kind+": nothing injected")
			continue
		}
		nm.r.rec.Note("fault", f.desc)
		sleepCtx(ctx, f.hold)
		f.heal()
		nm.r.rec.FaultEnd(id, "healed: "+f.desc)
	}
}

func (nm *nemesis) inject(ctx context.Context, kind string) *fault {
	switch kind {
	case NemesisKill:
		return nm.kill()
	case NemesisPause:
		return nm.pause()
	case NemesisPartition:
		return nm.partition()
	case NemesisClock:
		return nm.clock(ctx, false)
	case NemesisClockCrash:
		return nm.clock(ctx, true)
	case NemesisMembership:
		return nm.membership()
	case NemesisStorage:
		return nm.storage()
	case NemesisPower:
		return nm.power()
	case NemesisDiskStall:
		return nm.diskStall()
	case NemesisDiskEIO:
		return nm.diskEIO()
	}
	nm.r.problem("unknown nemesis %q", kind)
	return nil
}

// runningMembers returns the members whose process runs, shuffled.
func (nm *nemesis) runningMembers() []*harness.Node {
	var out []*harness.Node
	for _, n := range nm.r.memberNodes() {
		if n.Running() {
			out = append(out, n)
		}
	}
	nm.rng.Shuffle(len(out), func(a, b int) { out[a], out[b] = out[b], out[a] })
	return out
}

// kill SIGKILLs the leader, one node, a majority or every member, and
// restarts them from their data when healed.
func (nm *nemesis) kill() *fault {
	r := nm.r
	members := nm.runningMembers()
	if len(members) == 0 {
		return nil
	}
	var targets []*harness.Node
	switch x := nm.rng.IntN(100); {
	case x < 35:
		if l := r.leader(); l != nil {
			targets = []*harness.Node{l}
		} else {
			targets = members[:1]
		}
	case x < 70:
		targets = members[:1]
	case x < 85:
		targets = members[:min(len(members), len(r.memberNodes())/2+1)]
	default:
		targets = members
	}
	var killed []*harness.Node
	for _, n := range targets {
		if err := r.killNode(n); err != nil {
			r.problem("kill %s: %v", n.ID, err)
			continue
		}
		killed = append(killed, n)
	}
	return &fault{
		desc: "kill " + strings.Join(harness.IDs(killed), ","),
		hold: between(nm.rng, 3*time.Second, 6*time.Second),
		heal: func() {
			for _, n := range killed {
				if err := r.startNode(n); err != nil {
					r.problem("restart %s: %v", n.ID, err)
				}
			}
		},
	}
}

// pause SIGSTOPs the leader or another node for longer than a lease TTL.
func (nm *nemesis) pause() *fault {
	r := nm.r
	members := nm.runningMembers()
	if len(members) == 0 {
		return nil
	}
	target := members[0]
	if nm.rng.IntN(2) == 0 {
		if l := r.leader(); l != nil {
			target = l
		}
	}
	if err := target.Pause(); err != nil {
		r.problem("pause %s: %v", target.ID, err)
		return nil
	}
	return &fault{
		desc: "pause " + target.ID,
		hold: leaseTTL + between(nm.rng, 2*time.Second, 5*time.Second),
		heal: func() {
			if err := target.Resume(); err != nil {
				r.problem("resume %s: %v", target.ID, err)
			}
		},
	}
}

// partition cuts the proxied links: the leader alone against the rest, a
// random minority against the majority, or a ring in which every node
// reaches only its neighbours (a bridge for three nodes).
func (nm *nemesis) partition() *fault {
	r := nm.r
	var ids []string
	for _, n := range r.memberNodes() {
		ids = append(ids, n.ID)
	}
	nm.rng.Shuffle(len(ids), func(a, b int) { ids[a], ids[b] = ids[b], ids[a] })
	mode := Refused
	if nm.rng.IntN(2) == 0 {
		mode = BlackHoled
	}
	var desc string
	switch nm.rng.IntN(3) {
	case 0:
		leader := ids[0]
		if l := r.leader(); l != nil {
			leader = l.ID
		}
		groups := [][]string{{leader}, without(ids, leader)}
		r.net.Partition(groups, mode)
		desc = "isolate leader " + groupsString(groups)
	case 1:
		k := (len(ids) - 1) / 2
		groups := [][]string{ids[:k], ids[k:]}
		r.net.Partition(groups, mode)
		desc = "minority/majority " + groupsString(groups)
	default:
		var parts []string
		for _, p := range ringCuts(ids) {
			r.net.Cut(p[0], p[1], mode)
			parts = append(parts, p[0]+"x"+p[1])
		}
		desc = "ring " + strings.Join(ids, "-") + " cut " + strings.Join(parts, " ")
	}
	return &fault{
		desc: fmt.Sprintf("partition (%s) %s", mode, desc),
		hold: between(nm.rng, 5*time.Second, 8*time.Second),
		heal: r.net.HealAll,
	}
}

func without(ids []string, x string) []string {
	var out []string
	for _, id := range ids {
		if id != x {
			out = append(out, id)
		}
	}
	return out
}

// clockGuardLog is the ERROR line a node logs when its clock is skewed.
var clockGuardLog = regexp.MustCompile(`this node's clock is off the cluster's median by more than the bound; it will not lead`)

// clock restarts one member with its wall clock shifted well beyond the
// bound and checks the clock guard: while skewed the node must never be a
// ready leader (watched throughout, and tempted by pausing the leader so an
// election happens), and it must say so in /cluster/status and its log.
// With crash, the leader is killed as the skewed node comes up instead, so
// the election happens while one member is down (and, with three nodes,
// only two clocks are left to compare).
func (nm *nemesis) clock(ctx context.Context, crash bool) *fault {
	r := nm.r
	members := nm.runningMembers()
	if len(members) == 0 {
		return nil
	}
	target := members[0]
	if crash {
		// A follower is skewed; the leader is the one to crash.
		if l := r.leader(); l == target && len(members) > 1 {
			target = members[1]
		}
	}
	off := time.Duration(5+nm.rng.IntN(6)) * time.Second
	if nm.rng.IntN(2) == 0 {
		off = -off
	}
	if err := r.stopNode(target); err != nil {
		r.problem("stop %s for the clock fault: %v", target.ID, err)
		if !target.Alive() {
			_ = r.startNode(target)
		}
		return nil
	}
	var crashed *harness.Node
	leader := r.leader()
	if err := r.startNode(target, "--test-clock-offset", off.String()); err != nil {
		r.problem("start %s with a clock offset: %v", target.ID, err)
		return nil
	}
	if crash && leader != nil && leader != target {
		if err := r.killNode(leader); err != nil {
			r.problem("kill %s: %v", leader.ID, err)
		} else {
			crashed = leader
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		reported := false
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			s, err := r.status(target, false)
			if err == nil && s.State == "leader" && s.Ready && !reported {
				reported = true
				r.problem("clock guard: %s with its clock off by %v is a ready leader (term %d, clock_skewed %v)", target.ID, off, s.Term, s.ClockSkewed)
			}
		}
	}()
	heal := func() {
		close(stop)
		wg.Wait()
		if crashed != nil {
			if err := r.startNode(crashed); err != nil {
				r.problem("restart %s: %v", crashed.ID, err)
			}
		}
		if err := r.stopNode(target); err != nil {
			r.problem("stop %s after the clock fault: %v", target.ID, err)
		}
		if err := r.startNode(target); err != nil {
			r.problem("restart %s with its real clock: %v", target.ID, err)
		}
	}
	var last nodeStatus
	err := poll(ctx, 25*time.Second, 200*time.Millisecond, func() error {
		s, err := r.status(target, false)
		if err != nil {
			return err
		}
		last = s
		if !s.ClockSkewed {
			return fmt.Errorf("%s does not report clock_skewed yet (offset %d ms)", target.ID, s.ClockOffsetMs)
		}
		if !clockGuardLog.MatchString(target.LogSinceStart()) {
			return fmt.Errorf("%s has not logged the clock guard's error yet", target.ID)
		}
		return nil
	})
	switch {
	case err != nil && ctx.Err() == nil:
		r.problem("clock guard: %s, clock off by %v, was not reported skewed: %v", target.ID, off, err)
	case err == nil:
		if d := time.Duration(last.ClockOffsetMs)*time.Millisecond - off; d > 1500*time.Millisecond || d < -1500*time.Millisecond {
			r.problem("clock guard: %s reports clock_offset_ms %d, its offset is %v", target.ID, last.ClockOffsetMs, off)
		}
	}
	// Tempt it: an election while it is skewed.
	if l := r.leader(); crashed == nil && l != nil && l != target && ctx.Err() == nil {
		if err := l.Pause(); err == nil {
			sleepCtx(ctx, 3*time.Second)
			if err := l.Resume(); err != nil {
				r.problem("resume %s: %v", l.ID, err)
			}
		}
	}
	desc := fmt.Sprintf("clock of %s off by %v, then an election", target.ID, off)
	if crashed != nil {
		desc = fmt.Sprintf("clock of %s off by %v as leader %s crashed", target.ID, off, crashed.ID)
	}
	return &fault{desc: desc, hold: between(nm.rng, time.Second, 3*time.Second), heal: heal}
}

// membership removes a voter (stopping and wiping it) and adds it back as
// a fresh node with --join, or adds the spare slot as a new voter and
// removes it again.
func (nm *nemesis) membership() *fault {
	r := nm.r
	// Membership changes run to completion (each bounded) even when the
	// run ends meanwhile: a half-done change would leave the cluster in a
	// state the drain does not expect.
	ctx := context.Background()
	if r.spare != nil && !r.isMember(r.spare.ID) && nm.rng.IntN(2) == 0 {
		n := r.spare
		if err := nm.addVoter(ctx, n); err != nil {
			r.problem("add %s: %v", n.ID, err)
		}
		return &fault{desc: "add voter " + n.ID, hold: between(nm.rng, 2*time.Second, 4*time.Second), heal: func() {
			if err := nm.removeVoter(context.Background(), n); err != nil {
				r.problem("remove %s: %v", n.ID, err)
			}
		}}
	}
	members := nm.runningMembers()
	if len(members) < 2 {
		return nil
	}
	n := members[0]
	if err := nm.removeVoter(ctx, n); err != nil {
		r.problem("remove %s: %v", n.ID, err)
		return nil
	}
	return &fault{desc: "remove voter " + n.ID, hold: between(nm.rng, 2*time.Second, 4*time.Second), heal: func() {
		if err := nm.addVoter(context.Background(), n); err != nil {
			r.problem("add %s back: %v", n.ID, err)
		}
	}}
}

// voters returns the leader's configuration.
func (nm *nemesis) voters() ([]string, error) {
	l := nm.r.leader()
	if l == nil {
		return nil, fmt.Errorf("no leader")
	}
	s, err := nm.r.status(l, false)
	if err != nil {
		return nil, err
	}
	return s.voters(), nil
}

func contains(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// removeVoter removes n from the configuration through another member,
// then kills it and wipes its data.
func (nm *nemesis) removeVoter(ctx context.Context, n *harness.Node) error {
	r := nm.r
	err := poll(ctx, 45*time.Second, 300*time.Millisecond, func() error {
		via := r.leader()
		if via == nil || via == n {
			for _, m := range nm.runningMembers() {
				if m != n {
					via = m
					break
				}
			}
		}
		if via == nil {
			return fmt.Errorf("no member to ask")
		}
		a := r.ops.Do(ctx, via.HTTPAddr, http.MethodPost, "/cluster/remove", map[string]string{"node_id": n.ID}, "")
		if a.Status != http.StatusOK && a.Status != http.StatusNotFound {
			return fmt.Errorf("POST /cluster/remove via %s: HTTP %d %.200s %v", via.ID, a.Status, a.Raw, a.Err)
		}
		v, err := nm.voters()
		if err != nil {
			return err
		}
		if contains(v, n.ID) {
			return fmt.Errorf("%s still a voter: %v", n.ID, v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.setMember(n.ID, false)
	if n.Alive() {
		if err := r.killNode(n); err != nil {
			return err
		}
	}
	return n.Wipe()
}

// addVoter starts n without data, joining through the running members,
// and waits until it is a voter.
func (nm *nemesis) addVoter(ctx context.Context, n *harness.Node) error {
	r := nm.r
	if n.Alive() {
		if err := r.killNode(n); err != nil {
			return err
		}
	}
	if err := n.Wipe(); err != nil {
		return err
	}
	var others []*harness.Node
	for _, m := range r.memberNodes() {
		if m != n {
			others = append(others, m)
		}
	}
	if err := r.startNode(n, "--join", harness.JoinList(others...)); err != nil {
		return err
	}
	r.setMember(n.ID, true)
	return poll(ctx, 60*time.Second, 300*time.Millisecond, func() error {
		v, err := nm.voters()
		if err != nil {
			return err
		}
		if !contains(v, n.ID) {
			return fmt.Errorf("%s not a voter yet: %v", n.ID, v)
		}
		s, err := r.status(n, false)
		if err != nil {
			return err
		}
		if s.LeaderID == "" {
			return fmt.Errorf("%s knows no leader yet", n.ID)
		}
		return nil
	})
}
