//go:build unix

package fault

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/holdfast/holdfast/test/faultfs"
	"github.com/holdfast/holdfast/test/harness"
)

// The disk nemeses need every node's data directory served through
// faultfs (test/faultfs): power cuts that drop what was not synced, and
// calls held or failed on chosen files.
const (
	// NemesisPower cuts the power of every member at once, or of one
	// member: SIGKILL, then every write not made durable is dropped, then
	// they start again.
	NemesisPower = "power"
	// NemesisDiskStall holds the log's fsyncs of the leader, or of a
	// follower, for 10 to 30 s.
	NemesisDiskStall = "disk-stall"
	// NemesisDiskEIO fails a write, an fsync or a read of the log, a
	// snapshot or raft.db with EIO.
	NemesisDiskEIO = "disk-eio"
)

// onDisks reports whether a nemesis needs the data directories on faultfs.
func onDisks(nemesis string) bool {
	return nemesis == NemesisPower || nemesis == NemesisDiskStall || nemesis == NemesisDiskEIO
}

// unmountDisks releases the mounts; it runs as a cleanup registered before
// the cluster's, so after the cluster's processes are killed.
func (r *run) unmountDisks() {
	for id, fs := range r.disks {
		if err := fs.Unmount(); err != nil {
			r.t.Errorf("unmount %s's data directory: %v", id, err)
		}
	}
}

// mountDisks serves each node's data directory through faultfs, its files
// kept in a backing directory under root.
func (r *run) mountDisks(root string) {
	for _, n := range r.c.Nodes() {
		backing, shadow := filepath.Join(root, "backing", n.ID), filepath.Join(root, "shadow", n.ID)
		for _, d := range []string{backing, n.DataDir} {
			if err := os.MkdirAll(d, 0o700); err != nil {
				r.t.Fatalf("create %s: %v", d, err)
			}
		}
		fs, err := faultfs.Mount(backing, n.DataDir, shadow, faultfs.Options{})
		if err != nil {
			r.t.Fatalf("serve %s's data directory through faultfs: %v", n.ID, err)
		}
		r.disks[n.ID] = fs
	}
}

// power cuts the power of every running member at once, or (every fourth
// cut, the second first) of one of them: SIGKILL, then each one's writes
// not made durable are dropped. They start again when healed.
func (nm *nemesis) power() *fault {
	r := nm.r
	members := nm.runningMembers()
	if len(members) == 0 {
		return nil
	}
	nm.powerCuts++
	victims, scope := members, "every member"
	if nm.powerCuts%4 == 2 {
		victims, scope = members[:1], "one member"
	} else {
		nm.wholeCuts++
	}
	var ids []string
	for _, n := range victims {
		ids = append(ids, n.ID)
		if err := r.killNode(n); err != nil {
			r.problem("power: kill %s: %v", n.ID, err)
		}
	}
	for _, n := range victims {
		if err := r.disks[n.ID].PowerLoss(); err != nil {
			r.problem("power: drop %s's unsynced writes: %v", n.ID, err)
		}
	}
	return &fault{
		desc: fmt.Sprintf("power lost on %s (%s)", scope, strings.Join(ids, ", ")),
		hold: between(nm.rng, 300*time.Millisecond, time.Second),
		heal: func() {
			for _, n := range victims {
				if err := r.startNode(n); err != nil {
					r.problem("power: start %s again: %v", n.ID, err)
				}
			}
			for _, n := range victims {
				if err := nm.awaitCaughtUp(n); err != nil {
					r.problem("power: after the power came back, %v", err)
				}
			}
		},
	}
}

// checkPower reports a power run with too few cuts of every member to
// count (the nemesis runs as long as the clients, less the tail).
func (nm *nemesis) checkPower() {
	if nm.r.sc.Nemesis != NemesisPower {
		return
	}
	nm.r.note(fmt.Sprintf("power: %d cuts of every member, %d of one member", nm.wholeCuts, nm.powerCuts-nm.wholeCuts))
	if nm.wholeCuts < 3 || nm.powerCuts-nm.wholeCuts < 1 {
		nm.r.problem("power: %d cuts of every member and %d of one member in the run; it must have at least 3 and 1", nm.wholeCuts, nm.powerCuts-nm.wholeCuts)
	}
}

