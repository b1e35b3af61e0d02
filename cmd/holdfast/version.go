package main

import (
	"fmt"
	"io"
	"runtime/debug"
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

func version(stdout io.Writer) int {
	fmt.Fprintln(stdout, versionInfo())
	return 0
}
