//go:build unix

package test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageSaysWhatItOwns: every package of the module has a doc.go
// holding its package comment, and the comment says what the package must
// never do.
func TestEveryPackageSaysWhatItOwns(t *testing.T) {
	root := ".."
	dirs := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			dirs[filepath.Dir(path)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found %d package directories under %s", len(dirs), root)
	}
	for dir := range dirs {
		name := filepath.Join(dir, "doc.go")
		if _, err := os.Stat(name); err != nil {
			t.Errorf("%s has no doc.go", dir)
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if f.Doc == nil {
			t.Errorf("%s has no package comment", name)
			continue
		}
		if doc := f.Doc.Text(); !strings.Contains(doc, "never") {
			t.Errorf("%s does not say what the package must never do:\n%s", name, doc)
		}
	}
}
