//go:build unix

package fault

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/test/harness"
)

// Snapshot settings of the scenarios that need a joiner to be sent a
// snapshot: the leader snapshots and compacts its log every few dozen
// entries.
const (
	compactThreshold = 24
	compactTrailing  = 8
)

// The upgrade nemeses are scripted walks rather than random faults; each
// step is a fault window in the history, so the report shows the
// availability during the walk.
const (
	// NemesisUpgrade starts three baseline nodes and upgrades them one at
	// a time, followers first, the leader last with SIGTERM (which hands
	// leadership over). The first follower upgraded is rolled back to the
	// baseline and upgraded again before the level can rise. After each
	// step every kind of write is sent through every node; at the end the
	// new level must be active on every node.
	NemesisUpgrade = "upgrade"
	// NemesisRejoin upgrades the followers of three baseline nodes, then
	// stops the baseline leader, removes it, wipes it and joins it again
	// on the baseline build: it must install the upgraded leader's
	// snapshot and converge, and the level must stay the baseline's while
	// it is a member.
	NemesisRejoin = "upgrade-rejoin"
	// NemesisDowngrade runs three nodes of the build under test until the
	// new level is active, then starts the baseline on a member's data
	// directory (it must exit non-zero, without a panic and without
	// changing the log or the snapshots) and asks the cluster to take a
	// baseline joiner (refused, naming both levels).
	NemesisDowngrade = "downgrade"
)

// buildLevel is the highest cluster level of the build under test;
// baselineLevel the baseline's, the level before it. slotsLevel is the
// level of lease slots and checkpoints, the API's last writes gated by a
// level (level 3 changes how a node keeps its snapshots, no API write).
const (
	buildLevel    = fsm.BuildLevel
	baselineLevel = buildLevel - 1
	slotsLevel    = 2
)

// checkpointMagic starts the state.bin of a snapshot kept as a checkpoint
// of the state store (cluster level 3); archiveMagic that of a snapshot a
// follower was sent as the leader's store files (cluster level 4).
const (
	checkpointMagic = "HOLDFAST-CKPT"
	archiveMagic    = "HOLDFAST-STORE"
)

// scripted reports whether a nemesis is a scripted walk.
func scripted(nemesis string) bool {
	return nemesis == NemesisUpgrade || nemesis == NemesisRejoin || nemesis == NemesisDowngrade
}

// startsOnBaseline reports whether a scenario's nodes start on the
// baseline build.
func startsOnBaseline(nemesis string) bool {
	return nemesis == NemesisUpgrade || nemesis == NemesisRejoin
}

// panicLine matches what a Go process prints when it panics or dies of a
// runtime error.
var panicLine = regexp.MustCompile(`(?m)^(panic: |fatal error: ).*$`)

// downgradeRefusal is what the baseline's refusal of a data directory at
// a level above its own names: the log's level mark (or a snapshot format
// of level 1 or later).
var downgradeRefusal = regexp.MustCompile(`needs-cluster-level-[1-9]|unknown format version [3-9]|but the cluster this data directory belongs to is at level [1-9]`)

// levelRefusal is the leader's refusal of a joiner whose build is below
// the active level, as the joiner logs it.
var levelRefusal = regexp.MustCompile(`speaks cluster level [0-9]+, but the cluster is at level [1-9]`)

// walk runs the scripted nemesis of the scenario to its end; every step
// is bounded.
func (nm *nemesis) walk(ctx context.Context) {
	if !sleepCtx(ctx, 3*time.Second) {
		return
	}
	switch nm.r.sc.Nemesis {
	case NemesisUpgrade:
		nm.rollingUpgrade()
	case NemesisRejoin:
		nm.rejoinOnBaseline()
	case NemesisDowngrade:
		nm.downgrade()
	}
}

// step runs one step of a walk as a fault window; a failed step is a
// problem and ends the walk.
func (nm *nemesis) step(desc string, f func() error) bool {
	r := nm.r
	id := r.rec.FaultStart(desc)
	r.rec.Note("fault", desc)
	if err := f(); err != nil {
		r.problem("%s: %v", desc, err)
		r.rec.FaultEnd(id, "failed: "+desc)
		return false
	}
	r.rec.FaultEnd(id, "done: "+desc)
	return true
}