// diskStall holds every fsync of the log's files on the leader, or (every
// other stall) on a follower, for 10 to 30 s, then lets them go. While the
// leader's log cannot be made durable the others must elect a leader and
// take writes; the outage column gives how long writes waited.
func (nm *nemesis) diskStall() *fault {
	r := nm.r
	n := r.leader()
	role := "the leader"
	if nm.stalls%2 == 1 || n == nil {
		role = "a follower"
		n = nil
		for _, m := range nm.runningMembers() {
			if st, err := r.status(m, false); err == nil && st.State != "leader" {
				n = m
				break
			}
		}
	}
	if n == nil {
		return nil
	}
	nm.stalls++
	fs := r.disks[n.ID]
	id, err := fs.Add(faultfs.Rule{Op: faultfs.OpFsync, Path: "raft-log/*", Stall: faultfs.UntilCleared})
	if err != nil {
		r.problem("disk-stall: %v", err)
		return nil
	}
	return &fault{
		desc: fmt.Sprintf("the log's fsyncs held on %s, %s", n.ID, role),
		hold: between(nm.rng, 10*time.Second, 30*time.Second),
		heal: func() {
			st, _ := fs.Stats(id)
			fs.Clear(id)
			r.note(fmt.Sprintf("disk-stall on %s (%s): %d fsyncs held, then released", n.ID, role, st.Held))
			if err := nm.awaitCaughtUp(n); err != nil {
				r.problem("disk-stall: after the stall, %v", err)
			}
		},
	}
}

// eioTarget is a call disk-eio fails, what the operator is told it is, and
// what makes the node make that call while the rule stands.
type eioTarget struct {
	op      faultfs.Op
	path    string
	what    string
	trigger string
}

// Triggers of an eioTarget: the node makes the call by itself (log appends,
// and snapshots, which the disk-eio scenarios take often), or only when it
// starts (reads of its files), or when the term changes (raft.db).
const (
	byItself   = ""
	byRestart  = "restart"
	byElection = "election"
)

// eioTargets are every call the disk-eio nemesis fails, in turn.
func eioTargets() []eioTarget {
	var out []eioTarget
	for _, file := range []struct{ path, what, writes string }{
		{"raft-log/*", "the log", byItself},
		{"snapshots/*/state.bin", "a snapshot", byItself},
		{"raft.db", "raft.db", byElection},
	} {
		for _, op := range []struct {
			op   faultfs.Op
			what string
		}{{faultfs.OpWrite, "a write"}, {faultfs.OpFsync, "an fsync"}, {faultfs.OpRead, "a read"}} {
			trigger := file.writes
			if op.op == faultfs.OpRead {
				trigger = byRestart
			}
			out = append(out, eioTarget{op: op.op, path: file.path, what: op.what + " of " + file.what, trigger: trigger})
		}
	}
	return out
}

