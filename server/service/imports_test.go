package service

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// transports are the packages of the HTTP and MCP layers.
var transports = []string{"github.com/gin-gonic/", "net/http", "github.com/modelcontextprotocol/"}

func isTransport(path string) bool {
	for _, p := range transports {
		if path == p || strings.HasPrefix(path, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// TestNoTransportImports: the service is below every transport. None of
// its files imports gin, net/http (or a package under it) or the MCP SDK;
// and nothing it depends on brings in gin or the MCP SDK (the cluster
// package's node-to-node HTTP is below the service, not above it).
func TestNoTransportImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("list the package's files: %v", err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if isTransport(path) {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if isTransport(dep) && !strings.HasPrefix(dep, "net/http") {
			t.Errorf("the service depends on %s", dep)
		}
	}
}
