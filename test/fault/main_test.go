//go:build unix

package fault

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/holdfast/holdfast/test/harness"
)

// theSuite is set once by TestMain before any test runs and only read
// afterwards: a test binary has one suite (one budget, one set of builds).
var theSuite *suite

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run() // the scenario tests skip themselves
	}
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault suite:", err)
		return 1
	}
	// Binaries are built on first use, so the checkers' own tests run
	// without a build.
	binDir, err := os.MkdirTemp("", "hf-fault-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault suite:", err)
		return 1
	}
	defer os.RemoveAll(binDir)
	ports, err := harness.NewPortAllocator()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault suite:", err)
		return 1
	}
	theSuite = newSuite(cfg, ports, binDir)
	fmt.Printf("fault suite: seed %d (replay: %s=%d), budget %v, artifacts %q\n", cfg.seed, SeedEnv, cfg.seed, cfg.budget, cfg.artifacts)
	return m.Run()
}
