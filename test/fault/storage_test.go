//go:build unix

package fault

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/raftlog"
	"github.com/holdfast/holdfast/test/harness"
)

// fillLog writes entries 1..n to a new store in dataDir's raft-log, in
// batches of one to four entries with data of varied sizes, and closes it.
func fillLog(t *testing.T, rng *rand.Rand, dataDir string, n int) {
	t.Helper()
	s, err := raftlog.Open(filepath.Join(dataDir, "raft-log"), raftlog.Options{SegmentSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; {
		var batch []*raft.Log
		for k := 1 + rng.IntN(4); k > 0 && i <= n; k-- {
			data := make([]byte, 20+rng.IntN(400))
			for j := range data {
				data[j] = byte('a' + rng.IntN(26))
			}
			batch = append(batch, &raft.Log{Index: uint64(i), Term: 1, Type: raft.LogCommand, Data: data})
			i++
		}
		if err := s.StoreLogs(batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStorageDamageAgainstTheStore gives the storage nemesis's log damage
// to the real log store, many times over: a flip or zeroed bytes inside the
// records must make it refuse to open with ErrCorrupt naming the segment,
// leaving the segment as it is; the nemesis's torn append must be cut off
// with a warning and every entry kept. Otherwise the nemesis would judge
// the nodes by the wrong rule.
func TestStorageDamageAgainstTheStore(t *testing.T) {
	const entries = 60
	for _, kind := range []string{damageFlip, damageZero, damageTorn} {
		for seed := range uint64(40) {
			t.Run(fmt.Sprintf("%s-%d", kind, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, 21))
				dir := t.TempDir()
				fillLog(t, rng, dir, entries)
				d, err := damageLog(rng, dir, kind)
				if err != nil {
					t.Fatal(err)
				}
				var warned []string
				s, err := raftlog.Open(filepath.Join(dir, "raft-log"), raftlog.Options{SegmentSize: 1 << 20,
					Warn: func(msg string, _ ...any) { warned = append(warned, msg) }})
				if d.refuse {
					if err == nil {
						_ = s.Close()
						t.Fatalf("the store opened after %s", d.desc)
					}
					if !errors.Is(err, raftlog.ErrCorrupt) || !strings.Contains(err.Error(), d.file) {
						t.Fatalf("after %s: want ErrCorrupt naming %s, got %v", d.desc, d.file, err)
					}
					if sum, err := harness.FileSHA256(d.file); err != nil || sum != d.sum {
						t.Errorf("after %s: the refusing store changed the segment (%v)", d.desc, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("the store refused %s: %v", d.desc, err)
				}
				defer s.Close()
				if last, err := s.LastIndex(); err != nil || last != entries {
					t.Errorf("after %s: last index %d (%v), want %d", d.desc, last, err, entries)
				}
				if len(warned) != 1 || !harness.TornAppendLog.MatchString(warned[0]) {
					t.Errorf("after %s: warnings %q, want one about a torn append", d.desc, warned)
				}
			})
		}
	}
}
