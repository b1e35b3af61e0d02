//go:build unix

package fault

import (
	"fmt"
	"strconv"
	"testing"
	"time"
)

func scenario(workload, nemesis string, nodes int, d time.Duration) Scenario {
	return Scenario{Name: fmt.Sprintf("%s-%s-n%d", workload, nemesis, nodes), Workload: workload, Nemesis: nemesis, Nodes: nodes, Duration: d}
}

// plantedBugs are the scenarios that must fail the checkers: one per
// planted bug, each built with its tag.
func plantedBugs() []Scenario {
	bug := func(tag, workload, nemesis string, d time.Duration, expect string) Scenario {
		sc := scenario(workload, nemesis, 3, d)
		sc.Name = "bug-" + tag[len("holdfast_bug_"):]
		sc.Tag, sc.ExpectViolation, sc.Expect = tag, true, expect
		return sc
	}
	return []Scenario{
		// Ack/release/renew with a superseded receipt: a worker that stalled
		// past its window acks after the job was claimed again.
		bug("holdfast_bug_superseded_receipt", WorkloadQueue, NemesisNone, 25*time.Second, "stale receipts accepted (two valid claims at once)"),
		// The leader acknowledges without Raft: a killed leader takes its
		// acknowledged writes with it, and replicas differ.
		bug("holdfast_bug_early_ack", WorkloadLease, NemesisKill, 30*time.Second, "fence order, lost completions, state hash divergence"),
		// Followers answer reads from their own state: a partitioned node
		// misses acknowledged acks and enqueues.
		bug("holdfast_bug_stale_read", WorkloadQueue, NemesisPartition, 35*time.Second, "stale reads"),
		// Restore resets the fencing counter: restarted nodes restore from
		// their snapshots (kill nemesis, a snapshot every few seconds).
		compactOften(bug("holdfast_bug_fence_reset", WorkloadLease, NemesisKill, 40*time.Second, "fence order, state hash divergence")),
		// Apply reads each replica's own clock (one node also runs with a
		// clock offset): replicas diverge.
		bug("holdfast_bug_local_clock", WorkloadLease, NemesisClock, 30*time.Second, "state hash divergence"),
		// A release hands the lease to its two longest waiters: both get a
		// grant with the same fence. Two keys for six workers, so a release
		// seldom finds fewer than two waiters.
		hotKeys(bug("holdfast_bug_double_handover", WorkloadLease, NemesisNone, 30*time.Second, "duplicate fences, overlapping grants")),
		// The level rises as soon as a new build leads, without waiting for
		// the members: the baseline member rejoining from an upgraded
		// leader cannot read its snapshot or its entries.
		compactOften(bug("holdfast_bug_level_gate", WorkloadLeaseQueue, NemesisRejoin, upgradeRun, "a baseline member that cannot follow, the level risen with a baseline member")),
		// An acquire of a multi-slot key is granted one slot more than the
		// key has.
		bug("holdfast_bug_slot_overgrant", WorkloadSlotsCheckpoint, NemesisNone, 25*time.Second, "overgrants, answers counting more holders than slots"),
		// A checkpoint is stored from an owner token that no longer holds
		// the key: a stalled or released holder overwrites its successor's
		// progress.
		bug("holdfast_bug_lost_checkpoint", WorkloadSlotsCheckpoint, NemesisNone, 25*time.Second, "Porcupine, stale owners accepted, checkpoints answered with another owner's fence"),
		// A new log segment is used before its directory is synced: a
		// power cut takes it, with the acknowledged entries in it. Small
		// segments, so the log starts one every few seconds, and no
		// snapshots, whose compaction would sync the directory.
		withArgs(bug("holdfast_bug_unsynced_rename", WorkloadQueue, NemesisPower, 35*time.Second, "nodes that cannot start again, lost acknowledged jobs"),
			"--test-log-segment-size", "8192", "--snapshot-threshold", "1000000", "--snapshot-interval", "1h"),
		// The log acknowledges an append before its fdatasync: a power
		// cut of every member takes the last acknowledged entries.
		bug("holdfast_bug_ack_before_sync", WorkloadQueue, NemesisPower, 35*time.Second, "lost acknowledged jobs"),
		killKeepsThePageCache(),
	}
}

// killKeepsThePageCache is the ack_before_sync bug under the kill nemesis,
// which must not see it: a killed process leaves what it wrote in the page
// cache, synced or not. That is why the power nemesis exists.
func killKeepsThePageCache() Scenario {
	sc := scenario(WorkloadQueue, NemesisKill, 3, 30*time.Second)
	sc.Name, sc.Tag = "bug-ack_before_sync-under-kill", "holdfast_bug_ack_before_sync"
	return sc
}

// upgradeRun is what the budget counts for an upgrade walk: the clients
// run until the walk ends.
const upgradeRun = 60 * time.Second

// upgrades are the rolling-upgrade scenarios, three nodes each.
func upgrades() []Scenario {
	var out []Scenario
	for _, nem := range []string{NemesisUpgrade, NemesisRejoin, NemesisDowngrade} {
		sc := scenario(WorkloadLeaseQueue, nem, 3, upgradeRun)
		if nem == NemesisRejoin {
			sc = compactOften(sc)
		}
		out = append(out, sc)
	}
	return out
}

