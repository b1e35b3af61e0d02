package fsm

import "github.com/holdfast/holdfast/internal/wire"

// BuildLevel is the highest cluster level this build speaks. A level names
// a set of formats: every log entry type and body version, the snapshot
// format and every peer-link frame belongs to the level that introduced
// it, and none is written before the cluster's active level includes it.
// Raise it, and extend RequiredLevel and the README's table, whenever a
// format changes.
//
//   - Level 0: the formats of the builds before levels: entry types 1-16
//     (claim and release bodies up to version 2), snapshot format 2.
//   - Level 1: entry types 17 (FenceFloor) and 18 (SetLevel), snapshot
//     format 3 (which records the active level).
const BuildLevel uint32 = 1

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
	s.level = c.Level
	return LevelResult{Level: s.level, Raised: true}
}

// RequiredLevel is the cluster level a command's entry needs before it may
// be written: every member must be able to decode it. A SetLevel needs
// the level it raises to, which its proposer checks against the members
// themselves.
func RequiredLevel(c Command) uint32 {
	switch c := c.(type) {
	case *FenceFloor:
		return 1
	case *SetLevel:
		return max(c.Level, 1)
	case *Batch:
		var l uint32
		for _, sub := range c.Commands {
			l = max(l, RequiredLevel(sub))
		}
		return l
	}
	return 0
}

// Level returns the cluster's active level as applied on this node.
func (f *FSM) Level() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.level
}
