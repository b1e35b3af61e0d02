package fsm

import (
	"bytes"
	"strings"
	"testing"
)

// TestEntryWritesWhatEncodeBatchWrites: an entry encoded command by command
// straight into its buffer has the bytes of Encode for one command and of
// EncodeBatch over Encode for several, large payloads included.
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
		if got, want := Entry(cmds[:n]), EncodeBatch(encoded); !bytes.Equal(got, want) {
			t.Fatalf("%d commands: %d bytes differ from EncodeBatch's %d", n, len(got), len(want))
		}
	}
}
