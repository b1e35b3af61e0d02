package fsm

import (
	"fmt"

	"github.com/holdfast/holdfast/internal/wire"
)

// MaxFencingToken bounds fencing tokens: every token must stay an exact
// integer in JSON readers that hold numbers as IEEE doubles (2^53 - 1).
const MaxFencingToken = 1<<53 - 1

// FenceFloor raises the fencing counter to at least Floor, so that every
// token issued afterwards is above it. It never lowers the counter. A
// restored cluster commits one before it serves anything, above any token
// the backup's cluster can have issued after the backup was taken.
type FenceFloor struct {
	Now   int64
	Floor uint64
}

// FenceFloorResult is the fencing counter after a FenceFloor.
type FenceFloorResult struct {
	// Counter is the last fencing token issued: the next grant gets Counter+1.
	Counter uint64
	// Raised reports whether the floor was above the counter.
	Raised bool
}

// Type implements Command.
func (*FenceFloor) Type() CommandType { return TypeFenceFloor }

// Stamp implements Command.
func (c *FenceFloor) Stamp() int64 { return c.Now }

func (c *FenceFloor) encodeBody(e *wire.Encoder) {
	e.Varint(c.Now)
	e.Uvarint(c.Floor)
}

func (c *FenceFloor) decodeBody(d *wire.Decoder, _ byte) {
	c.Now = d.Varint()
	c.Floor = d.Uvarint()
}

// Valid reports whether the floor keeps tokens exact JSON integers: the
// floor and a long run of grants after it stay below MaxFencingToken.
func (c *FenceFloor) Valid() error {
	if c.Floor > MaxFencingToken/2 {
		return fmt.Errorf("fencing floor %d leaves too little room below %d for later tokens", c.Floor, uint64(MaxFencingToken))
	}
	return nil
}

func (s *state) applyFenceFloor(c *FenceFloor) FenceFloorResult {
	if c.Floor <= s.fencing {
		return FenceFloorResult{Counter: s.fencing}
	}
	s.fencing = c.Floor
	return FenceFloorResult{Counter: s.fencing, Raised: true}
}