// diskEIO fails the next call of one kind on one member's files with EIO
// (every read of the file, until healed),
// in turn every kind eioTargets lists, and makes the member make that
// call. When healed the rule goes; a member that exited or reports its
// storage unusable is started again, as an operator would once the disk is
// replaced. A member that kept serving after the failure must have answered
// as if nothing failed (the checkers see to that).
func (nm *nemesis) diskEIO() *fault {
	r := nm.r
	members := nm.runningMembers()
	if len(members) == 0 {
		return nil
	}
	n := members[0]
	if l := r.leader(); l != nil && nm.eios%2 == 0 {
		n = l
	}
	targets := eioTargets()
	tg := targets[(r.sc.Turn+nm.eios)%len(targets)]
	nm.eios++
	fs := r.disks[n.ID]
	// A write or sync fails once; a read fails until the rule goes (the
	// kernel retries a failed read ahead, so once is often absorbed).
	times := 1
	if tg.op == faultfs.OpRead {
		times = 0
	}
	id, err := fs.Add(faultfs.Rule{Op: tg.op, Path: tg.path, Err: syscall.EIO, Times: times})
	if err != nil {
		r.problem("disk-eio: %v", err)
		return nil
	}
	desc := fmt.Sprintf("EIO on %s on %s", tg.what, n.ID)
	switch tg.trigger {
	case byRestart:
		desc += ", restarted"
		if err := r.killNode(n); err != nil {
			r.problem("disk-eio: kill %s: %v", n.ID, err)
		}
		if err := r.startNode(n); err != nil {
			r.problem("disk-eio: start %s: %v", n.ID, err)
		}
	case byElection:
		if l := r.leader(); l != nil {
			desc += ", the leader " + l.ID + " paused for a new term"
			if err := l.Pause(); err != nil {
				r.problem("disk-eio: pause %s: %v", l.ID, err)
			} else {
				time.Sleep(2500 * time.Millisecond)
				if err := l.Resume(); err != nil {
					r.problem("disk-eio: resume %s: %v", l.ID, err)
				}
			}
		}
	}
	return &fault{
		desc: desc,
		hold: between(nm.rng, 2*time.Second, 4*time.Second),
		heal: func() {
			st, _ := fs.Stats(id)
			fs.Clear(id)
			if st.Hits == 0 {
				r.note(fmt.Sprintf("disk-eio on %s: no call to fail on %s", n.ID, tg.what))
				if !n.Alive() {
					_ = r.startNode(n)
				}
				return
			}
			outcome := nm.afterEIO(n)
			r.note(fmt.Sprintf("disk-eio on %s: %s: %s", n.ID, tg.what, outcome))
			if err := nm.awaitCaughtUp(n); err != nil {
				r.problem("disk-eio: after EIO on %s, %v", tg.what, err)
			}
		},
	}
}

// afterEIO says what a member did with a failed call and brings it back:
// one that exits is started again, and so is one whose /readyz reports its
// storage unusable. A member that halts closes its listener before it
// exits, so it is given a few seconds to show which it does.
func (nm *nemesis) afterEIO(n *harness.Node) string {
	r := nm.r
	var outcome string
	err := poll(context.Background(), 10*time.Second, 200*time.Millisecond, func() error {
		if !n.Alive() {
			outcome = "exited (" + firstWords(exitWords(n.LogSinceStart()), 48) + "), started again"
			return nil
		}
		a := r.ops.Do(context.Background(), n.HTTPAddr, http.MethodGet, "/readyz", nil, "")
		switch {
		case a.Err != nil:
			return fmt.Errorf("readyz of %s: %w", n.ID, a.Err) // stopping, or not serving yet
		case a.Status == http.StatusOK:
			outcome = "kept serving"
		default:
			outcome = fmt.Sprintf("reported it on /readyz (HTTP %d %s), restarted", a.Status, firstWords(string(a.Raw), 24))
			if err := r.killNode(n); err != nil {
				r.problem("disk-eio: kill %s: %v", n.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		r.problem("disk-eio: %s neither served, reported the fault nor exited: %v", n.ID, err)
		_ = r.killNode(n)
		outcome = "hung, killed"
	}
	if !n.Alive() {
		if err := r.startNode(n); err != nil {
			r.problem("disk-eio: start %s again: %v", n.ID, err)
		}
	}
	return outcome
}

// exitWords is the line of log saying why a node stopped, with the lines
// that follow it (an error may run over several), or its panic line.
func exitWords(log string) string {
	loc := harness.ServeFailedLine.FindStringIndex(log)
	if loc == nil {
		return panicLine.FindString(log)
	}
	lines := strings.SplitN(log[loc[0]:], "\n", 4)
	return strings.Join(lines[:min(len(lines), 3)], " ")
}

// firstWords is s cut to its first k words.
func firstWords(s string, k int) string {
	f := strings.Fields(s)
	if len(f) > k {
		f = append(f[:k], "…")
	}
	return strings.Join(f, " ")
}
