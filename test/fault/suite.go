//go:build unix

package fault

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/faultfs"
	"github.com/holdfast/holdfast/test/harness"
)

// Environment variables of the suite.
const (
	// SeedEnv replays a run's random choices (printed by every run).
	SeedEnv = "HOLDFAST_FAULT_SEED"
	// BudgetEnv is the suite's time budget, e.g. "40m". Setting it selects
	// the full matrix; without it a short smoke runs.
	BudgetEnv = "HOLDFAST_FAULT_BUDGET"
	// MatrixEnv forces "smoke" or "full" whatever the budget, or selects
	// only the upgrade scenarios ("upgrade").
	MatrixEnv = "HOLDFAST_FAULT_MATRIX"
	// ArtifactsEnv is a directory that keeps every run's history, node
	// logs and visualization (otherwise they are kept only on failure).
	ArtifactsEnv = "HOLDFAST_FAULT_ARTIFACTS"
	// RaceBinaryEnv=1 builds the service with the race detector.
	RaceBinaryEnv = "HOLDFAST_TEST_RACE_BINARY"
)

// smokeBudget is the default budget: `go test ./...` stays quick.
const smokeBudget = 6 * time.Minute

type config struct {
	seed      uint64
	budget    time.Duration
	full      bool
	upgrades  bool
	artifacts string
	race      bool
}

func loadConfig() (config, error) {
	c := config{budget: smokeBudget, race: os.Getenv(RaceBinaryEnv) == "1"}
	if v := os.Getenv(SeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", SeedEnv, v, err)
		}
		c.seed = s
	} else {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return c, fmt.Errorf("random seed: %w", err)
		}
		c.seed = binary.LittleEndian.Uint64(b[:]) >> 1
	}
	if v := os.Getenv(BudgetEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", BudgetEnv, v, err)
		}
		c.budget, c.full = d, true
	}
	switch v := os.Getenv(MatrixEnv); v {
	case "":
	case "smoke":
		c.full = false
	case "full":
		c.full = true
	case "upgrade":
		c.upgrades = true
	default:
		return c, fmt.Errorf("%s=%q: want smoke, full or upgrade", MatrixEnv, v)
	}
	if v := os.Getenv(ArtifactsEnv); v != "" {
		abs, err := filepath.Abs(v)
		if err != nil {
			return c, fmt.Errorf("%s: %w", ArtifactsEnv, err)
		}
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return c, fmt.Errorf("%s: %w", ArtifactsEnv, err)
		}
		c.artifacts = abs
	}
	return c, nil
}

// suite is what every test of the package shares: the configuration, the
// deadline of the budget, the normal binary and the planted-bug builds
// (made on first use), and the result rows.
type suite struct {
	cfg      config
	deadline time.Time
	ports    *harness.PortAllocator
	binDir   string

	mu     sync.Mutex
	tagged map[string]*harness.Env
	rows   []*Result
	// baselineBin is the upgrade scenarios' older build, once built.
	baselineBin string
}

func newSuite(cfg config, ports *harness.PortAllocator, binDir string) *suite {
	return &suite{cfg: cfg, deadline: time.Now().Add(cfg.budget), ports: ports, binDir: binDir, tagged: map[string]*harness.Env{}}
}

// built reports whether the binary for tag ("" for the real service) has
// been built already.
func (s *suite) built(tag string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.tagged[tag]
	return ok
}

// envFor returns the environment running the binary built with tag ("":
// the real service), building it on first use.
func (s *suite) envFor(tag string) (*harness.Env, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.tagged[tag]; ok {
		return e, nil
	}
	name := tag
	if name == "" {
		name = "service"
	}
	dir := filepath.Join(s.binDir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create build dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	opts := harness.BuildOptions{Race: s.cfg.race}
	if tag != "" {
		opts.Tags = []string{tag}
	}
	bin, err := harness.Build(ctx, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("build holdfast (tags %q): %w", tag, err)
	}
	e := &harness.Env{Binary: bin, Ports: s.ports}
	s.tagged[tag] = e
	return e, nil
}

// estimate is the time sc is expected to take, builds included.
func (s *suite) estimate(sc Scenario) time.Duration {
	d := sc.estimate(s.built(sc.Tag))
	if scripted(sc.Nemesis) && !s.baselineBuilt() {
		d += 90 * time.Second
	}
	return d
}

func (s *suite) addRow(r *Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rows = append(s.rows, r)
}

// table renders the rows so far.
func (s *suite) table() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	b.WriteString(ResultHeader + "\n")
	for _, r := range s.rows {
		b.WriteString(r.Row() + "\n")
	}
	return b.String()
}

// runScenarios runs each scenario as a subtest while the budget lasts;
// those that would overrun it are skipped and listed.
func (s *suite) runScenarios(t *testing.T, scs []Scenario) {
	t.Logf("suite seed %d (replay with %s=%d); budget %v (%s)", s.cfg.seed, SeedEnv, s.cfg.seed, s.cfg.budget, map[bool]string{true: "full matrix", false: "smoke"}[s.cfg.full])
	var skipped []string
	for _, sc := range scs {
		if left := time.Until(s.deadline); left < s.estimate(sc) {
			skipped = append(skipped, sc.Name)
			t.Run(sc.Name, func(t *testing.T) {
				t.Skipf("skipped: the time budget (%s=%v) has %v left, this scenario needs about %v", BudgetEnv, s.cfg.budget, left.Round(time.Second), s.estimate(sc))
			})
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			res := s.runScenario(t, sc)
			if res != nil {
				s.addRow(res)
				fmt.Printf("FAULT-RESULT %s\n", res.Row())
				if res.Outcome == "FAILED" || res.Outcome == "NOT DETECTED" {
					fmt.Print(res.detailLines())
				}
			}
		})
	}
	table := s.table()
	t.Logf("results:\n%s", table)
	fmt.Print("\n" + table)
	if s.cfg.artifacts != "" {
		_ = os.WriteFile(filepath.Join(s.cfg.artifacts, "results-"+sanitize(t.Name())+".txt"), []byte(table), 0o644)
	}
	if len(skipped) > 0 {
		t.Skipf("time budget %v used up: %d scenarios skipped: %s", s.cfg.budget, len(skipped), strings.Join(skipped, ", "))
	}
}

