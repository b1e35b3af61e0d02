package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/internal/tlsconf"
)

// Config configures a Node. Zero durations and counts take the defaults
// documented on each field.
type Config struct {
	// NodeID is this node's Raft server id. It must stay the same across restarts.
	NodeID string
	// DataDir holds the Raft log (raft-log/), the stable store (raft.db) and the snapshots.
	DataDir string
	// RaftBind is the address the Raft transport listens on.
	RaftBind string
	// RaftAdvertise is the Raft address other nodes dial; defaults to the
	// bound address, which must then be a specific host.
	RaftAdvertise string
	// HTTPAdvertise is this node's HTTP address as other nodes and clients
	// reach it. It is recorded in the node directory.
	HTTPAdvertise string
	// Join lists HTTP addresses of other nodes: a node without state uses
	// them to find or form its cluster, and a member restarted on new
	// addresses to tell the cluster where it now is.
	// An entry DNSJoinPrefix+NAME:PORT stands for every address NAME
	// resolves to, resolved again at each attempt.
	Join []string
	// Resolver looks up DNS join entries (default net.DefaultResolver).
	Resolver HostResolver
	// BootstrapExpect is the number of voters a new cluster forms with. With
	// no Join addresses and BootstrapExpect at most 1, a new node bootstraps a
	// single-node cluster.
	BootstrapExpect int
	// Restore, for a node without state that bootstraps alone (no Join,
	// BootstrapExpect at most 1), is a backup the new cluster starts from:
	// Open returns once it is installed and the level raised to this
	// build's.
	Restore *Backup
	// ClusterKey is the shared secret sent on node-to-node HTTP calls.
	ClusterKey string
	// Peer, when set, is this node's identity on the links between nodes:
	// the Raft transport runs over mutual TLS against the peer CA, and
	// node-to-node HTTP calls use HTTPS with the node certificate.
	Peer *tlsconf.Peer
	// Logger is the root of the logger tree; Raft logs under "raft".
	Logger hclog.Logger

	// HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout and CommitTimeout
	// tune Raft; the defaults are hashicorp/raft's (1 s, 1 s, 500 ms, 50 ms),
	// except that the leader lease defaults to at most the heartbeat timeout,
	// which Raft requires.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// SnapshotThreshold, SnapshotInterval and TrailingLogs tune log
	// compaction (defaults 8192 entries, see below, 10240 entries).
	// SnapshotInterval is how often Raft checks whether SnapshotThreshold
	// entries have passed since the last snapshot. Left at 0 it follows
	// the cluster level: 30 s from CheckpointLevel, where a snapshot is a
	// checkpoint of the state store and costs what changed since the last
	// one, and a younger checkpoint keeps fewer of the store's files that
	// compactions have since replaced; 120 s below it, where a snapshot
	// encodes the whole state (Node.snapshotInterval).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// SnapshotRetry is how often a node whose last snapshot failed to be
	// written tries again (default 10 s), so the fault ends once there is
	// room, not only after SnapshotThreshold more entries.
	SnapshotRetry time.Duration
	// LogStallAfter bounds how long an append or a deletion of the Raft
	// log (its write and fdatasync) may go unanswered before the node
	// reports its log stalled: it then sends no Raft messages, so that
	// the others elect a leader if it led, stays out of elections and
	// refuses writes until the write returns. The default is 2 s or twice
	// HeartbeatTimeout, whichever is longer: a shorter hiccup is not worth
	// an election, which itself costs one to two heartbeat timeouts.
	LogStallAfter time.Duration
	// LogSegmentSize is the size of the Raft log's segment files (default
	// raftlog.DefaultSegmentSize, 16 MiB). Tests of a full disk make it
	// small, so a few hundred entries need a new segment.
	LogSegmentSize int64
	// LevelSettle is how long the Raft configuration must stand unchanged
	// before the leader raises the cluster level (default 10 s): a member
	// rejoining after a wipe is briefly out of the configuration, and must
	// still count.
	LevelSettle time.Duration
	// MinFreeDiskBytes is the free space of DataDir's file system below
	// which this node, leading, refuses new lease keys, queues and jobs
	// (507 naming the disk), so that the log and the state store keep
	// room for what exists (default 1 GiB; negative: no floor).
	MinFreeDiskBytes int64
	// DiskFree reports the free bytes of the file system that holds path,
	// for an unprivileged writer (default: statfs); tests replace it.
	DiskFree func(path string) (uint64, error)
	// BuildVersion names this node's build in its status.
	BuildVersion string
	// MaxAppendEntries bounds how many entries are written and sent together
	// (default 256); together with batching it is the group commit.
	MaxAppendEntries int

	// SweepInterval is how often the leader checks for due deadlines (default 1 s).
	SweepInterval time.Duration
	// SweepLimit bounds the work of one sweep entry (default 1000).
	SweepLimit int64
	// ProposeTimeout bounds how long a proposal may wait when its context
	// has no earlier deadline (default 10 s).
	ProposeTimeout time.Duration

	// MaxClockSkew is the bound on how far this node's clock may be from the
	// median of the cluster's clocks before it refuses to lead (default 1 s).
	MaxClockSkew time.Duration

	// RaftPeerAddrs and HTTPPeerAddrs override, for this node only, the
	// addresses it dials to reach other members (by id), so fault tests can
	// put a proxy on every directed link. Production leaves them empty.
	RaftPeerAddrs map[string]string
	HTTPPeerAddrs map[string]string

	// Now is the node's wall clock (default time.Now).
	Now func() time.Time
	// HTTPClient makes node-to-node calls (default: 5 s timeout, HTTPS with
	// the node certificate when Peer is set).
	HTTPClient *http.Client

	// testLevel, when set, is the level this node reports as its build's
	// and counts for itself when it raises the cluster's, in place of
	// fsm.BuildLevel: this package's tests lower it (to 0 as well) to
	// stand for a member of an older build. No deployment can set it.
	testLevel *uint32
}

