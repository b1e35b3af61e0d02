//go:build unix

package test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// markdownSection returns the text of the markdown file name (a path from the
// repository's root) from the heading title to the next heading of the same
// level.
func markdownSection(t *testing.T, name, title string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "\n"+title+"\n")
	if start < 0 {
		t.Fatalf("%s has no section %q", name, title)
	}
	level := strings.SplitN(title, " ", 2)[0]
	rest := text[start+len(title)+2:]
	if end := strings.Index(rest, "\n"+level+" "); end >= 0 {
		rest = rest[:end]
	}
	return rest
}

// TestServiceFiles checks the systemd unit of cluster/README.md (the README
// links to it) with systemd-analyze verify (any complaint fails) and every
// variable of its environment file against the flags `holdfast serve` has.
func TestServiceFiles(t *testing.T) {
	section := markdownSection(t, "cluster/README.md", "## Running as a service")
	envBlock := regexp.MustCompile("(?s)`/etc/holdfast/holdfast.env`.*?```sh\n(.*?)```").FindStringSubmatch(section)
	unitBlock := regexp.MustCompile("(?s)`/etc/systemd/system/holdfast.service`:\n\n```ini\n(.*?)```").FindStringSubmatch(section)
	if envBlock == nil || unitBlock == nil {
		t.Fatal("the section lacks the environment file or the unit")
	}

	help, _ := exec.Command(env.Binary, "serve", "-h").CombinedOutput()
	vars := 0
	for _, line := range strings.Split(envBlock[1], "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, ok := strings.Cut(line, "=")
		flagName, isOurs := strings.CutPrefix(name, "HOLDFAST_")
		if !ok || !isOurs {
			t.Errorf("environment file line %q is not HOLDFAST_NAME=value", line)
			continue
		}
		vars++
		flagName = strings.ToLower(strings.ReplaceAll(flagName, "_", "-"))
		if !regexp.MustCompile(`(?m)^\s+-` + regexp.QuoteMeta(flagName) + `\b`).Match(help) {
			t.Errorf("%s names no serve flag --%s", name, flagName)
		}
	}
	if vars < 5 {
		t.Fatalf("the environment file has %d variables", vars)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian's systemd package has it)")
	}
	dir := t.TempDir()
	envFile := filepath.Join(dir, "holdfast.env")
	if err := os.WriteFile(envFile, []byte(envBlock[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	// The unit as written, with the paths of this machine.
	unit := strings.NewReplacer("/usr/local/bin/holdfast", env.Binary, "/etc/holdfast/holdfast.env", envFile).Replace(unitBlock[1])
	unitFile := filepath.Join(dir, "holdfast.service")
	if err := os.WriteFile(unitFile, []byte(unit), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, analyze, "verify", unitFile)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if err != nil || strings.TrimSpace(out.String()) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s\nunit:\n%s", err, out.String(), unit)
	}
}