// runScenario forms the cluster, runs the workload under the nemesis,
// heals, drains, checks and reports. It returns the result row.
func (s *suite) runScenario(t *testing.T, sc Scenario) *Result {
	began := time.Now()
	if onDisks(sc.Nemesis) {
		if err := faultfs.Usable(); err != nil {
			t.Skipf("%s serves the data directories through FUSE: %v", sc.Nemesis, err)
		}
	}
	env, err := s.envFor(sc.Tag)
	if err != nil {
		t.Fatal(err)
	}
	r := newRun(t, s, sc)
	if scripted(sc.Nemesis) {
		if r.baseline, err = s.baseline(); err != nil {
			t.Fatal(err)
		}
	}
	r.form(env)

	var w workload
	switch sc.Workload {
	case WorkloadLease:
		w = newLeaseWorkload(r, nil)
	case WorkloadFenced:
		w = newLeaseWorkload(r, NewFencedStore(true))
	case WorkloadNoFence:
		w = newLeaseWorkload(r, NewFencedStore(false))
	case WorkloadQueue:
		w = newQueueWorkload(r)
	case WorkloadLeaseQueue:
		w = bothWorkloads{newLeaseWorkload(r, nil), newQueueWorkload(r)}
	case WorkloadSlotsCheckpoint:
		w = bothWorkloads{newSlotsWorkload(r), newCheckpointWorkload(r)}
	default:
		t.Fatalf("unknown workload %q", sc.Workload)
	}
	if err := w.setup(context.Background()); err != nil {
		t.Fatalf("workload setup: %v", err)
	}

	// The clients run for the scenario's duration; under a scripted walk,
	// until the walk has ended and the tail has passed.
	ctx, cancel := context.WithTimeout(context.Background(), sc.Duration)
	nemCtx, nemCancel := context.WithTimeout(context.Background(), max(sc.Duration-nemesisTail, time.Second))
	if scripted(sc.Nemesis) {
		cancel()
		ctx, cancel = context.WithCancel(context.Background())
		nemCancel()
		nemCtx, nemCancel = context.WithCancel(context.Background())
	}
	defer cancel()
	defer nemCancel()
	var wg sync.WaitGroup
	w.start(ctx, &wg)
	nemDone := make(chan struct{})
	go func() {
		defer close(nemDone)
		newNemesis(r).loop(nemCtx)
	}()
	<-nemDone
	if scripted(sc.Nemesis) {
		sleepCtx(ctx, nemesisTail)
		cancel()
	}
	wg.Wait()
	r.checkNoCrash(scripted(sc.Nemesis))
	r.rec.Note("workload-end", sc.Name)

	r.ensureHealed()
	r.drain()
	if r.converged {
		if err := w.final(context.Background()); err != nil {
			r.problem("final reads after healing failed: %v", err)
		}
		r.checkEndLevel()
	}
	res := r.baseResult()
	res.Converged = r.converged
	w.check(res)

	r.mu.Lock()
	problems := append([]string(nil), r.problems...)
	answers, notes := r.answers, append([]string(nil), r.answerNotes...)
	res.Notes = append(res.Notes, r.notes...)
	r.mu.Unlock()
	res.Violations += len(problems)
	res.Details = append(res.Details, problems...)
	if answers > 0 {
		res.Violations += answers
		res.Unexpected += answers
		res.Details = append(res.Details, fmt.Sprintf("%d answers no correct service gives, e.g.: %s", answers, strings.Join(notes, " | ")))
	}
	res.Elapsed = time.Since(began)
	if err := r.rec.Flush(); err != nil {
		t.Errorf("history: %v", err)
	}

	switch {
	case sc.ExpectViolation && res.Violations > 0:
		res.Outcome = "detected (expected)"
	case sc.ExpectViolation:
		res.Outcome = "NOT DETECTED"
	case res.Violations > 0:
		res.Outcome = "FAILED"
	default:
		res.Outcome = "passed"
	}
	summary := fmt.Sprintf("%s\n%s\n%s in %v, %d faults\n  %s", ResultHeader, res.Row(), sc.Name, res.Elapsed.Round(time.Second), res.Faults,
		strings.Join(append(append([]string(nil), res.Details...), res.Notes...), "\n  "))
	_ = os.WriteFile(filepath.Join(r.dir, "result.txt"), []byte(summary+"\n"), 0o644)
	t.Log(summary)
	switch {
	case sc.ExpectViolation && res.Violations == 0:
		t.Errorf("%s: the checkers found nothing wrong; %s should have been caught (by %s)", sc.Name, describeTag(sc), sc.Expect)
	case !sc.ExpectViolation && res.Violations > 0:
		t.Errorf("%s: %d violations:\n  %s", sc.Name, res.Violations, strings.Join(res.Details, "\n  "))
	}
	return res
}

func describeTag(sc Scenario) string {
	if sc.Tag == "" {
		return "the disabled fence check"
	}
	return "the planted bug " + sc.Tag
}
