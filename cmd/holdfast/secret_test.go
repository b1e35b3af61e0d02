package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShortKeyNamesTheMissingNamespace: a key too short to be a secret,
// given without a namespace, is refused before any request, naming
// --namespace and HOLDFAST_NAMESPACE; an empty @FILE secret is an error.
func TestShortKeyNamesTheMissingNamespace(t *testing.T) {
	t.Setenv("HOLDFAST_NAMESPACE", "")
	empty := filepath.Join(t.TempDir(), "ns")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, run := range map[string]func(stdout, stderr *bytes.Buffer) int{
		"exec": func(stdout, stderr *bytes.Buffer) int {
			return execCommand([]string{"--addr", "127.0.0.1:1", "--key", "nightly-report", "--", "true"}, stdout, stderr)
		},
		"lease acquire": func(stdout, stderr *bytes.Buffer) int {
			return leaseVerb("acquire")([]string{"--addr", "127.0.0.1:1", "--key", "nightly-report"}, stdout, stderr)
		},
	} {
		var stdout, stderr bytes.Buffer
		code := run(&stdout, &stderr)
		msg := stderr.String()
		if code != exitUsage || !strings.Contains(msg, "--namespace") || !strings.Contains(msg, "HOLDFAST_NAMESPACE") || !strings.Contains(msg, "has 14") {
			t.Errorf("%s with a short key and no namespace: exit %d: %s", name, code, msg)
		}
	}
	var stdout, stderr bytes.Buffer
	code := leaseVerb("acquire")([]string{"--addr", "127.0.0.1:1", "--namespace", "@" + empty, "--key", "nightly-report"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), "is empty") || !strings.Contains(stderr.String(), "--namespace") {
		t.Errorf("an empty @FILE namespace: exit %d: %s", code, stderr.String())
	}
}
