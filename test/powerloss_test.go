//go:build linux

package test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast/holdfast/test/faultfs"
	"github.com/holdfast/holdfast/test/harness"
)

// The power-loss tests run one node whose data directory is on a faultfs
// mount (test/faultfs): after the node is killed, PowerLoss keeps only what
// a power loss keeps under POSIX's rule (file data as of its last
// fsync/fdatasync, directory entries as of the directory's last fsync).
// The node is restarted with the same command line, which has no
// --node-id, so it must find its own id again, and every write it
// acknowledged. Its last write is sent while the mount holds the
// fdatasyncs of its log: a node that acknowledges nothing before its
// append is durable cannot answer it before it is killed.

// powerLossSegment is the segment size of the tests that need several
// segments: about five of the job writer's entries fill one.
const powerLossSegment = 64 << 10

// powerLossNode is a single node on a faultfs mount, and what it
// acknowledged.
type powerLossNode struct {
	t   *testing.T
	c   *harness.Cluster
	n   *harness.Node
	fs  *faultfs.FS
	mnt string

	id     string // the id the node made for itself at its first start
	ns     string
	grants map[string]storageGrant // acknowledged leases by key
	top    int64                   // the highest fence acknowledged
	jobs   *jobWriter
}

// startOnFaultFS mounts a faultfs and starts a node without --node-id
// whose data directory is two levels below the mount's root, so the node
// makes every directory of its path that the power loss could take away.
func startOnFaultFS(t *testing.T, args ...string) *powerLossNode {
	t.Helper()
	f, mnt := faultfs.TempMount(t) // unmounted after the cluster's cleanup has killed the node
	c := env.NewCluster(t, 1, harness.Options{Args: args, WaitTimeout: 15 * time.Second})
	n := c.Node(0)
	n.KeptID = true
	n.DataDir = filepath.Join(mnt, "srv", "holdfast")
	p := &powerLossNode{t: t, c: c, n: n, fs: f, mnt: mnt, grants: map[string]storageGrant{}, jobs: newJobWriter(t)}
	c.Start(n)
	c.WaitAllReady(n)
	st, err := n.Status()
	if err != nil {
		t.Fatal(err)
	}
	if st.NodeID == "" || st.NodeID == n.ID {
		t.Fatalf("the node started without --node-id reports id %q, want one it made", st.NodeID)
	}
	p.id = st.NodeID
	p.ns = mintNamespace(t, n)
	return p
}

// write acquires leases on new keys and enqueues jobs, each acknowledged.
func (p *powerLossNode) write(leases, jobs int) {
	p.t.Helper()
	for range leases {
		key := fmt.Sprintf("key-%03d", len(p.grants))
		g := acquireAcked(p.t, p.c, p.n, p.ns, key)
		if g.fence <= p.top {
			p.t.Fatalf("%s was granted fence %d, not above the %d acknowledged before", key, g.fence, p.top)
		}
		p.grants[key], p.top = g, g.fence
	}
	for range jobs {
		if a := p.jobs.enqueue(p.n); a.status != http.StatusCreated {
			p.t.Fatalf("enqueue on a healthy node: %d %+v", a.status, a.body)
		}
	}
}

// segmentBases returns the first index of each of the node's log segments.
func (p *powerLossNode) segmentBases() ([]uint64, error) {
	paths, err := harness.Segments(p.n.DataDir)
	if err != nil {
		return nil, err
	}
	bases := make([]uint64, len(paths))
	for i, path := range paths {
		if bases[i], err = strconv.ParseUint(strings.TrimSuffix(filepath.Base(path), ".seg"), 10, 64); err != nil {
			return nil, fmt.Errorf("segment %s: %w", path, err)
		}
	}
	return bases, nil
}

// snapshotIndex returns the index of the node's newest snapshot, 0 for none.
func (p *powerLossNode) snapshotIndex() (uint64, error) {
	dir, err := harness.NewestSnapshot(p.n.DataDir)
	if err != nil || dir == "" {
		return 0, err
	}
	var term, index, ms uint64
	if _, err := fmt.Sscanf(filepath.Base(dir), "%d-%d-%d", &term, &index, &ms); err != nil {
		return 0, fmt.Errorf("snapshot %s: %w", dir, err)
	}
	return index, nil
}

// crash sends a last acquire while the mount holds every fdatasync of
// the node's log, kills the node and, with powerLoss, cuts the power. The
// acquire cannot be acknowledged before the node is killed unless the
// node acknowledges appends that are not durable; if it is, it counts.
func (p *powerLossNode) crash(powerLoss bool) {
	p.t.Helper()
	rel, err := filepath.Rel(p.mnt, filepath.Join(p.n.DataDir, harness.RaftLogDir))
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.fs.Add(faultfs.Rule{Op: faultfs.OpFsync, Path: rel + "/*", Stall: faultfs.UntilCleared}); err != nil {
		p.t.Fatal(err)
	}
	// The node is killed right after: an answer it has not sent within
	// half a second never comes.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r, err := p.n.Do(ctx, harness.Request{Method: http.MethodPost, Path: "/services/v1/lease",
		JSON: map[string]any{"namespace": p.ns, "key": "while-the-log-sync-is-held", "ttl_seconds": storageLeaseTTL}})
	var a leaseAnswer
	if err == nil && r.Status == http.StatusCreated && r.Decode(&a) == nil && a.Status == "held" {
		p.t.Logf("acquire answered while the log's fdatasync was held: fence %d", a.FencingToken)
		p.grants["while-the-log-sync-is-held"] = storageGrant{owner: a.OwnerToken, fence: a.FencingToken}
		p.top = max(p.top, a.FencingToken)
	}
	p.c.Kill(p.n)
	p.fs.ClearAll()
	if !powerLoss {
		return
	}
	if err := p.fs.PowerLoss(); err != nil {
		p.t.Fatalf("power loss: %v", err)
	}
}