// swap stops n (SIGKILL when kill, else SIGTERM), starts bin on its data
// ("" for the build under test) and waits until it has caught up.
func (nm *nemesis) swap(n *harness.Node, bin string, kill bool) error {
	r := nm.r
	halt := r.stopNode
	if kill {
		halt = r.killNode
	}
	if err := halt(n); err != nil {
		return fmt.Errorf("stop %s: %w", n.ID, err)
	}
	n.Binary = bin
	if err := r.startNode(n); err != nil {
		return err
	}
	return nm.awaitCaughtUp(n)
}

// onBaseline returns the members still running the baseline.
func (nm *nemesis) onBaseline() []*harness.Node {
	var out []*harness.Node
	for _, n := range nm.r.memberNodes() {
		if n.Binary != "" {
			out = append(out, n)
		}
	}
	return out
}

// currentLeader waits (bounded) for a leader.
func (nm *nemesis) currentLeader() (*harness.Node, error) {
	var l *harness.Node
	err := poll(context.Background(), 30*time.Second, 250*time.Millisecond, func() error {
		if l = nm.r.leader(); l == nil {
			return fmt.Errorf("no leader")
		}
		return nil
	})
	return l, err
}

// rollingUpgrade upgrades every member, a follower while any runs the
// baseline, the leader last.
func (nm *nemesis) rollingUpgrade() {
	r := nm.r
	if !nm.step("the baseline's level becomes active", nm.awaitBaselineLevel) {
		return
	}
	first := true
	for old := nm.onBaseline(); len(old) > 0; old = nm.onBaseline() {
		l, err := nm.currentLeader()
		if err != nil {
			r.problem("rolling upgrade: %v", err)
			return
		}
		n, how := l, "upgrade the leader "+l.ID+" (SIGTERM)"
		if followers := harness.Except(old, l); len(followers) > 0 {
			n, how = followers[0], "upgrade the follower "+followers[0].ID
		}
		kill := first && n != l // one follower is killed, the others stopped
		if kill {
			how += " (SIGKILL)"
		}
		if !nm.step(how, func() error { return nm.swap(n, "", kill) }) {
			return
		}
		if first {
			first = false
			// Before the level rises an upgrade can be undone.
			if !nm.step("roll "+n.ID+" back to the baseline", func() error { return nm.swap(n, r.baseline, false) }) ||
				!nm.step("upgrade "+n.ID+" again", func() error { return nm.swap(n, "", false) }) {
				return
			}
		}
		if len(nm.onBaseline()) > 0 {
			while := "while " + strings.Join(harness.IDs(nm.onBaseline()), ",") + " run the baseline"
			nm.r.expectLevel(baselineLevel, while)
			nm.expectNoArchives(while)
			nm.probeAll("mixed versions")
		}
	}
	nm.step("the new level becomes active", func() error { return nm.r.awaitLevel(buildLevel, buildLevel, 45*time.Second) })
	nm.step("every member keeps its snapshot of the new level as a checkpoint", nm.awaitCheckpoints)
	nm.probeAll("all upgraded")
	l, err := nm.currentLeader()
	if err != nil {
		nm.r.problem("rolling upgrade: %v", err)
		return
	}
	f := harness.Except(nm.r.memberNodes(), l)[0]
	ctx := context.Background()
	ok := nm.step("stop the follower "+f.ID+" (SIGTERM), remove it and wipe its data", func() error {
		if err := nm.r.stopNode(f); err != nil {
			return err
		}
		return nm.removeVoter(ctx, f)
	}) && nm.step("let the leader compact its log", nm.awaitCompaction) &&
		nm.step("join "+f.ID+" again: it is sent the leader's store files", func() error { return nm.joinWiped(ctx, f, "", true) })
	if ok {
		nm.probeAll("a follower sent the leader's store files")
	}
}

// joinWiped joins n again with an empty data directory, on binary ("" for
// the build under test), once the leader has compacted its log: it must
// catch up by installing a snapshot, as the leader's store files
// (storeFiles, from cluster level 4) or in the state machine's format.
func (nm *nemesis) joinWiped(ctx context.Context, n *harness.Node, binary string, storeFiles bool) error {
	n.Binary = binary
	if err := nm.addVoter(ctx, n); err != nil {
		return err
	}
	if err := nm.awaitCaughtUp(n); err != nil {
		return err
	}
	log := n.LogSinceStart()
	if !strings.Contains(log, "Installed remote snapshot") {
		return fmt.Errorf("%s caught up without installing a snapshot; log tail:\n%s", n.ID, lastLines(log, 10))
	}
	if got := strings.Contains(log, storeFilesInstalled); got != storeFiles {
		return fmt.Errorf("%s installed a snapshot sent as store files: %v, want %v (its snapshots: %s); log tail:\n%s",
			n.ID, got, storeFiles, snapshotFormats(n.DataDir), lastLines(log, 10))
	}
	return nil
}

