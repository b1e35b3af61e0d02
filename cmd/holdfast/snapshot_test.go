package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileArgTakesFlagsOnEitherSide: FILE may come before or after the
// flags; anything but one FILE is a usage error naming what came.
func TestFileArgTakesFlagsOnEitherSide(t *testing.T) {
	for _, args := range [][]string{
		{"--addr", "127.0.0.1:1", "out.backup"},
		{"out.backup", "--addr", "127.0.0.1:1"},
		{"--addr=127.0.0.1:9", "out.backup", "--addr", "127.0.0.1:1"},
	} {
		var addr string
		var stderr bytes.Buffer
		file, _, ok := fileArg("snapshot save", args, &stderr, func(fs *flag.FlagSet) { fs.StringVar(&addr, "addr", "", "") })
		if !ok || file != "out.backup" || addr != "127.0.0.1:1" {
			t.Errorf("%q: file %q, addr %q, ok %v: %s", args, file, addr, ok, stderr.String())
		}
	}
	for _, args := range [][]string{{}, {"a", "b"}, {"a", "--addr", "x", "b"}} {
		var stderr bytes.Buffer
		_, code, ok := fileArg("snapshot save", args, &stderr, func(fs *flag.FlagSet) { fs.String("addr", "", "") })
		if ok || code != exitUsage || !strings.Contains(stderr.String(), "want exactly one FILE argument") {
			t.Errorf("%q: ok %v, code %d: %s", args, ok, code, stderr.String())
		}
	}
}

// TestSnapshotSaveKeepsAnExistingFile: save refuses to replace a file
// unless told to, before it asks any node.
func TestSnapshotSaveKeepsAnExistingFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "old.backup")
	if err := os.WriteFile(file, []byte("an earlier backup"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := snapshotSave([]string{file, "--addr", "127.0.0.1:1"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "--force") {
		t.Fatalf("save over an existing file: exit %d: %s", code, stderr.String())
	}
	if b, _ := os.ReadFile(file); string(b) != "an earlier backup" {
		t.Fatalf("the existing file changed: %q", b)
	}
}
