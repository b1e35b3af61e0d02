package fsm

import "github.com/holdfast/holdfast/internal/wire"

// BuildLevel is the highest cluster level this build speaks. A level names
// a set of formats: every log entry type and body version, the snapshot
// format and every peer-link frame belongs to the level that introduced
// it, and none is written before the cluster's active level includes it.
// Raise it, and extend RequiredLevel and cluster/README.md's table, whenever a
// format changes.
//
//   - Level 0: the formats of the builds before levels: entry types 1-16
//     (claim and release bodies up to version 2), snapshot format 2.
//   - Level 1: entry types 17 (FenceFloor) and 18 (SetLevel), snapshot
//     format 3 (which records the active level).
//   - Level 2: lease acquire body version 2 (slots), entry type 19
//     (LeaseCheckpoint), snapshot format 4 (a lease's slots, holders and
//     checkpoint), the leader's lease results with slots or a checkpoint
//     on the peer link.
//   - Level 3: a node keeps its Raft snapshots as checkpoints of its state
//     store (cluster.CheckpointLevel), which a build of level 2 cannot
//     read; log entries, the snapshot format a follower receives and the
//     peer link are level 2's.
//   - Level 4: a snapshot kept as a checkpoint is sent to a follower as
//     the checkpoint's files (cluster.ArchiveLevel), which the follower
//     installs as its state store; a build of level 3 cannot read that.
//     Log entries, backups and the peer link are level 2's. Reaching it
//     raises max_leases and max_queues from their initial bounds to the
//     defaults of a state on disk (capacityLevel), so every member must
//     apply that rule first.
const BuildLevel uint32 = 4

// SetLevel raises the cluster's active level. The leader proposes it only
// once every member has reported that it speaks Level. It never lowers
// the level.
type SetLevel struct {
	Now   int64
	Level uint32
}

// LevelResult is the active level after a SetLevel.
type LevelResult struct {
	Level  uint32
	Raised bool
}

// Type implements Command.
func (*SetLevel) Type() CommandType { return TypeSetLevel }

// Stamp implements Command.
func (c *SetLevel) Stamp() int64 { return c.Now }

func (c *SetLevel) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	e.Uvarint(uint64(c.Level))
}

func (c *SetLevel) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Level = uint32(min(d.Uvarint(), 1<<32-1))
}

func (s *state) applySetLevel(c *SetLevel) LevelResult {
	if c.Level <= s.level {
		return LevelResult{Level: s.level}
	}
	if s.level < capacityLevel && c.Level >= capacityLevel {
		s.settings.raiseToDefaults()
	}
	s.level = c.Level
	return LevelResult{Level: s.level, Raised: true}
}

// entryLevel is the level that introduced an entry format: a command type
// with the body version it writes. Every type and body version must be
// listed (a test checks it), so a new one cannot be written before every
// member can read it.
func entryLevel(f entryFormat) (uint32, bool) {
	switch f {
	case entryFormat{TypeLeaseAcquire, 1}, entryFormat{TypeLeaseRenew, 1}, entryFormat{TypeLeaseRelease, 1},
		entryFormat{TypeLeaseComplete, 1}, entryFormat{TypeQueueCreate, 1}, entryFormat{TypeJobEnqueue, 1},
		entryFormat{TypeJobClaim, 2}, entryFormat{TypeJobAck, 1}, entryFormat{TypeJobRelease, 2},
		entryFormat{TypeJobRenew, 1}, entryFormat{TypeSweep, 1}, entryFormat{TypeSetSettings, 1},
		entryFormat{TypeSetNode, 1}, entryFormat{TypeRemoveNode, 1}, entryFormat{TypeBatch, 1},
		entryFormat{TypeJobRetry, 1}:
		return 0, true
	case entryFormat{TypeFenceFloor, 1}, entryFormat{TypeSetLevel, 1}:
		return 1, true
	case entryFormat{TypeLeaseAcquire, 2}, entryFormat{TypeLeaseCheckpoint, 1}:
		return 2, true
	}
	return 0, false
}

// entryFormat is a command type and a body version.
type entryFormat struct {
	t       CommandType
	version byte
}

// RequiredLevel is the cluster level a command's entry needs before it may
// be written: every member must be able to decode it. A batch needs the
// highest level of its commands; a SetLevel needs the level it raises to,
// which its proposer checks against the members themselves. A format not
// in the table needs a level above this build's, so it is never written.
func RequiredLevel(c Command) uint32 {
	l, ok := entryLevel(entryFormat{c.Type(), versionOf(c)})
	if !ok {
		return BuildLevel + 1
	}
	switch c := c.(type) {
	case *SetLevel:
		l = max(l, c.Level)
	case *Batch:
		for _, sub := range c.Commands {
			l = max(l, RequiredLevel(sub))
		}
	}
	return l
}

// EntryLevel is RequiredLevel for an encoded entry, read from the headers
// of the entry and of a batch's commands without decoding their bodies (a
// SetLevel, which names the level it raises to, is decoded). An entry in a
// format this build does not know needs a level above BuildLevel.
func EntryLevel(b []byte) uint32 {
	if len(b) < 2 {
		return BuildLevel + 1
	}
	t := CommandType(b[0])
	l, ok := entryLevel(entryFormat{t, b[1]})
	switch {
	case !ok:
		return BuildLevel + 1
	case t == TypeSetLevel:
		c, err := Decode(b)
		if err != nil {
			return BuildLevel + 1
		}
		return RequiredLevel(c)
	case t == TypeBatch:
		d := wire.NewDecoder(b[2:])
		for n := d.Len(); n > 0 && d.Err() == nil; n-- {
			if sub := d.BlobView(); d.Err() == nil {
				l = max(l, EntryLevel(sub))
			}
		}
		if d.Err() != nil {
			return BuildLevel + 1
		}
	}
	return l
}

// Level returns the cluster's active level as applied on this node. It
// takes no lock: every write checks it.
func (f *FSM) Level() uint32 { return f.level.Load() }