// restartAndCheck starts the node with the same command line and checks
// that it is the same node, holds every acknowledged lease with its fence
// and every acknowledged job, and grants a fence above all of them.
func (p *powerLossNode) restartAndCheck() {
	p.t.Helper()
	p.c.Start(p.n)
	p.c.WaitAllReady(p.n)
	st, err := p.n.Status()
	if err != nil {
		p.t.Fatal(err)
	}
	if st.NodeID != p.id {
		p.t.Fatalf("the restarted node is %q; it was %q before (its node-id file, and with it its state, is gone)", st.NodeID, p.id)
	}
	lost := 0
	for key, g := range p.grants {
		r, err := p.n.PostJSON("/services/v1/lease", map[string]any{"namespace": p.ns, "key": key, "ttl_seconds": storageLeaseTTL}, "")
		if err != nil {
			p.t.Fatal(err)
		}
		var a leaseAnswer
		if r.Status != http.StatusConflict || r.Decode(&a) != nil || a.Status != "held" || a.FencingToken != g.fence {
			lost++
			p.t.Errorf("acknowledged lease %s (fence %d): want 409 held with its fence, got %s", key, g.fence, r)
		}
	}
	if lost > 0 {
		p.t.Errorf("%d of %d acknowledged leases lost", lost, len(p.grants))
	}
	p.jobs.checkKept(p.n)
	if g := acquireAcked(p.t, p.c, p.n, p.ns, "after-the-restart"); g.fence <= p.top {
		p.t.Errorf("a new key got fence %d; fences up to %d were acknowledged before", g.fence, p.top)
	}
}

// TestPowerLossKeepsAcknowledgedWrites cuts the power of a single node
// after acknowledged writes at the moments when what it created or renamed
// last matters: right after its first start (its data directory, node-id
// file, raft.db, log directory and first segment all new), right after a
// snapshot that let the log be compacted (the snapshot is the only copy of
// the compacted entries), and right after the log moved to new segments.
// The node must start again without --node-id, as the same node, with
// every acknowledged lease and job, and grant fences above all of them. A
// kill without a power loss is the control: the page cache keeps what was
// written but not synced, so a node that acknowledges its last write
// before the log's fdatasync (the planted bug ack_before_sync) loses
// nothing there.
func TestPowerLossKeepsAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		args      []string
		powerLoss bool
		write     func(p *powerLossNode)
	}{
		{name: "first start", powerLoss: true, write: func(p *powerLossNode) {
			p.write(5, 3)
			if idx, _ := p.snapshotIndex(); idx > 0 {
				p.t.Logf("the node had taken a snapshot (index %d) before the power loss", idx)
			}
		}},
		{
			name:      "after a snapshot",
			args:      []string{"--test-log-segment-size", strconv.Itoa(powerLossSegment), "--snapshot-threshold", "8", "--snapshot-interval", "100ms", "--trailing-logs", "2"},
			powerLoss: true,
			write: func(p *powerLossNode) {
				p.write(5, 20)
				p.write(5, 0)
				st, err := p.n.Status()
				if err != nil {
					p.t.Fatal(err)
				}
				p.c.Eventually("a snapshot of the writes, and the log compacted after it", func() error {
					idx, err := p.snapshotIndex()
					if err != nil {
						return err
					}
					bases, err := p.segmentBases()
					if err != nil {
						return err
					}
					if idx+8 <= st.LastLogIndex || len(bases) == 0 || bases[0] <= 1 {
						return fmt.Errorf("newest snapshot at %d, last index %d, segments from %v", idx, st.LastLogIndex, bases)
					}
					return nil
				})
			},
		},
		{
			name:      "after a segment roll",
			args:      []string{"--test-log-segment-size", strconv.Itoa(powerLossSegment)},
			powerLoss: true,
			write: func(p *powerLossNode) {
				p.write(3, 12)
				p.write(3, 0)
				if bases, err := p.segmentBases(); err != nil || len(bases) < 3 {
					p.t.Fatalf("the log is in segments %v (%v); the writes should have filled at least two", bases, err)
				}
			},
		},
		{name: "kill without power loss", write: func(p *powerLossNode) { p.write(5, 3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startOnFaultFS(t, tc.args...)
			tc.write(p)
			p.crash(tc.powerLoss)
			p.restartAndCheck()
		})
	}
}
