//go:build unix

package test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// storageLeaseTTL keeps the test's leases held for the whole test.
const storageLeaseTTL = 3600

// storageGrant is an acknowledged grant.
type storageGrant struct {
	owner string
	fence int64
}

// leaseAnswer is the part of a lease answer these tests read.
type leaseAnswer struct {
	Status       string `json:"status"`
	OwnerToken   string `json:"owner_token"`
	FencingToken int64  `json:"fencing_token"`
}

// acquireAcked acquires key through n with a request id, repeating the same
// request (which answers the same grant) until it is acknowledged.
func acquireAcked(t *testing.T, c *harness.Cluster, n *harness.Node, ns, key string) storageGrant {
	t.Helper()
	body := map[string]any{"namespace": ns, "key": key, "ttl_seconds": storageLeaseTTL, "request_id": randomKey(t)}
	var g storageGrant
	c.Eventually("the grant of "+key, func() error {
		r, err := n.PostJSON("/services/v1/lease", body, "")
		if err != nil {
			return err
		}
		var a leaseAnswer
		if r.Status != http.StatusCreated || r.Decode(&a) != nil || a.Status != "held" || a.FencingToken <= 0 {
			if r.Status == http.StatusServiceUnavailable {
				return fmt.Errorf("acquire %s: %s", key, r)
			}
			return fmt.Errorf("%w: acquire %s: %s", harness.ErrPermanent, key, r)
		}
		g = storageGrant{owner: a.OwnerToken, fence: a.FencingToken}
		return nil
	})
	return g
}

// acquireOnce sends one acquire of key through n that waits at most wait
// for a leader.
func acquireOnce(n *harness.Node, ns, key string, wait time.Duration) (*harness.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	return n.Do(ctx, harness.Request{Method: http.MethodPost, Path: "/services/v1/lease",
		JSON:   map[string]any{"namespace": ns, "key": key, "ttl_seconds": storageLeaseTTL},
		Header: http.Header{"X-Holdfast-Timeout": {strconv.FormatInt(wait.Milliseconds(), 10)}}})
}

// offsetInError is the offset a refusal names.
var offsetInError = regexp.MustCompile(`offset (\d+)`)

// TestStorageDamagedRecordRefusesAndLosesNothing plays a damaged byte in
// a follower's log end to end: A leads, C is down, 30 leases
// are acknowledged by A and B, A and B are killed and one byte about 2 KB
// before the end of B's written records is flipped. B must refuse to start,
// naming the segment and the record's offset, and leave the file as it
// is; C alone grants nothing; once A is back every lease is still held and
// the next fence is above them all; B, removed, wiped and joined again,
// catches up.
func TestStorageDamagedRecordRefusesAndLosesNothing(t *testing.T) {
	t.Parallel()
	c, a := formCluster(t, 3, harness.Options{})
	rest := harness.Except(c.Nodes(), a)
	b, cn := rest[0], rest[1]
	ns := mintNamespace(t, a)
	c.Stop(cn)

	keys := make([]string, 30)
	grants := map[string]storageGrant{}
	for i := range keys {
		keys[i] = fmt.Sprintf("acked-%02d", i)
		grants[keys[i]] = acquireAcked(t, c, a, ns, keys[i])
	}
	c.Kill(a)
	c.Kill(b)

	seg, err := harness.NewestSegment(b.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	end := seg.End()
	if end < 4096 {
		t.Fatalf("%s holds %d bytes of records, want at least 4096 to damage one 2 KB before their end", seg.Path, end)
	}
	flip := end - 2048
	rec, ok := seg.RecordAt(flip)
	if !ok {
		t.Fatalf("no record of %s holds offset %d", seg.Path, flip)
	}
	if err := harness.FlipByte(seg.Path, flip); err != nil {
		t.Fatal(err)
	}
	damaged, err := harness.FileSHA256(seg.Path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flipped the byte at offset %d of %s (record of entry %d at [%d, %d); records end at %d)", flip, seg.Path, rec.Index, rec.Offset, rec.End, end)

	c.Start(b)
	c.Start(cn)
	code, line, err := b.AwaitExit(30 * time.Second)
	if err != nil {
		t.Fatalf("%s started with a damaged record: %v", b.ID, err)
	}
	if code == 0 {
		t.Fatalf("%s exited with status 0 on a damaged record; want a refusal", b.ID)
	}
	if !strings.Contains(line, "corrupt") || !strings.Contains(line, seg.Path) {
		t.Fatalf("%s's refusal does not say corrupt and name %s: %q", b.ID, seg.Path, line)
	}
	t.Logf("%s refused to start: %s", b.ID, line)
	m := offsetInError.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("%s's refusal names no offset: %q", b.ID, line)
	}
	if off, _ := strconv.ParseInt(m[1], 10, 64); off < rec.Offset || off >= rec.End {
		t.Errorf("%s's refusal names offset %d, the damaged record is at [%d, %d): %q", b.ID, off, rec.Offset, rec.End, line)
	}
	if after, err := harness.FileSHA256(seg.Path); err != nil {
		t.Fatal(err)
	} else if after != damaged {
		t.Errorf("%s changed the damaged segment %s while refusing to start", b.ID, seg.Path)
	}

	// C alone has no quorum: every acquire of an acknowledged key is
	// refused with 503 not_applied, none granted.
	c.WaitHealthy(cn)
	answers := make([]*harness.Response, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = acquireOnce(cn, ns, key, 2*time.Second)
		}()
	}
	wg.Wait()
	for i, key := range keys {
		if errs[i] != nil {
			t.Fatalf("acquire %s through %s while A is away: %v", key, cn.ID, errs[i])
		}
		e := expectUnavailable(t, "acquire "+key+" through "+cn.ID+" while A is away", answers[i])
		if e.Outcome != "not_applied" {
			t.Errorf("acquire %s through %s: outcome %q, want not_applied", key, cn.ID, e.Outcome)
		}
	}

	// A returns: A and C serve, every acknowledged lease is still held by
	// its owner's fence, and the next fence is above them all.
	c.Start(a)
	if l := c.WaitLeader(a, cn); l != a {
		t.Fatalf("%s leads; only %s holds the acknowledged leases", l.ID, a.ID)
	}
	c.WaitAllReady(a, cn)
	var top int64
	for i, key := range keys {
		via := []*harness.Node{a, cn}[i%2]
		r, err := via.PostJSON("/services/v1/lease", map[string]any{"namespace": ns, "key": key, "ttl_seconds": storageLeaseTTL}, "")
		if err != nil {
			t.Fatal(err)
		}
		var ans leaseAnswer
		if r.Status != http.StatusConflict || r.Decode(&ans) != nil || ans.Status != "held" || ans.FencingToken != grants[key].fence {
			t.Errorf("acquire acknowledged %s (fence %d) through %s: want 409 held with fence %d, got %s", key, grants[key].fence, via.ID, grants[key].fence, r)
		}
		top = max(top, grants[key].fence)
	}
	if g := acquireAcked(t, c, cn, ns, "after-the-damage"); g.fence <= top {
		t.Errorf("a new key got fence %d; the acknowledged leases hold fences up to %d", g.fence, top)
	}

	// The operator brings B back: remove it, wipe its data, join again.
	r, err := a.PostJSON("/cluster/remove", map[string]string{"node_id": b.ID}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("remove %s: %s", b.ID, r)
	}
	c.WaitMembers([]*harness.Node{a, cn}, a, cn)
	c.Wipe(b)
	c.Start(b, "--join", harness.JoinList(a, cn))
	c.WaitMembers(c.Nodes())
	c.WaitSameState()
}