// storeFilesInstalled is what a node logs when it installed a snapshot
// sent as the leader's store files.
const storeFilesInstalled = "installed the state store received"

// expectNoArchives reports a member that keeps a snapshot it was sent as
// the leader's store files (level 4) while the cluster is below that
// level: a baseline build could not read one.
func (nm *nemesis) expectNoArchives(while string) {
	for _, n := range nm.r.memberNodes() {
		k, err := snapshotsStarting(n.DataDir, archiveMagic)
		if err != nil {
			nm.r.problem("%s's snapshots %s: %v", n.ID, while, err)
		} else if k > 0 {
			nm.r.problem("%s keeps %d snapshots sent as store files %s, which the baseline cannot read", n.ID, k, while)
		}
	}
}

// awaitCheckpoints waits until every member keeps a snapshot as a
// checkpoint: each takes a snapshot in the new level's format once it has
// applied the level.
func (nm *nemesis) awaitCheckpoints() error {
	return poll(context.Background(), 30*time.Second, 250*time.Millisecond, func() error {
		for _, n := range nm.r.memberNodes() {
			if k, err := snapshotsStarting(n.DataDir, checkpointMagic); err != nil || k == 0 {
				return fmt.Errorf("%s keeps no snapshot as a checkpoint (%v); its snapshots: %s", n.ID, err, snapshotFormats(n.DataDir))
			}
		}
		return nil
	})
}

// snapshotsStarting counts the finished snapshots of a data directory
// whose state.bin starts with magic: checkpointMagic for those kept as
// checkpoints of the state store, archiveMagic for those sent as store
// files.
func snapshotsStarting(dataDir, magic string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "state.bin"))
	if err != nil {
		return 0, err
	}
	k := 0
	for _, p := range files {
		if strings.HasSuffix(filepath.Dir(p), ".tmp") {
			continue
		}
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed as a newer one was finished
		}
		if err != nil {
			return 0, err
		}
		if bytes.HasPrefix(b, []byte(magic)) {
			k++
		}
	}
	return k, nil
}

// rejoinOnBaseline upgrades the followers, then wipes the baseline leader
// and joins it again on the baseline.
func (nm *nemesis) rejoinOnBaseline() {
	r := nm.r
	if !nm.step("the baseline's level becomes active", nm.awaitBaselineLevel) {
		return
	}
	l, err := nm.currentLeader()
	if err != nil {
		r.problem("rejoin: %v", err)
		return
	}
	for _, n := range harness.Except(r.memberNodes(), l) {
		if !nm.step("upgrade the follower "+n.ID, func() error { return nm.swap(n, "", false) }) {
			return
		}
	}
	old := l
	ctx := context.Background()
	ok := nm.step("stop the baseline leader "+old.ID+" (SIGTERM), remove it and wipe its data", func() error {
		if err := r.stopNode(old); err != nil {
			return err
		}
		return nm.removeVoter(ctx, old)
	}) && nm.step("let the upgraded leader compact its log", nm.awaitCompaction) &&
		nm.step("join "+old.ID+" again on the baseline: a snapshot from an upgraded leader", func() error {
			return nm.joinWiped(ctx, old, r.baseline, false)
		})
	if !ok {
		return
	}
	nm.probeAll("a baseline follower of an upgraded leader")
	// The configuration settles; the level must not rise past the
	// baseline member.
	sleepCtx(ctx, 12*time.Second)
	nm.r.expectLevel(baselineLevel, "with "+old.ID+" on the baseline")
}

