//go:build unix

package fault

import (
	"testing"
	"time"
)

// grantSaw records a grant of key that returned checkpoint cp written by
// fence cpFence ("" for none).
func (h *histBuilder) grantSaw(proc int, key string, callMs, retMs int64, owner string, fence int64, cp string, cpFence int64) {
	h.add(proc, fAcquire, key, callMs, retMs, OK, LeaseInput{Kind: fAcquire, TTL: ttl},
		LeaseOutput{Status: stGranted, Owner: owner, Fence: fence, ExpTs: expTs(callMs), Checkpoint: cp, CheckpointFence: cpFence})
}

// checkpoint records a checkpoint write of value by owner: acknowledged
// (status checkpointed, answering fence), refused (lost), or with an
// unknown outcome (retMs -1).
func (h *histBuilder) checkpoint(proc int, key string, callMs, retMs int64, owner string, fence int64, value, status string, answered int64) {
	in := LeaseInput{Kind: fCheckpoint, Owner: owner, OwnerFence: fence, Checkpoint: value}
	switch {
	case retMs < 0:
		h.add(proc, fCheckpoint, key, callMs, retMs, Info, in, nil)
	case status == stLost:
		h.add(proc, fCheckpoint, key, callMs, retMs, OK, in, LeaseOutput{Status: stLost})
	default:
		h.add(proc, fCheckpoint, key, callMs, retMs, OK, in, LeaseOutput{Status: stCheckpointed, Fence: answered})
	}
}

func TestCheckpointCheckersAcceptACorrectHistory(t *testing.T) {
	var h histBuilder
	h.grantSaw(0, "k", 0, 10, "A", 1, "", 0)
	h.checkpoint(0, "k", 100, 110, "A", 1, `{"w":"a1"}`, stCheckpointed, 1)
	h.checkpoint(0, "k", 200, 210, "A", 1, `{"w":"a2"}`, stCheckpointed, 1)
	h.owner(0, fRelease, "k", 300, 310, "A", 1, "", LeaseOutput{Status: stReleased, Fence: 1})
	// A released owner's write is refused and never seen.
	h.checkpoint(0, "k", 320, 330, "A", 1, `{"w":"a3"}`, stLost, 0)
	h.grantSaw(1, "k", 400, 410, "B", 2, `{"w":"a2"}`, 1)
	h.checkpoint(1, "k", 500, 510, "B", 2, `{"w":"b1"}`, stCheckpointed, 2)
	// B stalls past its lease: its write is refused.
	h.checkpoint(1, "k", 3000, 3010, "B", 2, `{"w":"b2"}`, stLost, 0)
	h.grantSaw(2, "k", 3100, 3110, "C", 3, `{"w":"b1"}`, 2)
	// C's write has an unknown outcome: it may show up later.
	h.checkpoint(2, "k", 3200, -1, "C", 3, `{"w":"c1"}`, "", 0)
	h.owner(3, fRelease, "k", 3300, 3310, "C", 3, "", LeaseOutput{Status: stReleased, Fence: 3})
	h.grantSaw(4, "k", 3400, 3410, "D", 4, `{"w":"c1"}`, 3)
	h.owner(4, fRelease, "k", 3500, 3510, "D", 4, "", LeaseOutput{Status: stReleased, Fence: 4})
	h.grantSaw(5, "k", 3600, 3610, "E", 5, `{"w":"c1"}`, 3)
	// Another key: an unknown write that did not take effect.
	h.grantSaw(6, "j", 4000, 4010, "F", 6, "", 0)
	h.checkpoint(6, "j", 4100, 4110, "F", 6, `{"w":"f1"}`, stCheckpointed, 6)
	h.checkpoint(6, "j", 4200, -1, "F", 6, `{"w":"f2"}`, "", 0)
	h.grantSaw(7, "j", 6500, 6510, "G", 7, `{"w":"f1"}`, 6)
	rep := CheckLeases(h.ops, Tolerance, 10*time.Second)
	if rep.Verdict != VerdictOK || rep.FencingViolations() != 0 || rep.Lost() != 0 {
		t.Fatalf("correct history judged %s, fencing %d, lost %d: %v", rep.Verdict, rep.FencingViolations(), rep.Lost(), rep.Examples)
	}
	if rep.Checkpoints != 4 || rep.CheckpointsSeen != 5 {
		t.Errorf("checkpoints %d acknowledged, %d seen; want 4 and 5", rep.Checkpoints, rep.CheckpointsSeen)
	}
}

