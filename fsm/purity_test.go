package fsm

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPackageIsPure enforces the determinism rules statically: the state
// machine's code imports no clock, no random source, no operating-system,
// network or unsafe package, so Apply cannot depend on anything but the
// command and the state.
func TestPackageIsPure(t *testing.T) {
	forbidden := map[string]string{
		"time":         "the clock comes from the command",
		"math/rand":    "no randomness in the state machine",
		"math/rand/v2": "no randomness in the state machine",
		"crypto/rand":  "no randomness in the state machine",
		"os":           "no I/O in the state machine",
		"os/exec":      "no I/O in the state machine",
		"io/ioutil":    "no I/O in the state machine",
		"io/fs":        "no I/O in the state machine",
		"net":          "no I/O in the state machine",
		"net/http":     "no I/O in the state machine",
		"syscall":      "no I/O in the state machine",
		"unsafe":       "no unsafe memory in the state machine",
		"runtime":      "no runtime-dependent behaviour",
		"flag":         "no local flags in the state machine",
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || !inBuild(t, name) {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if why, bad := forbidden[path]; bad {
				t.Errorf("%s imports %q: %s", name, path, why)
			}
			if strings.HasPrefix(path, "github.com/holdfast/holdfast/") && !strings.HasPrefix(path, "github.com/holdfast/holdfast/internal/") {
				t.Errorf("%s imports %q: fsm may use only internal leaf helpers", name, path)
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked only %d files; is the test running in the package directory?", checked)
	}
}

// inBuild reports whether the file is part of this build (its build
// constraints hold). Planted-bug files, compiled only with their tag, are
// the deliberate exception the fault suite uses.
func inBuild(t *testing.T, name string) bool {
	t.Helper()
	ok, err := build.Default.MatchFile(".", name)
	if err != nil {
		t.Fatalf("match %s: %v", name, err)
	}
	return ok
}

// TestNoGoroutinesOrSelect rejects concurrency constructs inside the state
// machine's code, whose scheduling order could leak into results.
func TestNoGoroutinesOrSelect(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || !inBuild(t, name) {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n.(type) {
			case *ast.GoStmt, *ast.SelectStmt:
				t.Errorf("%s: %s at %v", name, "goroutine or select in the state machine", fset.Position(n.Pos()))
			}
			return true
		})
	}
}