// TestStorageTornTailIsCutAndNodeCatchesUp tears a follower's last append
// the way a crash mid-write leaves it: zeros from a sector boundary inside
// the last record to the end. The follower cuts the record off with a
// warning, starts, and receives it again from the leader.
func TestStorageTornTailIsCutAndNodeCatchesUp(t *testing.T) {
	t.Parallel()
	c, leader := formCluster(t, 3, harness.Options{})
	f := harness.Except(c.Nodes(), leader)[0]
	ns := mintNamespace(t, leader)
	acquireAcked(t, c, leader, ns, "small")
	// The last append: a completion whose result spans several sectors.
	g := acquireAcked(t, c, leader, ns, "big")
	result := map[string]string{"blob": strings.Repeat("holdfast", 400)}
	r, err := leader.PostJSON("/services/v1/lease/complete", map[string]any{"namespace": ns, "key": "big", "owner_token": g.owner, "result": result}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != http.StatusOK {
		t.Fatalf("complete big: %s", r)
	}
	c.WaitSameState()
	c.Kill(f)

	seg, err := harness.NewestSegment(f.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	last := seg.Records[len(seg.Records)-1]
	boundary := (last.Offset/harness.SectorSize + 1) * harness.SectorSize
	if boundary+harness.SectorSize > last.End {
		t.Fatalf("the last record of %s (entry %d, [%d, %d)) holds no whole sector: it is not the completion", seg.Path, last.Index, last.Offset, last.End)
	}
	if err := harness.ZeroRange(seg.Path, boundary, last.End); err != nil {
		t.Fatal(err)
	}
	t.Logf("zeroed [%d, %d) of %s: the last record (entry %d) starts at %d", boundary, last.End, seg.Path, last.Index, last.Offset)

	c.Start(f)
	c.WaitLog(f, harness.TornAppendLog)
	c.WaitHealthy(f)
	c.WaitSameState()
	r, err = f.PostJSON("/services/v1/lease", map[string]any{"namespace": ns, "key": "big", "ttl_seconds": storageLeaseTTL}, "")
	if err != nil {
		t.Fatal(err)
	}
	var ans leaseAnswer
	if r.Status != http.StatusOK || r.Decode(&ans) != nil || ans.Status != "completed" || ans.FencingToken != g.fence {
		t.Errorf("acquire the completed key through %s: want 200 completed with fence %d, got %s", f.ID, g.fence, r)
	}
}
