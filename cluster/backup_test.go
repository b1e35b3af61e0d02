package cluster

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/fsm"
)

func TestBackupFileRoundTripAndDamage(t *testing.T) {
	snap := fsm.New().SnapshotBytes()
	sum := sha256.Sum256(snap)
	b := &Backup{Header: BackupHeader{Format: BackupFormat, Index: 7, Term: 2, Size: int64(len(snap)), SHA256: hex.EncodeToString(sum[:]), NodeID: "n1"}, Snapshot: snap}
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
	if err != nil || got.Header != b.Header || string(got.Snapshot) != string(snap) || summary.Leases != 0 {
		t.Fatalf("round trip: %+v %+v %v", got, summary, err)
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
		if _, _, err := DecodeBackup(bad); !errors.Is(err, ErrBackup) {
			t.Errorf("%s: DecodeBackup = %v, want ErrBackup", name, err)
		}
	}
}
