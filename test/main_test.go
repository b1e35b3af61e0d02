//go:build unix

package test

import (
	"fmt"
	"os"
	"testing"

	"github.com/holdfast/holdfast/test/harness"
)

// env is the built binary and port allocator every test of this package
// shares; TestMain sets it before any test runs.
var env *harness.Env

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// HOLDFAST_TEST_RACE_BINARY=1 builds the service itself with -race.
	e, cleanup, err := harness.Setup(harness.BuildOptions{Race: os.Getenv("HOLDFAST_TEST_RACE_BINARY") == "1"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "building holdfast:", err)
		return 1
	}
	defer cleanup()
	env = e
	return m.Run()
}
