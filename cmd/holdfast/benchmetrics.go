package main

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// APIPrefixForClients is the API's path prefix under a node's base URL.
const APIPrefixForClients = "/services/v1"

// outcomes counts the service's proposals by outcome.
type outcomes map[string]float64

// minus is o - before, written as " applied=N busy=N ..." in sorted order.
func (o outcomes) minus(before outcomes) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(o)) {
		fmt.Fprintf(&b, " %s=%.0f", k, o[k]-before[k])
	}
	return b.String()
}

// proposalCounts sums holdfast_proposals_total by outcome over the nodes'
// /metrics.
func proposalCounts(hc *http.Client, nodes []string) (outcomes, error) {
	sum := outcomes{"applied": 0, "busy": 0, "not_leader": 0, "storage": 0, "outcome_unknown": 0}
	for _, base := range nodes {
		resp, err := hc.Get(base + "/metrics")
		if err != nil {
			return nil, fmt.Errorf("read the proposal counts: %w", err)
		}
		err = addProposals(resp.Body, sum)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("read the proposal counts of %s: %w", base, err)
		}
	}
	return sum, nil
}

// addProposals adds the holdfast_proposals_total samples of a Prometheus
// text exposition to sum.
func addProposals(r io.Reader, sum outcomes) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, `holdfast_proposals_total{outcome="`)
		if !ok {
			continue
		}
		name, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			return fmt.Errorf("unexpected sample %q", line)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return fmt.Errorf("sample %q: %w", line, err)
		}
		sum[name] += v
	}
	return sc.Err()
}

// startProfiles, when dir is set, fetches a CPU profile of every node over
// the middle third of a run of length d; the function it returns waits for
// them.
func startProfiles(hc *http.Client, nodes []string, dir string, d time.Duration) func() error {
	if dir == "" {
		return func() error { return nil }
	}
	secs := max(1, int(d.Seconds()/3))
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, base := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(d / 3)
			errs <- fetchProfile(hc, base, dir, secs)
		}()
	}
	return func() error {
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
}

func fetchProfile(hc *http.Client, base, dir string, secs int) error {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs), nil)
	if err != nil {
		return fmt.Errorf("profile request: %w", err)
	}
	if key := os.Getenv("HOLDFAST_CLUSTER_KEY"); key != "" {
		req.Header.Set("X-Holdfast-Cluster-Key", key)
	}
	c := *hc
	c.Timeout = time.Duration(secs+30) * time.Second
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("profile of %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile of %s: HTTP %d", base, resp.StatusCode)
	}
	u, _ := url.Parse(base)
	name := strings.NewReplacer(":", "_", "/", "_").Replace(u.Host) + ".pprof"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("profile dir: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("profile file: %w", err)
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("write the profile of %s: %w", base, err)
	}
	return f.Close()
}