// awaitCompaction waits until the leader has committed enough entries past
// now, and long enough, to have taken a snapshot and compacted its log (a
// node's log starts again from its first segment after a restart), so a
// joiner must be sent a snapshot: compactOften's threshold, twice over,
// and two snapshot intervals.
func (nm *nemesis) awaitCompaction() error {
	r := nm.r
	l, err := nm.currentLeader()
	if err != nil {
		return err
	}
	s, err := r.status(l, false)
	if err != nil {
		return err
	}
	from, began := s.CommitIndex, time.Now()
	return poll(context.Background(), 30*time.Second, 250*time.Millisecond, func() error {
		s, err := r.status(l, false)
		if err != nil {
			return err
		}
		if s.CommitIndex < from+2*compactThreshold+compactTrailing || time.Since(began) < 3*time.Second {
			return fmt.Errorf("leader %s at commit index %d, from %d", l.ID, s.CommitIndex, from)
		}
		return nil
	})
}

// downgrade waits for the new level, then starts the baseline on a
// member's data directory and as a joiner.
func (nm *nemesis) downgrade() {
	r := nm.r
	ctx := context.Background()
	if !nm.step("the new level becomes active", func() error { return nm.r.awaitLevel(buildLevel, buildLevel, 45*time.Second) }) {
		return
	}
	l, err := nm.currentLeader()
	if err != nil {
		r.problem("downgrade: %v", err)
		return
	}
	followers := harness.Except(r.memberNodes(), l)
	f, g := followers[0], followers[1]
	ok := nm.step("start the baseline on the data of "+f.ID, func() error { return nm.refusedDowngrade(f) }) &&
		nm.step("start "+f.ID+" again on the build under test", func() error {
			f.Binary = ""
			if err := r.startNode(f); err != nil {
				return err
			}
			return nm.awaitCaughtUp(f)
		}) &&
		nm.step("remove "+g.ID+", wipe it and join it on the baseline: refused", func() error {
			if err := nm.removeVoter(ctx, g); err != nil {
				return err
			}
			return nm.refusedJoin(g)
		}) &&
		nm.step("join "+g.ID+" on the build under test", func() error { return nm.addVoter(ctx, g) })
	if ok {
		nm.probeAll("after the refused downgrades")
	}
}

// refusedDowngrade stops f and starts the baseline on its data, which must
// exit non-zero within 30 s, without a panic, leaving the log and the
// snapshots as they were.
func (nm *nemesis) refusedDowngrade(f *harness.Node) error {
	r := nm.r
	if err := r.stopNode(f); err != nil {
		return err
	}
	before, err := hashTree(f.DataDir, "raft-log", "snapshots")
	if err != nil {
		return err
	}
	formats := snapshotFormats(f.DataDir)
	f.Binary = r.baseline
	if err := r.startNode(f); err != nil {
		return err
	}
	code, err := f.Wait(30 * time.Second)
	if err != nil {
		_ = r.killNode(f)
		return fmt.Errorf("the baseline ran on a data directory at level %d (snapshots: %s): %w; log tail:\n%s", buildLevel, formats, err, lastLines(f.LogSinceStart(), 10))
	}
	r.net.SetDown(f.ID, true)
	log := f.LogSinceStart()
	if p := panicLine.FindString(log); p != "" {
		return fmt.Errorf("the baseline panicked on a data directory at level %d: %s", buildLevel, p)
	}
	if code == 0 {
		return fmt.Errorf("the baseline exited 0 on a data directory at level %d; log tail:\n%s", buildLevel, lastLines(log, 10))
	}
	if line := harness.ServeFailedLine.FindString(log); !downgradeRefusal.MatchString(line) {
		return fmt.Errorf("the baseline's refusal does not name the level: %q", line)
	}
	after, err := hashTree(f.DataDir, "raft-log", "snapshots")
	if err != nil {
		return err
	}
	if changed := diffTrees(before, after); len(changed) > 0 {
		return fmt.Errorf("the refused baseline changed %s", strings.Join(changed, ", "))
	}
	r.rec.Note("downgrade", fmt.Sprintf("baseline on %s exited %d: %s", f.ID, code, lastLines(log, 1)))
	return nil
}

