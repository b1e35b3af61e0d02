package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
)

// backupOf is a backup of the snapshot bytes snap, with its header's
// size and checksum, held in memory.
func backupOf(h BackupHeader, snap []byte) *Backup {
	sum := sha256.Sum256(snap)
	h.Format, h.Size, h.SHA256 = BackupFormat, int64(len(snap)), hex.EncodeToString(sum[:])
	return &Backup{Header: h, open: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(snap)), nil }}
}

func TestBackupFileRoundTripAndDamage(t *testing.T) {
	snap := fsm.New().SnapshotBytes()
	b := backupOf(BackupHeader{Index: 7, Term: 2, NodeID: "n1"}, snap)
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	path := filepath.Join(t.TempDir(), "b.backup")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, summary, err := ReadBackupFile(path)
	if err != nil || got.Header != b.Header || summary.Leases != 0 {
		t.Fatalf("round trip: %+v %+v %v", got, summary, err)
	}
	// The file's backup reads its snapshot from the file when written out.
	var again bytes.Buffer
	if _, err := got.WriteTo(&again); err != nil || !bytes.Equal(again.Bytes(), data) {
		t.Fatalf("the backup read from its file writes out as %d bytes (%v), the file has %d", again.Len(), err, len(data))
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)-1] ^= 1
	for name, bad := range map[string][]byte{
		"no header":    snap,
		"other format": []byte(strings.Replace(string(data), BackupFormat, "other/1", 1)),
		"truncated":    data[:len(data)-1],
		"altered":      flipped,
		"empty":        nil,
	} {
		p := filepath.Join(t.TempDir(), "bad.backup")
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadBackupFile(p); !errors.Is(err, ErrBackup) {
			t.Errorf("%s: ReadBackupFile = %v, want ErrBackup", name, err)
		}
	}
}

// TestRestoredNodeStartsAtItsBuildLevel: a node restoring a backup saved at
// any level up to its build's starts the new cluster at its build's level
// before Open returns, with no settling time (LevelSettle is an hour): the
// level is raised after the backup is installed, which would otherwise
// have lowered it to the backup's. The backup's lease and the restore's
// fence floor are there, and a write of the build's level (an acquire of
// several slots) is accepted at once.
func TestRestoredNodeStartsAtItsBuildLevel(t *testing.T) {
	for level := uint32(0); level <= fsm.BuildLevel; level++ {
		t.Run(fmt.Sprintf("a backup at level %d", level), func(t *testing.T) {
			old := fsm.New()
			now := time.Now().UnixMilli()
			if level > 0 {
				old.ApplyCommand(&fsm.SetLevel{Now: now, Level: level})
			}
			old.ApplyCommand(&fsm.LeaseAcquire{Now: now, Lease: secret.LeaseID("ns", "held"), Fingerprint: secret.FingerprintHash("ns", "held", ""),
				Owner: secret.OwnerTokenHash("A"), TTLSeconds: 3600})
			cfg := testConfig(t, "restored", t.TempDir(), true)
			cfg.LevelSettle = time.Hour
			cfg.Restore = backupOf(BackupHeader{Index: 40, Term: 3, NodeID: "old"}, old.SnapshotBytes())
			n := open(t, cfg)
			if got := n.fsm.Level(); got != fsm.BuildLevel {
				t.Fatalf("restored at level %d, want %d", got, fsm.BuildLevel)
			}
			if st := n.fsm.Stats(); st.LeasesHeld != 1 || n.fsm.FencingCounter() <= RestoreGap {
				t.Fatalf("after the restore: %+v, fencing counter %d; want the backup's lease and the floor", st, n.fsm.FencingCounter())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := n.Propose(ctx, &fsm.LeaseAcquire{Now: n.Now(), Lease: secret.LeaseID("ns", "slots"), Fingerprint: secret.FingerprintHash("ns", "slots", ""),
				Owner: secret.OwnerTokenHash("B"), TTLSeconds: 60, Slots: 2})
			if err != nil {
				t.Fatalf("an acquire of two slots once restored: %v", err)
			}
		})
	}
}
