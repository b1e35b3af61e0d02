//go:build unix

package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// TestReadmeQuickStart runs the README's quick start as a user pastes it:
// every shell block of the section, in order, against a fresh node, with
// the built binary as ./holdfast (the block's `go build` line is the only
// one left out). A command that fails stops the script.
func TestReadmeQuickStart(t *testing.T) {
	script, err := harness.QuickStartScript(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}

	c := env.NewCluster(t, 1, harness.Options{})
	c.StartBootstrap()
	c.WaitAllReady()
	dir := t.TempDir()
	if err := os.Symlink(env.Binary, filepath.Join(dir, "holdfast")); err != nil {
		t.Fatal(err)
	}
	// The README's node is the default address; this test's node is elsewhere.
	body := strings.ReplaceAll(script, "127.0.0.1:7070", c.Node(0).HTTPAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", body)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOLDFAST_ADDR=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the quick start failed: %v\nscript:\n%s\noutput:\n%s", err, body, out)
	}
	for _, want := range []string{
		"HTTP 201 Created", `"status":"held"`, "exit 3", `{"receipt_id":4817}`, "completed", "fence ", "<- job ", "acknowledged job",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the quick start's output lacks %q:\n%s", want, out)
		}
	}
}
