//go:build unix

package test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// uiArtifactsEnv names a directory where TestStatusPageInBrowser keeps its
// screenshot (CI sets it); without it the screenshot goes to the test's
// temporary directory.
const uiArtifactsEnv = "HOLDFAST_ARTIFACTS_DIR"

// TestStatusPageInBrowser loads the status page of a follower of a
// three-node cluster in headless Chromium and reads the rendered DOM: the
// leader named, three members, counts that match the API. It keeps a
// screenshot, and checks the page's browser protections and that no secret
// reaches its data.
func TestStatusPageInBrowser(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (Debian's chromium package; .ci/run installs it)")
	}
	c := env.NewCluster(t, 3, harness.Options{})
	c.StartBootstrap()
	c.WaitAllReady()
	leader := c.WaitLeader()
	follower := harness.Except(c.Nodes(), leader)[0]
	cli := newCLIEnv(t, follower)

	// Three leases (one completed), one queue with two jobs (one claimed).
	ns := cli.secret(cli.want(0, nil, "lease", "namespace", "--field", "namespace").stdout)
	e := []string{"HOLDFAST_NAMESPACE=" + ns}
	for _, k := range []string{"a", "b"} {
		cli.secret(cli.want(0, e, "lease", "acquire", "--key", k, "--ttl", "600", "--field", "owner_token").stdout)
	}
	own := cli.secret(cli.want(0, e, "lease", "acquire", "--key", "c", "--field", "owner_token").stdout)
	cli.want(0, e, "lease", "complete", "--key", "c", "--owner-token", own, "--result", `{"done":true}`)
	qe := cli.queueEnv()
	cli.want(0, qe, "queue", "enqueue", "--key", "j1", "--payload", `{"n":1}`)
	cli.want(0, qe, "queue", "enqueue", "--key", "j2", "--payload", `{"n":2}`)
	cli.secret(cli.want(0, qe, "queue", "claim", "--field", "job.receipt").stdout)
	c.WaitSameState()

	// The page's data, through the harness (checked against the OpenAPI
	// document like every answer), holds no secret.
	r, err := follower.Get("/ui/status.json")
	if err != nil || r.Status != http.StatusOK {
		t.Fatalf("status.json: %v %v", r, err)
	}
	for _, s := range *cli.secrets {
		if strings.Contains(string(r.Body), s) {
			t.Errorf("status.json holds a secret: %s", r.Body)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := follower.URL("/ui/")
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000"}
	// A member's status is asked for with a one-second bound: on a loaded
	// machine one refresh may show it unreachable, so the page is read up
	// to three times.
	var problems []string
	for attempt := 0; attempt < 3; attempt++ {
		dom, err := exec.CommandContext(ctx, browser, append(args, "--dump-dom", url)...).Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom %s: %v", url, err)
		}
		if problems = statusPageProblems(string(dom), leader.ID, follower.ID, *cli.secrets); len(problems) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	for _, p := range problems {
		t.Error(p)
	}

	// The second answer is asked for a second after the first, so rates
	// show before the two-second refresh: the browser runs 1.5 s of the
	// page's time.
	quick := append(slices.Clone(args[:len(args)-1]), "--virtual-time-budget=1500", "--dump-dom", url)
	dom, err := exec.CommandContext(ctx, browser, quick...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	if got := regexp.MustCompile(`<dd id="request_rate">([^<]*)</dd>`).FindStringSubmatch(string(dom)); got == nil || !regexp.MustCompile(`^\d[\d,]*\.\d$`).MatchString(got[1]) {
		t.Errorf("after 1.5 s the page shows request_rate %q, want a rate like 12.5", got)
	}

	// A member that stops is shown with a short reason.
	stopped := harness.Except(c.Nodes(), leader, follower)[0]
	c.Kill(stopped)
	for attempt := 0; attempt < 3; attempt++ {
		dom, err := exec.CommandContext(ctx, browser, append(args, "--dump-dom", url)...).Output()
		if err != nil {
			t.Fatalf("chromium --dump-dom %s: %v", url, err)
		}
		if problems = unreachableRowProblems(string(dom), stopped.ID); len(problems) == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	for _, p := range problems {
		t.Error(p)
	}

	dir := os.Getenv(uiArtifactsEnv)
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := filepath.Join(dir, "status-page.png")
	if out, err := exec.CommandContext(ctx, browser, append(args, "--window-size=1280,720", "--screenshot="+shot, url)...).CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	if st, err := os.Stat(shot); err != nil || st.Size() < 1000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot of %s: %s", url, shot)

	// The protections of /mcp: no cross-origin use, no foreign Host.
	for name, req := range map[string]harness.Request{
		"Origin":         {Method: http.MethodGet, Path: "/ui/status.json", Header: http.Header{"Origin": {"http://evil.example"}}},
		"cross-site":     {Method: http.MethodGet, Path: "/ui/", Header: http.Header{"Sec-Fetch-Site": {"cross-site"}}},
		"rebinding Host": {Method: http.MethodGet, Path: "/ui/status.json", Host: "evil.example"},
	} {
		r, err := follower.Do(context.Background(), req)
		if err != nil || r.Status != http.StatusForbidden {
			t.Errorf("%s: %v %v, want 403", name, r, err)
		}
	}
	r, err = follower.Get("/ui/")
	if err != nil || r.Header.Get("X-Frame-Options") != "DENY" || !strings.Contains(r.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
		t.Errorf("the page's headers: %v %v", r, err)
	}
}

// statusPageProblems checks a rendered status page: the node and leader
// named, three reachable members, the counts the test created, no secret.
func statusPageProblems(page, leaderID, nodeID string, secrets []string) []string {
	var out []string
	if got := regexp.MustCompile(`<strong id="leader">([^<]*)</strong>`).FindStringSubmatch(page); got == nil || got[1] != leaderID {
		out = append(out, fmt.Sprintf("the page names leader %q, the cluster's is %s", got, leaderID))
	}
	if got := regexp.MustCompile(`<strong id="node">([^<]*)</strong>`).FindStringSubmatch(page); got == nil || got[1] != nodeID {
		out = append(out, fmt.Sprintf("the page names node %q, it was loaded from %s", got, nodeID))
	}
	rows := regexp.MustCompile(`<tr data-id="([^"]+)"[^>]*>(.*?)</tr>`).FindAllStringSubmatch(page, -1)
	if len(rows) != 3 {
		out = append(out, fmt.Sprintf("the members table has %d rows, want 3:\n%s", len(rows), page))
	}
	for _, row := range rows {
		if strings.Contains(row[2], "unreachable") {
			out = append(out, fmt.Sprintf("member %s shows as unreachable: %s", row[1], row[2]))
		}
	}
	for id, want := range map[string]string{"leases": "3", "leases_held": "2", "queues": "1", "jobs_pending": "1", "jobs_claimed": "1", "jobs_completed": "0", "jobs_failed": "0", "max_leases": "50,000,000", "max_queues": "500,000"} {
		got := regexp.MustCompile(`<dd id="` + id + `">([^<]*)</dd>`).FindStringSubmatch(page)
		if got == nil || got[1] != want {
			out = append(out, fmt.Sprintf("the page shows %s = %q, want %s", id, got, want))
		}
	}
	for _, s := range secrets {
		if strings.Contains(page, s) {
			out = append(out, "the page shows a secret")
		}
	}
	return out
}

// unreachableRowProblems checks the row of a member that cannot be asked:
// a short reason in the cell, the whole error in its tooltip.
func unreachableRowProblems(page, id string) []string {
	row := regexp.MustCompile(`<tr data-id="` + id + `"[^>]*>(.*?)</tr>`).FindStringSubmatch(page)
	if row == nil {
		return []string{"no row for the stopped member " + id}
	}
	cells := regexp.MustCompile(`<td([^>]*)>([^<]*)</td>`).FindAllStringSubmatch(row[1], -1)
	if len(cells) == 0 {
		return []string{"the stopped member's row has no cells: " + row[1]}
	}
	last := cells[len(cells)-1]
	var out []string
	if last[2] != "connection refused" {
		out = append(out, fmt.Sprintf("the stopped member's reason is %q, want \"connection refused\"", last[2]))
	}
	if !strings.Contains(last[1], `title="`) || !strings.Contains(last[1], "dial tcp") {
		out = append(out, fmt.Sprintf("the stopped member's reason has no tooltip with the whole error: <td%s>", last[1]))
	}
	return out
}
