package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

// versionInfo describes the binary from its build information: the module
// version ("(devel)" for a build from a checkout), the commit it was built
// from (with "+dirty" for uncommitted changes) and the Go version.
func versionInfo() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "holdfast (no build information)"
	}
	commit := "unknown"
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty {
		commit += "+dirty"
	}
	return fmt.Sprintf("holdfast %s commit %s %s", bi.Main.Version, commit, bi.GoVersion)
}

// shortVersion is a build_version as versionInfo writes it cut down to the
// module version and the commit's first 7 characters ("(devel) 1a2b3c4"),
// for a table; another form is returned whole, an empty one as "-".
func shortVersion(v string) string {
	f := strings.Fields(v)
	if len(f) != 5 || f[0] != "holdfast" || f[2] != "commit" {
		return orDash(v)
	}
	commit, dirty := strings.CutSuffix(f[3], "+dirty")
	if len(commit) > 7 {
		commit = commit[:7]
	}
	if dirty {
		commit += "+dirty"
	}
	return f[1] + " " + commit
}

func version(stdout io.Writer) int {
	fmt.Fprintln(stdout, versionInfo())
	return 0
}
