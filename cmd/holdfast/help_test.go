package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpGoesToStdout: a command's -h is its output (stdout, exit 0), as
// `holdfast --help` is; arguments after "--" belong to the command exec runs.
func TestHelpGoesToStdout(t *testing.T) {
	for _, args := range [][]string{{"lease", "acquire", "-h"}, {"snapshot", "save", "--help"}, {"exec", "-h"}, {"lease", "-h"}, {"--help"}} {
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != exitOK || stdout.Len() == 0 || stderr.Len() != 0 {
			t.Errorf("%q: exit %d, %d bytes on stdout, stderr %q", args, code, stdout.Len(), stderr.String())
		}
	}
	if !asksHelp([]string{"--key", "k", "-h"}) || asksHelp([]string{"--key", "k", "--", "ls", "-h"}) {
		t.Error("asksHelp does not stop at --")
	}
}

// TestTyposGetASuggestion: an unknown command names the closest one.
func TestTyposGetASuggestion(t *testing.T) {
	for args, want := range map[string]string{
		"leas":          `did you mean "lease"`,
		"lease aquire":  `did you mean "acquire"`,
		"snapshot sve":  `did you mean "save"`,
		"cluster statu": `did you mean "status"`,
	} {
		var stdout, stderr bytes.Buffer
		if code := run(strings.Fields(args), &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), want) {
			t.Errorf("%q: exit %d: %s", args, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if run([]string{"zzzzzzzz"}, &stdout, &stderr); strings.Contains(stderr.String(), "did you mean") {
		t.Errorf("a suggestion for nothing alike: %s", stderr.String())
	}
}
