package harness

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// QuickStartScript returns the shell blocks of the README's Quick start
// section (between "## Quick start" and "## The command line") as one
// script that stops at the first failing command, for a directory holding
// the built binary as ./holdfast: each block's `go build` line is left out.
func QuickStartScript(readmePath string) (string, error) {
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		return "", fmt.Errorf("read the README: %w", err)
	}
	text := string(readme)
	start := strings.Index(text, "\n## Quick start\n")
	end := strings.Index(text, "\n## The command line\n")
	if start < 0 || end < start {
		return "", fmt.Errorf("%s has no Quick start section followed by The command line", readmePath)
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(text[start:end], -1)
	if len(blocks) < 3 {
		return "", fmt.Errorf("the quick start of %s has %d shell blocks, want at least 3", readmePath, len(blocks))
	}
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, b := range blocks {
		for _, line := range strings.Split(b[1], "\n") {
			if !strings.HasPrefix(line, "go build ") {
				script.WriteString(line + "\n")
			}
		}
	}
	return script.String(), nil
}