// refusedJoin starts the baseline on g's wiped data with --join: the
// leader must refuse it, naming both levels, and leave the configuration
// as it is.
func (nm *nemesis) refusedJoin(g *harness.Node) error {
	r := nm.r
	g.Binary = r.baseline
	if err := r.startNode(g, "--join", harness.JoinList(r.memberNodes()...)); err != nil {
		return err
	}
	err := poll(context.Background(), 30*time.Second, 250*time.Millisecond, func() error {
		if levelRefusal.MatchString(g.LogSinceStart()) {
			return nil
		}
		if !g.Alive() {
			return fmt.Errorf("%w: %s exited (%s)", harness.ErrPermanent, g.ID, exitState(g))
		}
		return fmt.Errorf("no refusal naming both levels in the log of %s", g.ID)
	})
	if err != nil {
		return fmt.Errorf("%w; log tail:\n%s", err, lastLines(g.LogSinceStart(), 10))
	}
	if g.Alive() {
		if err := r.killNode(g); err != nil {
			return err
		}
	}
	v, err := nm.voters()
	if err != nil {
		return err
	}
	if contains(v, g.ID) {
		return fmt.Errorf("%s became a voter although it was refused: %v", g.ID, v)
	}
	g.Binary = ""
	return nil
}

// awaitBaselineLevel waits until every member, on the baseline, has
// raised the cluster to the baseline's level: a build refuses a data
// directory more than one level below its own.
func (nm *nemesis) awaitBaselineLevel() error {
	return nm.r.awaitLevel(baselineLevel, baselineLevel, 45*time.Second)
}

// awaitLevel waits until every member reports want as the active level,
// speaks the level speaks and sees every member's level and version.
func (r *run) awaitLevel(want, speaks uint32, timeout time.Duration) error {
	return poll(context.Background(), timeout, 500*time.Millisecond, func() error {
		for _, n := range r.memberNodes() {
			s, err := r.status(n, false)
			if err != nil {
				return err
			}
			if s.ActiveLevel != want || s.Level != speaks || s.BuildVersion == "" {
				return fmt.Errorf("%s: active level %d (want %d), level %d, build version %q", n.ID, s.ActiveLevel, want, s.Level, s.BuildVersion)
			}
			for _, m := range s.Nodes {
				if m.Level != speaks || m.BuildVersion == "" {
					return fmt.Errorf("%s sees member %s at level %d, build version %q", n.ID, m.ID, m.Level, m.BuildVersion)
				}
			}
		}
		return nil
	})
}

// expectLevel checks that no running member reports an active level other
// than want.
func (r *run) expectLevel(want uint32, while string) {
	for _, n := range r.memberNodes() {
		s, err := r.status(n, false)
		if err != nil {
			continue // the drain checks reachability
		}
		if s.ActiveLevel != want {
			r.problem("%s reports active level %d %s; want %d", n.ID, s.ActiveLevel, while, want)
		}
	}
}

// checkEndLevel checks the active level a converged walk ends with: the
// build's level once every member runs it, the baseline's while one runs
// the baseline.
func (r *run) checkEndLevel() {
	switch r.sc.Nemesis {
	case NemesisUpgrade, NemesisDowngrade:
		if err := r.awaitLevel(buildLevel, buildLevel, 30*time.Second); err != nil {
			r.problem("at the end: %v", err)
		}
	case NemesisRejoin:
		r.expectLevel(baselineLevel, "at the end, with a member on the baseline")
	}
}

// probeAll sends every kind of write through every member.
func (nm *nemesis) probeAll(phase string) {
	for _, n := range nm.r.memberNodes() {
		desc := fmt.Sprintf("every kind of write through %s (%s)", n.ID, phase)
		nm.step(desc, func() error { return nm.probe(n) })
	}
}

// checkNoCrash reports any node that panicked and, with exits, members
// that exited without the suite stopping them (other nemeses restart what
// they stop or refuse on purpose, so only the scripted walks ask).
func (r *run) checkNoCrash(exits bool) {
	for _, n := range r.slots {
		if how := n.UnexpectedExit(); exits && how != "" && r.isMember(n.ID) {
			r.problem("%s exited on its own: %s; log tail:\n%s", n.ID, how, lastLines(n.LogSinceStart(), 10))
		}
		if p := panicLine.FindString(n.Log()); p != "" {
			r.problem("%s panicked: %s", n.ID, p)
		}
	}
}

