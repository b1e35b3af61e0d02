//go:build unix

package fault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// baselineCommit is the release the upgrade scenarios start from: the last
// build of cluster level 3 (baselineLevel), the level before this build's,
// which keeps its snapshots as checkpoints of its state store but sends a
// follower the state machine's format. Upgrades go one level at a time.
const baselineCommit = "584ef8b"

// CacheEnv is the directory that keeps built baselines between runs
// (default: the user's cache directory, under holdfast-fault).
const CacheEnv = "HOLDFAST_FAULT_CACHE"

// baselineBinaryName keeps "holdfast" out of the process name, like
// harness.DefaultBinaryName.
const baselineBinaryName = "hfnode-baseline"

// baseline returns the baseline binary, building it on first use.
func (s *suite) baseline() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.baselineBin != "" {
		return s.baselineBin, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := buildCommit(ctx, baselineCommit, s.cfg.race)
	if err != nil {
		return "", err
	}
	s.baselineBin = bin
	return bin, nil
}

// baselineBuilt reports whether the baseline needs no build.
func (s *suite) baselineBuilt() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.baselineBin != ""
}

// buildCommit builds the holdfast binary of a commit of this repository's
// own history, from a `git archive` of it, and keeps it in the cache
// directory under the commit's full hash: a second run reuses it.
func buildCommit(ctx context.Context, commit string, race bool) (string, error) {
	root, err := gitOutput(ctx, "", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	full, err := gitOutput(ctx, root, "rev-parse", "--verify", "--quiet", commit+"^{commit}")
	if err != nil {
		return "", fmt.Errorf("commit %s, the upgrade scenarios' baseline, is not in this clone (a shallow clone? `git fetch --unshallow` brings the history): %w", commit, err)
	}
	cache := os.Getenv(CacheEnv)
	if cache == "" {
		if cache, err = os.UserCacheDir(); err != nil {
			return "", fmt.Errorf("no cache directory (set %s): %w", CacheEnv, err)
		}
		cache = filepath.Join(cache, "holdfast-fault")
	}
	name := "baseline-" + full
	if race {
		name += "-race"
	}
	dir := filepath.Join(cache, name)
	bin := filepath.Join(dir, baselineBinaryName)
	if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() && st.Mode()&0o100 != 0 {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the baseline cache: %w", err)
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", fmt.Errorf("create the baseline build directory: %w", err)
	}
	defer os.RemoveAll(work)
	src, tarball := filepath.Join(work, "src"), filepath.Join(work, "src.tar")
	if _, err := gitOutput(ctx, root, "archive", "--format=tar", "-o", tarball, full); err != nil {
		return "", fmt.Errorf("export commit %s: %w", commit, err)
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", fmt.Errorf("create the baseline source directory: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpack commit %s: %w: %s", commit, err, out)
	}
	built, err := harness.Build(ctx, work, harness.BuildOptions{Root: src, Name: baselineBinaryName, Race: race})
	if err != nil {
		return "", fmt.Errorf("build commit %s: %w", commit, err)
	}
	// Renamed into place whole, so an interrupted build leaves no binary.
	if err := os.Rename(built, bin); err != nil {
		return "", fmt.Errorf("keep the baseline binary: %w", err)
	}
	return bin, nil
}

// gitOutput runs git in dir ("" for the current directory) and returns its
// trimmed output.
func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}