func TestCheckpointCheckersCatchViolations(t *testing.T) {
	cases := []struct {
		name  string
		build func(h *histBuilder)
		check func(r *LeaseReport) int
	}{
		{"a superseded owner's write accepted", func(h *histBuilder) {
			h.grantSaw(0, "k", 0, 10, "A", 1, "", 0)
			h.grantSaw(1, "k", 2500, 2510, "B", 2, "", 0)
			h.checkpoint(0, "k", 2600, 2610, "A", 1, `{"w":"a1"}`, stCheckpointed, 2)
		}, func(r *LeaseReport) int { return r.StaleOwnerAccepted + r.CheckpointFence }},
		{"an expired owner's write accepted", func(h *histBuilder) {
			h.grantSaw(0, "k", 0, 10, "A", 1, "", 0)
			h.checkpoint(0, "k", 3000, 3010, "A", 1, `{"w":"a1"}`, stCheckpointed, 1)
		}, nil},
		{"a refused write seen", func(h *histBuilder) {
			h.grantSaw(0, "k", 0, 10, "A", 1, "", 0)
			h.owner(0, fRelease, "k", 100, 110, "A", 1, "", LeaseOutput{Status: stReleased, Fence: 1})
			h.checkpoint(0, "k", 200, 210, "A", 1, `{"w":"a1"}`, stLost, 0)
			h.grantSaw(1, "k", 300, 310, "B", 2, `{"w":"a1"}`, 1)
		}, func(r *LeaseReport) int { return r.RefusedCheckpointSeen }},
		{"a write not applied seen", func(h *histBuilder) {
			h.grantSaw(0, "k", 0, 10, "A", 1, "", 0)
			h.add(0, fCheckpoint, "k", 100, 110, Fail, LeaseInput{Kind: fCheckpoint, Owner: "A", OwnerFence: 1, Checkpoint: `{"w":"a1"}`}, nil)
			h.owner(0, fRelease, "k", 200, 210, "A", 1, "", LeaseOutput{Status: stReleased, Fence: 1})
			h.grantSaw(1, "k", 300, 310, "B", 2, `{"w":"a1"}`, 1)
		}, func(r *LeaseReport) int { return r.RefusedCheckpointSeen }},
		{"the checkpoint lost", func(h *histBuilder) {
			h.grantSaw(0, "k", 0, 10, "A", 1, "", 0)
			h.checkpoint(0, "k", 100, 110, "A", 1, `{"w":"a1"}`, stCheckpointed, 1)
			h.owner(0, fRelease, "k", 200, 210, "A", 1, "", LeaseOutput{Status: stReleased, Fence: 1})
			h.grantSaw(1, "k", 300, 310, "B", 2, "", 0)
		}, func(r *LeaseReport) int { return r.LostCheckpoint }},
		{"an older checkpoint returned", func(h *histBuilder) {
			h.grantSaw(0, "k", 0, 10, "A", 1, "", 0)
			h.checkpoint(0, "k", 100, 110, "A", 1, `{"w":"a1"}`, stCheckpointed, 1)
			h.checkpoint(0, "k", 200, 210, "A", 1, `{"w":"a2"}`, stCheckpointed, 1)
			h.owner(0, fRelease, "k", 300, 310, "A", 1, "", LeaseOutput{Status: stReleased, Fence: 1})
			h.grantSaw(1, "k", 400, 410, "B", 2, `{"w":"a1"}`, 1)
		}, func(r *LeaseReport) int { return r.LostCheckpoint }},
		{"the writer's fence wrong", func(h *histBuilder) {
			h.grantSaw(0, "k", 0, 10, "A", 1, "", 0)
			h.checkpoint(0, "k", 100, 110, "A", 1, `{"w":"a1"}`, stCheckpointed, 1)
			h.owner(0, fRelease, "k", 200, 210, "A", 1, "", LeaseOutput{Status: stReleased, Fence: 1})
			h.grantSaw(1, "k", 300, 310, "B", 2, `{"w":"a1"}`, 2)
		}, func(r *LeaseReport) int { return r.CheckpointFence }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var h histBuilder
			c.build(&h)
			rep := CheckLeases(h.ops, Tolerance, 10*time.Second)
			if rep.Verdict != VerdictInvalid {
				t.Errorf("porcupine verdict %s, want %s", rep.Verdict, VerdictInvalid)
			}
			if c.check != nil && c.check(rep) == 0 {
				t.Errorf("direct checks missed it: %+v", rep)
			}
		})
	}
}