// snapshotFormats lists a data directory's snapshots with the format
// version their state says, for messages.
func snapshotFormats(dataDir string) string {
	dirs, err := filepath.Glob(filepath.Join(dataDir, "snapshots", "*", "state.bin"))
	if err != nil || len(dirs) == 0 {
		return "none"
	}
	var out []string
	for _, p := range dirs {
		b := make([]byte, 32)
		f, err := os.Open(p)
		if err != nil {
			out = append(out, filepath.Base(filepath.Dir(p))+": "+err.Error())
			continue
		}
		k, _ := f.Read(b)
		_ = f.Close()
		const magic, checkpoint = "HOLDFAST-SNAP", checkpointMagic
		v := "unreadable"
		switch {
		case k > len(magic) && string(b[:len(magic)]) == magic:
			v = fmt.Sprintf("format %d", b[len(magic)])
		case k > len(checkpoint) && string(b[:len(checkpoint)]) == checkpoint:
			v = "a checkpoint of the state store (level 3)"
		case k > len(archiveMagic) && string(b[:len(archiveMagic)]) == archiveMagic:
			v = "the leader's store files (level 4)"
		}
		out = append(out, filepath.Base(filepath.Dir(p))+" "+v)
	}
	return strings.Join(out, ", ")
}

// hashTree returns the SHA-256 of every file under the named
// subdirectories of dir, by path.
func hashTree(dir string, subdirs ...string) (map[string]string, error) {
	out := map[string]string{}
	for _, sub := range subdirs {
		err := filepath.WalkDir(filepath.Join(dir, sub), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			out[p] = hex.EncodeToString(sum[:])
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("hash %s: %w", filepath.Join(dir, sub), err)
		}
	}
	return out, nil
}

// diffTrees names the files of before that changed or went, and the files
// that appeared.
func diffTrees(before, after map[string]string) []string {
	var out []string
	for p, sum := range before {
		switch a, ok := after[p]; {
		case !ok:
			out = append(out, p+" (removed)")
		case a != sum:
			out = append(out, p+" (changed)")
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			out = append(out, p+" (created)")
		}
	}
	slices.Sort(out)
	return out
}