// compactOften makes the leader snapshot and compact its log every few
// dozen entries, so a joiner is sent a snapshot.
func compactOften(sc Scenario) Scenario {
	return withArgs(sc, "--snapshot-threshold", strconv.Itoa(compactThreshold), "--trailing-logs", strconv.Itoa(compactTrailing))
}

// hotKeys makes the lease workload's workers share two keys per epoch.
func hotKeys(sc Scenario) Scenario {
	sc.Keys = 2
	return sc
}

// withTLS runs sc with TLS on every link.
func withTLS(sc Scenario) Scenario {
	sc.Name += "-tls"
	sc.TLS = true
	return sc
}

func withArgs(sc Scenario, args ...string) Scenario {
	sc.Args = append(sc.Args, args...)
	return sc
}

// teeth is the fenced workload with the store's fence check off: stale
// writers must visibly overwrite newer owners' writes.
func teeth(nodes int, d time.Duration) Scenario {
	sc := scenario(WorkloadNoFence, NemesisPause, nodes, d)
	sc.ExpectViolation, sc.Expect = true, "lost updates in the unfenced store"
	return sc
}

// matrix is the CI matrix: each workload under each relevant nemesis, with
// 3 or 5 nodes.
func matrix() []Scenario {
	const d = 40 * time.Second
	var out []Scenario
	out = append(out, teeth(3, 25*time.Second), withTLS(scenario(WorkloadFenced, NemesisMix, 3, d)))
	out = append(out, upgrades()...)
	// Each workload under each nemesis once, with 3 or 5 nodes in turn,
	// so every nemesis and every workload meets both sizes.
	k := 0
	add := func(workload, nemesis string) {
		out = append(out, scenario(workload, nemesis, 3+2*(k%2), d))
		k++
	}
	for _, n := range []string{NemesisPartition, NemesisKill, NemesisPause, NemesisMembership, NemesisMix, NemesisClockCrash, NemesisClock} {
		add(WorkloadLease, n)
		if n != NemesisMembership && n != NemesisClock && n != NemesisClockCrash {
			add(WorkloadFenced, n)
		}
		if n != NemesisClock && n != NemesisClockCrash {
			add(WorkloadQueue, n)
		}
	}
	// Lease slots and checkpoints, three nodes, shorter runs.
	for _, n := range []string{NemesisKill, NemesisPartition, NemesisPause, NemesisClock} {
		out = append(out, scenario(WorkloadSlotsCheckpoint, n, 3, slotsRun))
	}
	// Power cuts, stalled and failing disks (the data directories served
	// through faultfs): each nemesis under every workload, the sizes
	// alternating so each meets both.
	for i, wl := range []string{WorkloadLease, WorkloadQueue, WorkloadFenced, WorkloadSlotsCheckpoint} {
		for j, nem := range []string{NemesisPower, NemesisDiskStall, NemesisDiskEIO} {
			sc := scenario(wl, nem, 3+2*((i+j)%2), diskRun)
			if nem == NemesisDiskEIO {
				// Snapshots every few seconds, so a snapshot's write
				// and fsync meet their rule.
				sc = withArgs(sc, "--snapshot-threshold", "24", "--trailing-logs", "16")
				sc.Turn = 3 * i // four scenarios of three or four faults: every call
			}
			out = append(out, sc)
		}
	}
	// Last, so they never push the scenarios above out of the budget:
	// storage damage, three nodes, shorter runs (two or three faults each).
	for _, wl := range []string{WorkloadLease, WorkloadQueue} {
		out = append(out, scenario(wl, NemesisStorage, 3, storageRun))
	}
	return out
}

// slotsRun is how long the clients of a slots+checkpoint scenario run.
const slotsRun = 35 * time.Second

// diskRun is how long the clients of a power, disk-stall or disk-eio
// scenario run: room for four power cuts, or one or two stalls.
const diskRun = 40 * time.Second

// storageRun is how long the clients of a storage scenario run.
const storageRun = 30 * time.Second

// smoke is what `go test ./...` runs by default.
func smoke() []Scenario {
	return []Scenario{
		scenario(WorkloadLease, NemesisKill, 3, 20*time.Second),
		scenario(WorkloadQueue, NemesisPartition, 3, 20*time.Second),
		scenario(WorkloadFenced, NemesisPause, 3, 15*time.Second),
		withTLS(scenario(WorkloadLease, NemesisPartition, 3, 20*time.Second)),
	}
}

func skipUnlessSuite(t *testing.T) *suite {
	t.Helper()
	if testing.Short() {
		t.Skip("fault suite: skipped with -short")
	}
	if theSuite == nil {
		t.Fatal("fault suite: TestMain did not set up the suite")
	}
	return theSuite
}

// TestPlantedBugs proves the checkers can fail: each planted bug must be
// reported. The smoke runs one; the full matrix runs all of them.
func TestPlantedBugs(t *testing.T) {
	s := skipUnlessSuite(t)
	scs := plantedBugs()
	if !s.cfg.full {
		scs = scs[:1]
	}
	s.runScenarios(t, scs)
}

// TestFaultMatrix runs the workloads under the nemeses (the smoke subset
// unless a budget or the full matrix is asked for).
func TestFaultMatrix(t *testing.T) {
	s := skipUnlessSuite(t)
	scs := smoke()
	switch {
	case s.cfg.upgrades:
		scs = upgrades()
	case s.cfg.full:
		scs = matrix()
	}
	s.runScenarios(t, scs)
}
