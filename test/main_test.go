//go:build unix

package test

import (
	"context"
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
	// HOLDFAST_TEST_RACE_BINARY=1 builds the service itself with -race;
	// `go test -tags holdfast_bug_...` builds it with that planted bug.
	e, cleanup, err := harness.Setup(harness.BuildOptions{
		Race: os.Getenv("HOLDFAST_TEST_RACE_BINARY") == "1",
		Tags: harness.PlantedBugTags(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "building holdfast:", err)
		return 1
	}
	defer cleanup()
	// Every answer a test receives must be one the OpenAPI document
	// describes.
	chk, err := harness.LoadOpenAPIChecker(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "loading the OpenAPI document:", err)
		return 1
	}
	e.CheckResponse = chk.Check
	env = e
	return m.Run()
}
