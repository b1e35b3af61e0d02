package fsm

import (
	"bytes"
	"testing"
)

// TestLevelInSnapshots: a state at level 0 is written in snapshot format 2,
// exactly as builds before the level wrote it; once the level rises the
// snapshot is format 3 and brings the level back; SetLevel never lowers it.
func TestLevelInSnapshots(t *testing.T) {
	f := seedFSM()
	v2 := f.SnapshotBytes()
	if got := v2[len(snapshotMagic)]; got != snapshotVersionLevel0 {
		t.Fatalf("a level 0 state is written in format %d, want %d", got, snapshotVersionLevel0)
	}
	for _, c := range []struct {
		set, want uint32
		raised    bool
	}{{1, 1, true}, {0, 1, false}, {1, 1, false}} {
		r := f.ApplyCommand(&SetLevel{Now: t0 + 100, Level: c.set}).(*LevelResult)
		if r.Level != c.want || r.Raised != c.raised || f.Level() != c.want {
			t.Fatalf("set %d: %+v, level %d; want %d raised %v", c.set, *r, f.Level(), c.want, c.raised)
		}
	}
	v3 := f.SnapshotBytes()
	if got := v3[len(snapshotMagic)]; got != 3 {
		t.Fatalf("a level 1 state is written in format %d, want 3", got)
	}
	g := New()
	if err := g.Restore(&nopCloser{Reader: bytes.NewReader(v3)}); err != nil {
		t.Fatalf("restore a format 3 snapshot: %v", err)
	}
	if g.Level() != 1 || !bytes.Equal(g.SnapshotBytes(), v3) {
		t.Fatalf("restored level %d; the snapshot does not round-trip", g.Level())
	}
	sum, err := InspectSnapshot(v3)
	if err != nil || sum.Level != 1 {
		t.Fatalf("inspect: %+v %v", sum, err)
	}
	if fencing, err := SnapshotFencing(v3[:SnapshotPrefixLen]); err != nil || fencing != g.FencingCounter() {
		t.Fatalf("fencing from a format 3 prefix: %d %v", fencing, err)
	}
}

// TestRequiredLevel lists the level each command's entry needs.
func TestRequiredLevel(t *testing.T) {
	for _, c := range sampleCommands() {
		if l := RequiredLevel(c); l != 0 {
			t.Errorf("%T needs level %d, want 0 (a format of the builds before levels)", c, l)
		}
	}
	for c, want := range map[Command]uint32{
		&FenceFloor{Floor: 5}:                                          1,
		&SetLevel{Level: 1}:                                            1,
		&SetLevel{Level: 2}:                                            2,
		&Batch{Commands: []Command{&Sweep{}}}:                          0,
		&Batch{Commands: []Command{&FenceFloor{}}}:                     1,
		&Batch{Commands: []Command{&SetLevel{Level: 3}}}:               3,
		&LeaseAcquire{Slots: 3}:                                        2,
		&LeaseCheckpoint{Checkpoint: []byte("1")}:                      2,
		&Batch{Commands: []Command{&LeaseAcquire{Slots: 2}, &Sweep{}}}: 2,
	} {
		if l := RequiredLevel(c); l != want {
			t.Errorf("%T needs level %d, want %d", c, l, want)
		}
		if l := EntryLevel(Encode(c)); l != want {
			t.Errorf("the entry of %T needs level %d by its headers, want %d", c, l, want)
		}
	}
	for _, c := range sampleCommands() {
		if l := EntryLevel(Encode(c)); l != 0 {
			t.Errorf("the entry of %T needs level %d by its headers, want 0", c, l)
		}
	}
	// What this build cannot read needs a level above it.
	batch := Encode(&Batch{Commands: []Command{&Sweep{}}})
	for name, b := range map[string][]byte{
		"empty":              nil,
		"unknown type":       {250, 1},
		"unknown version":    {byte(TypeSweep), 9},
		"truncated batch":    batch[:len(batch)-1],
		"batch of a newer":   append(batch[:2:2], 1, 2, 250, 1),
		"undecodable levels": {byte(TypeSetLevel), 1},
	} {
		if l := EntryLevel(b); l <= BuildLevel {
			t.Errorf("%s: EntryLevel %d, want above %d", name, l, BuildLevel)
		}
	}
}

// TestEveryEntryFormatHasALevel: every command type this build decodes,
// with the body version it writes, is in the level table, at or below the
// build's level: a new type or body version must be given the level that
// introduces it.
func TestEveryEntryFormatHasALevel(t *testing.T) {
	for ty := range 256 {
		c := newCommand(CommandType(ty))
		if c == nil {
			continue
		}
		for v := versionOf(c); v <= newestVersion(c); v++ {
			l, ok := entryLevel(entryFormat{c.Type(), v})
			if !ok || l > BuildLevel {
				t.Errorf("command type %d body version %d: level %d (listed %v); give it the level that introduces it", ty, v, l, ok)
			}
		}
	}
	if l := RequiredLevel(&LeaseAcquire{Slots: 1}); l != 0 {
		t.Errorf("single-slot acquire at level %d", l)
	}
	if l := RequiredLevel(&LeaseAcquire{Slots: 2}); l != 2 {
		t.Errorf("multi-slot acquire at level %d, want 2", l)
	}
	if l := RequiredLevel(&JobClaim{}); l != 0 {
		t.Errorf("claim at level %d", l)
	}
}

// TestCapacityLevelRaisesTheInitialBounds: a state starts with the bounds
// of the builds that kept records in memory; reaching capacityLevel raises
// max_leases and max_queues to the defaults where they still hold those
// (an operator's value stays), and only the entry that crosses it does.
func TestCapacityLevelRaisesTheInitialBounds(t *testing.T) {
	for _, c := range []struct {
		name                 string
		set                  SettingsPatch
		wantLeases, wantQues int64
	}{
		{"initial bounds", SettingsPatch{}, DefaultMaxLeases, DefaultMaxQueues},
		{"max_leases set", SettingsPatch{MaxLeases: ptr(int64(3_000_000))}, 3_000_000, DefaultMaxQueues},
		{"max_queues set", SettingsPatch{MaxQueues: ptr(int64(100))}, DefaultMaxLeases, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := New()
			if s := f.Settings(); s.MaxLeases != initialMaxLeases || s.MaxQueues != initialMaxQueues {
				t.Fatalf("a new state's bounds: %d, %d", s.MaxLeases, s.MaxQueues)
			}
			f.ApplyCommand(&SetSettings{Now: t0, Patch: c.set})
			f.ApplyCommand(&SetLevel{Now: t0, Level: capacityLevel - 1})
			if s := f.Settings(); s.MaxLeases == DefaultMaxLeases || s.MaxQueues == DefaultMaxQueues {
				t.Fatalf("the bounds rose below capacityLevel: %d, %d", s.MaxLeases, s.MaxQueues)
			}
			f.ApplyCommand(&SetLevel{Now: t0, Level: capacityLevel})
			if s := f.Settings(); s.MaxLeases != c.wantLeases || s.MaxQueues != c.wantQues {
				t.Fatalf("at capacityLevel: %d, %d; want %d, %d", s.MaxLeases, s.MaxQueues, c.wantLeases, c.wantQues)
			}
			f.ApplyCommand(&SetSettings{Now: t0, Patch: SettingsPatch{MaxLeases: ptr(int64(initialMaxLeases))}})
			f.ApplyCommand(&SetLevel{Now: t0, Level: capacityLevel + 1})
			if s := f.Settings(); s.MaxLeases != initialMaxLeases {
				t.Fatalf("a later level raised max_leases again: %d", s.MaxLeases)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
