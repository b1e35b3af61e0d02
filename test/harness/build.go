package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

// BuildOptions says how the holdfast binary is built.
type BuildOptions struct {
	// Race builds the binary with the race detector (slower processes).
	Race bool
	// Package is the main package to build, relative to the module root
	// (default ./cmd/holdfast).
	Package string
	// OutDir receives the binary; empty means a new temporary directory,
	// removed by the cleanup function Setup returns.
	OutDir string
	// Name is the binary's file name (default DefaultBinaryName).
	Name string
	// Tags are build tags (go build -tags), e.g. the planted-bug tags the
	// fault suite builds to prove its checkers fail; none by default.
	Tags []string
	// Root is the module root to build in (default: the module of the
	// current directory), e.g. an older commit's source tree.
	Root string
}

// PlantedBugTags returns the planted-bug build tags (holdfast_bug_...)
// the running test binary was built with, for a test package whose nodes
// are to run the same planted bug: `go test -tags holdfast_bug_x` then
// shows the package's tests catching it.
func PlantedBugTags() []string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var tags []string
	for _, s := range info.Settings {
		if s.Key != "-tags" {
			continue
		}
		for _, tag := range strings.Split(s.Value, ",") {
			if strings.HasPrefix(tag, "holdfast_bug_") {
				tags = append(tags, tag)
			}
		}
	}
	return tags
}

// DefaultBinaryName is deliberately not "holdfast": people and scripts on a
// shared machine stop their own nodes with `pkill holdfast` or `killall
// holdfast`, which must not reach the nodes of a running test (neither the
// name nor the command line of a test node contains "holdfast").
const DefaultBinaryName = "hfnode-under-test"

// Env is what every cluster of one test binary shares: the binary and the
// port allocator. Create one in TestMain with Setup and pass it around.
type Env struct {
	// Binary is the path of the built holdfast binary.
	Binary string
	// Ports hands out loopback ports not used by any other cluster of this
	// test binary.
	Ports *PortAllocator
	// CheckResponse, when set, is given every answer a node's Do or DoWith
	// receives, with the request that asked for it; an error fails the test
	// that made the cluster. OpenAPIChecker.Check is one.
	CheckResponse func(req *http.Request, status int, header http.Header, body []byte) error
}

// Setup builds the binary and returns the Env every cluster uses, and a
// cleanup function that removes what Setup created.
func Setup(opts BuildOptions) (*Env, func(), error) {
	cleanup := func() {}
	out := opts.OutDir
	if out == "" {
		dir, err := os.MkdirTemp("", "hf-test-bin-")
		if err != nil {
			return nil, cleanup, fmt.Errorf("create build dir: %w", err)
		}
		out = dir
		cleanup = func() { _ = os.RemoveAll(dir) }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := Build(ctx, out, opts)
	if err != nil {
		cleanup()
		return nil, func() {}, err
	}
	ports, err := NewPortAllocator()
	if err != nil {
		cleanup()
		return nil, func() {}, err
	}
	return &Env{Binary: bin, Ports: ports}, cleanup, nil
}

// Build compiles the holdfast binary into outDir and returns its path. The
// module root is found from the current directory (any directory inside the
// module).
func Build(ctx context.Context, outDir string, opts BuildOptions) (string, error) {
	goBin, err := goTool()
	if err != nil {
		return "", err
	}
	root := opts.Root
	if root == "" {
		if root, err = moduleRoot(ctx, goBin); err != nil {
			return "", err
		}
	}
	pkg := opts.Package
	if pkg == "" {
		pkg = "./cmd/holdfast"
	}
	name := opts.Name
	if name == "" {
		name = DefaultBinaryName
	}
	bin := filepath.Join(outDir, name)
	args := []string{"build", "-o", bin}
	if opts.Race {
		args = append(args, "-race")
	}
	if len(opts.Tags) > 0 {
		args = append(args, "-tags", strings.Join(opts.Tags, ","))
	}
	args = append(args, pkg)
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), root, err, out.String())
	}
	return bin, nil
}

// goTool finds the go command: on PATH (go test puts GOROOT/bin first), else
// under $GOROOT, else the usual install location.
func goTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	for _, p := range []string{filepath.Join(os.Getenv("GOROOT"), "bin", "go"), "/usr/local/go/bin/go"} {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", errors.New("go command not found on PATH, in $GOROOT/bin or /usr/local/go/bin")
}

func moduleRoot(ctx context.Context, goBin string) (string, error) {
	out, err := exec.CommandContext(ctx, goBin, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside a Go module: run the tests from within the holdfast module")
	}
	return filepath.Dir(mod), nil
}