// probe sends every kind of write the build under test offers through via:
// lease acquire, renew, complete, a completed lease's result, a blocking
// acquire handed over by a release; a queue's creation, enqueue, claim,
// renew, ack, release with a delay, releases until the job fails, its
// retry; and the cluster settings. Each must succeed.
func (nm *nemesis) probe(via *harness.Node) error {
	r := nm.r
	nm.probes++
	tag := fmt.Sprintf("%s-%d", via.ID, nm.probes)
	call := func(what, method, path string, body any, token string, wait time.Duration, want int) (Answer, error) {
		var a Answer
		err := poll(context.Background(), 20*time.Second, 250*time.Millisecond, func() error {
			a = r.client.DoWaiting(context.Background(), wait, via.HTTPAddr, method, path, body, token)
			switch {
			case a.Status == want:
				return nil
			case a.Classify() == NotApplied:
				return fmt.Errorf("%s: not applied: HTTP %d %.200s %v", what, a.Status, a.Raw, a.Err)
			}
			return fmt.Errorf("%w: %s: HTTP %d, want %d: %.300s %v", harness.ErrPermanent, what, a.Status, want, a.Raw, a.Err)
		})
		return a, err
	}
	ns, err := call("create a namespace", http.MethodPost, apiPrefix+"/lease/namespace", map[string]any{}, "", 0, http.StatusOK)
	if err != nil {
		return err
	}
	// lease is an acquire's body; owned an owner's (renew, release,
	// complete), which names no fingerprint.
	owned := func(key, token string, extra map[string]any) map[string]any {
		b := map[string]any{"namespace": ns.Body.Namespace, "key": key}
		if token != "" {
			b["owner_token"] = token
		} else {
			b["fingerprint"] = "fp-" + key
		}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	lease := func(key string, extra map[string]any) map[string]any { return owned(key, "", extra) }
	// acquire, renew, complete; the result is kept.
	k1 := "probe-done-" + tag
	a, err := call("acquire", http.MethodPost, apiPrefix+"/lease", lease(k1, map[string]any{"ttl_seconds": 30}), "", 0, http.StatusCreated)
	if err != nil {
		return err
	}
	if err := nm.fenceGrew("acquire", a.Body.FencingToken); err != nil {
		return err
	}
	if _, err := call("renew", http.MethodPost, apiPrefix+"/lease/renew", owned(k1, a.Body.OwnerToken, map[string]any{"ttl_seconds": 30}), "", 0, http.StatusOK); err != nil {
		return err
	}
	result := map[string]any{"result": map[string]any{"probe": tag}}
	if _, err := call("complete", http.MethodPost, apiPrefix+"/lease/complete", owned(k1, a.Body.OwnerToken, result), "", 0, http.StatusOK); err != nil {
		return err
	}
	a, err = call("acquire a completed lease", http.MethodPost, apiPrefix+"/lease", lease(k1, map[string]any{"ttl_seconds": 30}), "", 0, http.StatusOK)
	if err != nil {
		return err
	}
	if a.Body.Status != "completed" || !strings.Contains(string(a.Body.Result), tag) {
		return fmt.Errorf("acquire a completed lease: %.300s, want status completed and the stored result", a.Raw)
	}
	// A blocking acquire, handed the lease by a release.
	k2 := "probe-wait-" + tag
	a, err = call("acquire", http.MethodPost, apiPrefix+"/lease", lease(k2, map[string]any{"ttl_seconds": 30}), "", 0, http.StatusCreated)
	if err != nil {
		return err
	}
	if err := nm.fenceGrew("acquire", a.Body.FencingToken); err != nil {
		return err
	}
	waited := make(chan Answer, 1)
	go func() {
		waited <- r.client.DoWaiting(context.Background(), 15*time.Second, via.HTTPAddr, http.MethodPost, apiPrefix+"/lease",
			lease(k2, map[string]any{"ttl_seconds": 30, "wait_seconds": 15}), "")
	}()
	time.Sleep(300 * time.Millisecond)
	if _, err := call("release", http.MethodPost, apiPrefix+"/lease/release", owned(k2, a.Body.OwnerToken, nil), "", 0, http.StatusOK); err != nil {
		return err
	}
	w := <-waited
	if w.Status != http.StatusCreated || w.Body.OwnerToken == "" {
		return fmt.Errorf("blocking acquire: HTTP %d %.300s %v, want 201 with an owner token", w.Status, w.Raw, w.Err)
	}
	if err := nm.fenceGrew("blocking acquire", w.Body.FencingToken); err != nil {
		return err
	}
	if err := nm.probeSlots(via, tag, ns.Body.Namespace, k2, w.Body.OwnerToken); err != nil {
		return err
	}
	if _, err := call("release", http.MethodPost, apiPrefix+"/lease/release", owned(k2, w.Body.OwnerToken, nil), "", 0, http.StatusOK); err != nil {
		return err
	}
	if err := nm.probeQueue(call); err != nil {
		return err
	}
	settings := map[string]int64{"visibility_min_seconds": 1, "queue_max_jobs": 5000, "queues_per_client": 1000}
	_, err = call("PUT /cluster/settings", http.MethodPut, "/cluster/settings", settings, "", 0, http.StatusOK)
	return err
}

// probeCall is the probe's request helper: it retries answers that say
// nothing was applied and fails on any status but want.
type probeCall func(what, method, path string, body any, token string, wait time.Duration, want int) (Answer, error)

// probeQueue is the queue part of probe.
func (nm *nemesis) probeQueue(call probeCall) error {
	q, err := call("create a queue", http.MethodPost, apiPrefix+"/queue", map[string]any{}, "", 0, http.StatusCreated)
	if err != nil {
		return err
	}
	base := apiPrefix + "/queue/" + q.Body.QueueID
	write, worker := q.Body.WriteToken, q.Body.WorkerToken
	for _, key := range []string{"a", "b"} {
		if _, err := call("enqueue", http.MethodPost, base+"/jobs", map[string]any{"job_key": key, "payload": map[string]any{"key": key}}, write, 0, http.StatusCreated); err != nil {
			return err
		}
	}
	claim := func() (*JobAnswer, error) {
		a, err := call("claim", http.MethodPost, base+"/claim", map[string]any{"visibility_timeout": 30, "wait_seconds": 5}, worker, 5*time.Second, http.StatusOK)
		if err != nil {
			return nil, err
		}
		if a.Body.Job == nil || a.Body.Job.Receipt == "" {
			return nil, fmt.Errorf("claim: no job: %.300s", a.Raw)
		}
		return a.Body.Job, nil
	}
	action := func(j *JobAnswer, act string, extra map[string]any) (Answer, error) {
		body := map[string]any{"receipt": j.Receipt}
		for k, v := range extra {
			body[k] = v
		}
		return call(act, http.MethodPost, base+"/jobs/"+j.JobID+"/"+act, body, worker, 0, http.StatusOK)
	}
	j, err := claim()
	if err != nil {
		return err
	}
	if _, err := action(j, "renew", map[string]any{"visibility_timeout": 30}); err != nil {
		return err
	}
	if _, err := action(j, "ack", nil); err != nil {
		return err
	}
	if j, err = claim(); err != nil {
		return err
	}
	if _, err := action(j, "release", map[string]any{"delay_seconds": 1}); err != nil {
		return err
	}
	// Released until its attempts run out, then retried.
	failed := false
	for i := 0; i < nm.r.maxAttempts+1 && !failed; i++ {
		if j, err = claim(); err != nil {
			return err
		}
		a, err := action(j, "release", nil)
		if err != nil {
			return err
		}
		failed = a.Body.Job != nil && a.Body.Job.Status == "failed"
	}
	if !failed {
		return fmt.Errorf("job %s not failed after %d releases", j.JobID, nm.r.maxAttempts+1)
	}
	a, err := call("retry", http.MethodPost, base+"/jobs/"+j.JobID+"/retry", map[string]any{}, write, 0, http.StatusOK)
	if err != nil {
		return err
	}
	if a.Body.Job == nil || a.Body.Job.Status != "pending" {
		return fmt.Errorf("retry: %.300s, want the job pending", a.Raw)
	}
	if j, err = claim(); err != nil {
		return err
	}
	_, err = action(j, "ack", nil)
	return err
}

// probeSlots sends the two writes of level 2: an acquire of three slots,
// and a checkpoint of a single-slot lease the probe holds (owner). While a
// member runs a baseline below level 2 each must be refused with nothing
// written (503 naming the cluster level; such a baseline node knows
// neither the field nor the route); once every member speaks level 2 each
// succeeds, whichever build serves it.
func (nm *nemesis) probeSlots(via *harness.Node, tag, ns, key, owner string) error {
	mixed := len(nm.onBaseline()) > 0 && baselineLevel < slotsLevel
	err := nm.probeLevelWrite(via, mixed, "acquire of three slots", "/lease", http.StatusCreated, http.StatusBadRequest,
		map[string]any{"namespace": ns, "key": "probe-slots-" + tag, "slots": 3, "ttl_seconds": 30})
	if err != nil {
		return err
	}
	return nm.probeLevelWrite(via, mixed, "checkpoint", "/lease/checkpoint", http.StatusOK, http.StatusNotFound,
		map[string]any{"namespace": ns, "key": key, "owner_token": owner, "checkpoint": map[string]any{"probe": tag}})
}

// probeLevelWrite sends one write of the build's level through via: ok
// is its status once every member runs the build; in mixed versions it
// must be refused, 503 naming the cluster level, or onBaseline from a
// baseline node.
func (nm *nemesis) probeLevelWrite(via *harness.Node, mixed bool, what, path string, ok, onBaseline int, body map[string]any) error {
	r := nm.r
	return poll(context.Background(), 20*time.Second, 250*time.Millisecond, func() error {
		a := r.client.DoWaiting(context.Background(), 0, via.HTTPAddr, http.MethodPost, apiPrefix+path, body, "")
		switch {
		case !mixed && a.Status == ok && ok == http.StatusCreated:
			return nm.fenceGrew(what, a.Body.FencingToken)
		case !mixed && a.Status == ok:
			return nil
		case mixed && a.Status == http.StatusServiceUnavailable && strings.Contains(a.Body.Error, "cluster level"):
			return nil
		case mixed && via.Binary != "" && a.Status == onBaseline:
			return nil
		case a.Classify() == NotApplied:
			return fmt.Errorf("%s: not applied: HTTP %d %.200s %v", what, a.Status, a.Raw, a.Err)
		}
		return fmt.Errorf("%w: %s (mixed versions %v): HTTP %d: %.300s %v", harness.ErrPermanent, what, mixed, a.Status, a.Raw, a.Err)
	})
}

// fenceGrew checks that a granted fencing token is above every one the
// probes saw before.
func (nm *nemesis) fenceGrew(what string, fence int64) error {
	if fence <= nm.lastFence {
		return fmt.Errorf("%s: fencing token %d, not above %d granted earlier", what, fence, nm.lastFence)
	}
	nm.lastFence = fence
	return nil
}
