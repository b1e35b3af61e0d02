package fsm

import (
	"bytes"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/internal/wire"
)

// TestEntryWritesWhatEncodeBatchWrites: an entry encoded command by command
// straight into its buffer has the bytes of Encode for one command and of
// encodeBatch over Encode for several, large payloads included.
func TestEntryWritesWhatEncodeBatchWrites(t *testing.T) {
	cmds := sampleCommands()
	cmds = append(cmds, &JobEnqueue{Now: t0, Key: "big", Payload: []byte(`"` + strings.Repeat("p", 70_000) + `"`)},
		&LeaseComplete{Now: t0, Result: []byte(`"` + strings.Repeat("r", 20_000) + `"`)})
	for _, c := range cmds {
		if got := Entry([]Command{c}); !bytes.Equal(got, Encode(c)) {
			t.Errorf("%T alone: %x, want %x", c, got, Encode(c))
		}
	}
	for n := 2; n <= len(cmds); n++ {
		var encoded [][]byte
		for _, c := range cmds[:n] {
			encoded = append(encoded, Encode(c))
		}
		if got, want := Entry(cmds[:n]), encodeBatch(encoded); !bytes.Equal(got, want) {
			t.Fatalf("%d commands: %d bytes differ from encodeBatch's %d", n, len(got), len(want))
		}
	}
}

// encodeBatch writes the log-entry bytes of a batch whose commands are
// already encoded (as by Encode), field by field: the tests' reference for
// what Entry and a Batch's encoding must write.
func encodeBatch(encoded [][]byte) []byte {
	size := 8
	for _, b := range encoded {
		size += len(b) + 4
	}
	e := wire.NewEncoder(make([]byte, 0, size))
	e.Byte(byte(TypeBatch))
	e.Byte(bodyVersion)
	e.Uvarint(uint64(len(encoded)))
	for _, b := range encoded {
		e.Blob(b)
	}
	return e.Bytes()
}