func (c *Config) setDefaults() {
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	durations := []struct {
		v *time.Duration
		d time.Duration
	}{
		{&c.HeartbeatTimeout, time.Second},
		{&c.ElectionTimeout, time.Second},
		{&c.CommitTimeout, 50 * time.Millisecond},
		{&c.SnapshotRetry, 10 * time.Second},
		{&c.SweepInterval, time.Second},
		{&c.ProposeTimeout, 10 * time.Second},
		{&c.MaxClockSkew, time.Second},
		{&c.LevelSettle, 10 * time.Second},
	}
	for _, x := range durations {
		if *x.v <= 0 {
			*x.v = x.d
		}
	}
	if c.LogStallAfter <= 0 {
		c.LogStallAfter = max(2*time.Second, 2*c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout <= 0 {
		c.LeaderLeaseTimeout = min(500*time.Millisecond, c.HeartbeatTimeout)
	}
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = 8192
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = 10240
	}
	if c.MaxAppendEntries <= 0 {
		c.MaxAppendEntries = 256
	}
	if c.SweepLimit <= 0 {
		c.SweepLimit = 1000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.MinFreeDiskBytes == 0 {
		c.MinFreeDiskBytes = 1 << 30
	}
	if c.DiskFree == nil {
		c.DiskFree = statfsFree
	}
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 5 * time.Second, Transport: PeerTransport(c.Peer)}
	}
}

// HostResolver looks a host name up; *net.Resolver is one.
type HostResolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
}

func (c *Config) validate() error {
	switch {
	case c.NodeID == "":
		return errors.New("node id is required")
	case c.DataDir == "":
		return errors.New("data dir is required")
	case c.RaftBind == "":
		return errors.New("raft bind address is required")
	case c.HTTPAdvertise == "":
		return errors.New("http advertise address is required")
	case c.BootstrapExpect < 0:
		return fmt.Errorf("bootstrap-expect must be 0 or more, got %d", c.BootstrapExpect)
	case c.BootstrapExpect > 1 && len(c.Join) == 0:
		return fmt.Errorf("bootstrap-expect %d needs --join with the other nodes' HTTP addresses", c.BootstrapExpect)
	case c.joinError() != nil:
		return c.joinError()
	case c.Peer != nil && c.Peer.NodeID() != c.NodeID:
		return fmt.Errorf("the peer certificate names node %q but this node's id is %q: a node's certificate must name it", c.Peer.NodeID(), c.NodeID)
	}
	return nil
}

// joinError reports the first Join entry that is not host:port or
// DNSJoinPrefix+NAME:PORT.
func (c *Config) joinError() error {
	for _, e := range c.Join {
		if _, _, isDNS, err := ParseDNSJoin(e); isDNS {
			if err != nil {
				return err
			}
		} else if !validAddr(e) {
			return fmt.Errorf("join %q: must be host:port or %sNAME:PORT", e, DNSJoinPrefix)
		}
	}
	return nil
}

func (c *Config) boltPath() string { return filepath.Join(c.DataDir, "raft.db") }

func (c *Config) logPath() string { return filepath.Join(c.DataDir, "raft-log") }

// PeerTransport returns an HTTP transport for calls to other nodes: HTTPS
// with the node certificate when peer is set, plain HTTP otherwise.
func PeerTransport(peer *tlsconf.Peer) *http.Transport {
	t := &http.Transport{
		Proxy:               nil, // node-to-node calls never go through a proxy
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	if peer != nil {
		t.DialTLSContext = peer.DialHTTP
	}
	return t
}
