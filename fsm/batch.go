package fsm

import (
	"fmt"

	"github.com/holdfast/holdfast/internal/wire"
)

// Batch carries several commands in one log entry, so concurrent writes
// share one Raft entry and one fsync. Its commands apply in order, each with
// its own stamped time, exactly as if they were consecutive entries. A batch
// never contains a batch.
type Batch struct {
	Commands []Command
}

// BatchResult holds the result of each command of a Batch, in order.
type BatchResult struct {
	Results []interface{}
}

// Type implements Command.
func (*Batch) Type() CommandType { return TypeBatch }

// Stamp implements Command. A batch has no time of its own: each of its
// commands advances the clock when it applies.
func (*Batch) Stamp() int64 { return 0 }

func (c *Batch) encodeBody(e *wire.Encoder) {
	e.Uvarint(uint64(len(c.Commands)))
	for _, sub := range c.Commands {
		AppendBlob(e, sub)
	}
}

func (c *Batch) decodeBody(d *wire.Decoder, _ byte) {
	n := d.Len()
	c.Commands = make([]Command, 0, n)
	for i := 0; i < n && d.Err() == nil; i++ {
		// Decode copies what a command keeps (payloads, results), so the
		// sub-entry itself need not be copied.
		b := d.BlobView()
		if len(b) > 0 && CommandType(b[0]) == TypeBatch {
			c.Commands = append(c.Commands, nil)
			return
		}
		sub, err := Decode(b)
		if err != nil {
			c.Commands = append(c.Commands, nil)
			return
		}
		c.Commands = append(c.Commands, sub)
	}
}

// valid reports whether decoding produced only real commands.
func (c *Batch) valid() error {
	for i, sub := range c.Commands {
		if sub == nil {
			return fmt.Errorf("batch command %d is undecodable or a nested batch", i)
		}
	}
	return nil
}

// Entry returns the log-entry bytes of cmds, which holds at least one
// command: the command itself when there is one, otherwise a Batch of them.
// A Batch encodes each command straight into the entry (AppendBlob).
func Entry(cmds []Command) []byte {
	if len(cmds) == 1 {
		return Encode(cmds[0])
	}
	return Encode(&Batch{Commands: cmds})
}

// AppendBlob appends Encode(c) to e as a length-prefixed byte string (as
// e.Blob(Encode(c)) would), without a buffer of its own.
func AppendBlob(e *wire.Encoder, c Command) {
	mark := e.BeginBlob()
	encodeCommand(e, c)
	e.EndBlob(mark)
}
