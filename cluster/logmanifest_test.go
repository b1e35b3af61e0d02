package cluster

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/internal/raftlog"
)

// TestLostLogOrTermRefusesToStart: a node whose raft-log/ was removed while
// raft.db remembers its segments, or whose raft.db was lost while its log
// remains, refuses to start instead of voting or leading with less than it
// acknowledged.
func TestLostLogOrTermRefusesToStart(t *testing.T) {
	for name, damage := range map[string]func(cfg Config) error{
		"raft-log removed": func(cfg Config) error { return os.RemoveAll(cfg.logPath()) },
		"raft.db removed":  func(cfg Config) error { return os.Remove(cfg.boltPath()) },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := stoppedSoloNode(t)
			if err := damage(cfg); err != nil {
				t.Fatal(err)
			}
			n2, err := Open(testConfig(t, "solo", cfg.DataDir, true))
			if err == nil {
				_ = n2.Kill()
				t.Fatal("the node started")
			}
			if !errors.Is(err, raftlog.ErrCorrupt) || !strings.Contains(err.Error(), "--join") {
				t.Fatalf("start: %v, want a corruption error saying how to bring the node back", err)
			}
		})
	}
}
