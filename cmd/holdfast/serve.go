package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/atomicfile"
	"github.com/holdfast/holdfast/internal/client"
	"github.com/holdfast/holdfast/server"
)

// serveConfig is everything `holdfast serve` reads from flags and environment.
type serveConfig struct {
	nodeID          string
	idFromHostname  bool
	dataDir         string
	httpAddr        string
	raftAddr        string
	httpAdvertise   string
	raftAdvertise   string
	join            string
	bootstrapExpect int
	restore         string
	clusterKey      string
	rateLimit       float64
	rateBurst       int
	logLevel        string
	logJSON         bool

	heartbeatTimeout  time.Duration
	electionTimeout   time.Duration
	snapshotThreshold uint64
	snapshotInterval  time.Duration
	trailingLogs      uint64
	sweepInterval     time.Duration
	shutdownTimeout   time.Duration
	maxClockSkew      time.Duration
	testClockOffset   time.Duration
	testRaftPeers     string
	testHTTPPeers     string
	testSegmentSize   int64
	minFreeDisk       int64
	tls               serveTLSFlags
}

func parseServeFlags(args []string, stderr io.Writer) (*serveConfig, error) {
	c := &serveConfig{}
	fs := flag.NewFlagSet("holdfast serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.nodeID, "node-id", "", "this node's id, stable across restarts (default: generated once and kept in the data dir)")
	fs.BoolVar(&c.idFromHostname, "node-id-from-hostname", false, "take this node's id from the host name, up to its first dot (a StatefulSet's pod name); not with --node-id")
	fs.StringVar(&c.dataDir, "data-dir", "./holdfast-data", "directory for the Raft log, snapshots and node id")
	fs.StringVar(&c.httpAddr, "http-addr", "127.0.0.1:7070", "address the HTTP API listens on")
	fs.StringVar(&c.raftAddr, "raft-addr", "127.0.0.1:7071", "address the Raft transport listens on")
	fs.StringVar(&c.httpAdvertise, "http-advertise", "", "HTTP address other nodes and clients reach this node at (default: the listening address)")
	fs.StringVar(&c.raftAdvertise, "raft-advertise", "", "Raft address other nodes dial (default: the listening address)")
	fs.StringVar(&c.join, "join", "", "comma-separated HTTP addresses of other nodes: a node without data finds or forms its cluster through them; a member restarted on new addresses tells the cluster where it is. dns:NAME:PORT stands for PORT at every address NAME resolves to (a headless Service), resolved again at each attempt")
	fs.IntVar(&c.bootstrapExpect, "bootstrap-expect", 0, "number of voters a new cluster forms with (with --join listing the others)")
	fs.StringVar(&c.restore, "restore", "", "start a new cluster from this backup (holdfast snapshot save): only on a first node with an empty data directory, bootstrapping alone; the others then --join it")
	fs.StringVar(&c.clusterKey, "cluster-key", "", "shared secret for node-to-node and operator calls (prefer HOLDFAST_CLUSTER_KEY)")
	fs.Float64Var(&c.rateLimit, "rate-limit", 1000, "API requests per second allowed per client address on this node (0: no limit)")
	fs.IntVar(&c.rateBurst, "rate-burst", 2000, "API requests a client address may make at once")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&c.logJSON, "log-json", false, "log JSON lines instead of text")
	fs.DurationVar(&c.heartbeatTimeout, "raft-heartbeat-timeout", 400*time.Millisecond, "Raft heartbeat timeout: a follower that hears nothing from the leader for this long (randomised up to twice) starts an election")
	fs.DurationVar(&c.electionTimeout, "raft-election-timeout", 400*time.Millisecond, "Raft election timeout")
	fs.Uint64Var(&c.snapshotThreshold, "snapshot-threshold", 8192, "log entries between snapshots")
	fs.DurationVar(&c.snapshotInterval, "snapshot-interval", 0, "how often to check whether snapshot-threshold entries have passed since the last snapshot (0: 30s from cluster level 3, where a snapshot is a checkpoint of the state store, 120s below it)")
	fs.Uint64Var(&c.trailingLogs, "trailing-logs", 10240, "log entries kept after a snapshot")
	fs.Int64Var(&c.minFreeDisk, "min-free-disk", 1<<30, "free bytes of the data directory's file system below which this node, leading, refuses new lease keys, queues and jobs with 507 (0: no floor)")
	fs.DurationVar(&c.sweepInterval, "sweep-interval", time.Second, "how often the leader checks for expired deadlines")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "how long a graceful shutdown may take")
	fs.DurationVar(&c.maxClockSkew, "max-clock-skew", time.Second, "a node whose clock is further than this from the cluster's median does not lead")
	fs.DurationVar(&c.testClockOffset, "test-clock-offset", 0, "TEST ONLY: shift this node's wall clock by this much (fault tests of the clock guard)")
	c.tls.register(fs)
	fs.StringVar(&c.testRaftPeers, "test-raft-peer-addrs", "", "TEST ONLY: id=addr,... Raft addresses this node dials for other members (fault proxies)")
	fs.StringVar(&c.testHTTPPeers, "test-http-peer-addrs", "", "TEST ONLY: id=addr,... HTTP addresses this node dials for other members (fault proxies)")
	fs.Int64Var(&c.testSegmentSize, "test-log-segment-size", 0, "TEST ONLY: size in bytes of the Raft log's segment files (default 16 MiB; full-disk tests make it small)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if err := applyEnv(fs); err != nil {
		return nil, err
	}
	if c.idFromHostname {
		id, err := hostnameID(c.nodeID, os.Hostname)
		if err != nil {
			return nil, err
		}
		c.nodeID = id
	}
	return c, nil
}

// hostnameID is the node id --node-id-from-hostname gives: the host name up
// to its first dot. given is --node-id, which must then be empty.
func hostnameID(given string, hostname func() (string, error)) (string, error) {
	if given != "" {
		return "", errors.New("--node-id-from-hostname and --node-id: give one of them")
	}
	h, err := hostname()
	if err != nil {
		return "", fmt.Errorf("--node-id-from-hostname: %w", err)
	}
	id, _, _ := strings.Cut(h, ".")
	if id == "" {
		return "", fmt.Errorf("--node-id-from-hostname: the host name %q has no first label", h)
	}
	return id, nil
}

// applyEnv sets every flag not given on the command line from its
// HOLDFAST_* environment variable, if present.
func applyEnv(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		name := "HOLDFAST_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("environment %s: %w", name, e)
			}
		}
	})
	return err
}

// resolveNodeID returns the node's id and keeps it in the data dir, so a
// restart without --node-id is the same node. The id is the one given
// (--node-id), or the one kept, or else the one the node certificate names
// (certID, "" without peer TLS), or else a generated one. It refuses an id
// that differs from the kept one, and a data dir that holds Raft state but
// no kept id (started with --node-id by a build that did not keep it)
// unless the id is given or certified: either would start another node on
// this one's Raft state.
func (c *serveConfig) resolveNodeID(certID string) (string, error) {
	path := filepath.Join(c.dataDir, "node-id")
	kept := ""
	if b, err := os.ReadFile(path); err == nil {
		kept = strings.TrimSpace(string(b))
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read node id: %w", err)
	}
	switch {
	case kept != "" && c.nodeID != "" && c.nodeID != kept:
		return "", fmt.Errorf("--node-id %q: the data dir %s belongs to node %q (its node-id file); start it with that id, or give a new node an empty data dir", c.nodeID, c.dataDir, kept)
	case kept != "":
		return kept, nil
	}
	id := c.nodeID
	if id == "" {
		id = certID
	}
	if id == "" && holdsRaftState(c.dataDir) {
		return "", fmt.Errorf("the data dir %s holds a node's Raft state but no node id (its node-id file is missing or empty): start it with --node-id and the id it had (once given, it is kept)", c.dataDir)
	}
	if id == "" {
		var r [6]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", fmt.Errorf("generate node id: %w", err)
		}
		id = "node-" + hex.EncodeToString(r[:])
	}
	// Durable before the node makes any Raft state: a restart after a
	// power loss must find the id that state belongs to.
	if err := atomicfile.MkdirAll(c.dataDir, 0o700); err != nil {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	if err := atomicfile.Write(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("store node id: %w", err)
	}
	return id, nil
}

// fatalStopWait bounds the wait for a node that stops on a storage fault.
const fatalStopWait = 5 * time.Second

// holdsRaftState reports whether dir has a Raft log or stable store.
func holdsRaftState(dir string) bool {
	for _, name := range []string{cluster.StorageStable, cluster.StorageLog} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// offsetClock returns the wall clock shifted by d (time.Now itself when d is 0).
func offsetClock(d time.Duration) func() time.Time {
	if d == 0 {
		return time.Now
	}
	return func() time.Time { return time.Now().Add(d) }
}

// parsePeerAddrs parses "id=host:port,id=host:port".
func parsePeerAddrs(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range client.SplitAddrs(s) {
		id, addr, ok := strings.Cut(kv, "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("%q is not id=host:port", kv)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("%q: %w", kv, err)
		}
		out[id] = addr
	}
	return out, nil
}

func serve(args []string, stderr io.Writer) int {
	c, err := parseServeFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "holdfast serve: %v\n", err)
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:       "holdfast",
		Level:      hclog.LevelFromString(c.logLevel),
		JSONFormat: c.logJSON,
		Output:     stderr,
	})
	if err := runNode(c, log); err != nil {
		log.Error("holdfast serve failed", "error", err)
		return 1
	}
	return 0
}

func runNode(c *serveConfig, log hclog.Logger) error {
	tlsSet, err := c.tls.load(log.Named("tls"))
	if err != nil {
		return err
	}
	certID := ""
	if tlsSet.peer != nil {
		certID = tlsSet.peer.NodeID()
	}
	id, err := c.resolveNodeID(certID)
	if err != nil {
		return err
	}
	raftPeers, err := parsePeerAddrs(c.testRaftPeers)
	if err != nil {
		return fmt.Errorf("--test-raft-peer-addrs: %w", err)
	}
	httpPeers, err := parsePeerAddrs(c.testHTTPPeers)
	if err != nil {
		return fmt.Errorf("--test-http-peer-addrs: %w", err)
	}
	ln, err := net.Listen("tcp", c.httpAddr)
	if err != nil {
		return fmt.Errorf("listen for HTTP on %s: %w", c.httpAddr, err)
	}
	httpAdvertise := c.httpAdvertise
	if httpAdvertise == "" {
		httpAdvertise = ln.Addr().String()
	}
	var restore *cluster.Backup
	if c.restore != "" {
		b, sum, err := cluster.ReadBackupFile(c.restore)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("--restore: %w", err)
		}
		log.Info("restoring a backup", "file", c.restore, "index", b.Header.Index, "term", b.Header.Term,
			"leases", sum.Leases, "queues", sum.Queues, "jobs", sum.Jobs.Total, "fencing_counter", sum.FencingCounter)
		restore = b
	}
	node, err := cluster.Open(cluster.Config{
		BuildVersion:      versionInfo(),
		NodeID:            id,
		DataDir:           c.dataDir,
		RaftBind:          c.raftAddr,
		RaftAdvertise:     c.raftAdvertise,
		HTTPAdvertise:     httpAdvertise,
		Join:              client.SplitAddrs(c.join),
		BootstrapExpect:   c.bootstrapExpect,
		Restore:           restore,
		ClusterKey:        c.clusterKey,
		Peer:              tlsSet.peer,
		Logger:            log,
		HeartbeatTimeout:  c.heartbeatTimeout,
		ElectionTimeout:   c.electionTimeout,
		SnapshotThreshold: c.snapshotThreshold,
		SnapshotInterval:  c.snapshotInterval,
		TrailingLogs:      c.trailingLogs,
		SweepInterval:     c.sweepInterval,
		MaxClockSkew:      c.maxClockSkew,
		Now:               offsetClock(c.testClockOffset),
		RaftPeerAddrs:     raftPeers,
		HTTPPeerAddrs:     httpPeers,
		LogSegmentSize:    c.testSegmentSize,
		MinFreeDiskBytes:  minFreeDiskBytes(c.minFreeDisk),
	})
	if err != nil {
		_ = ln.Close()
		return fmt.Errorf("open node: %w", err)
	}
	gin.SetMode(gin.ReleaseMode)
	srv := server.New(server.Config{Node: node, Logger: log, RateLimit: c.rateLimit, RateBurst: c.rateBurst, ListenAddr: ln.Addr().String()})
	hs := srv.HTTPServer()
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	tlsSet.watch(watchCtx)
	serveErr := make(chan error, 1)
	var front *server.Front
	if tlsSet.api != nil {
		hs.TLSConfig = tlsSet.api.Config()
		go func() { serveErr <- hs.ServeTLS(ln, "", "") }()
	} else {
		front = srv.NewFront(ln, hs)
		go func() { serveErr <- hs.Serve(front) }()
	}
	if c.testClockOffset != 0 {
		log.Warn("test clock offset in effect: this node's clock is shifted", "offset", c.testClockOffset.String())
	}
	log.Info("serving", "node_id", id, "http_addr", httpAdvertise, "raft_addr", node.RaftAddr(), "data_dir", c.dataDir,
		"http_tls", tlsSet.api != nil, "peer_tls", tlsSet.peer != nil)

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)
	var runErr error
	fatal := false
wait:
	for {
		select {
		case <-node.Fatal():
			runErr = fmt.Errorf("stopping: %w", node.FatalErr())
			fatal = true
			break wait
		case <-hups:
			log.Info("SIGHUP: re-reading the TLS files")
			tlsSet.reload()
		case sig := <-sigs:
			log.Info("shutting down; a second signal exits at once", "signal", sig.String())
			break wait
		case err := <-serveErr:
			runErr = fmt.Errorf("http server: %w", err)
			break wait
		}
	}
	go func() {
		<-sigs
		log.Warn("second signal: exiting now")
		os.Exit(1)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), c.shutdownTimeout)
	defer cancel()
	if fatal {
		// Memory and disk may disagree: nothing more is written or
		// handed over, and requests in flight end with the process.
		_ = hs.Close()
		if front != nil {
			front.CloseNow()
		}
		srv.Close()
		// A storage call that failed may hold one of Raft's goroutines for
		// good (see cluster's stopHere), so the stop is waited for only
		// briefly: the process ends either way.
		stopped := make(chan error, 1)
		go func() { stopped <- node.Kill() }()
		select {
		case err := <-stopped:
			if err != nil {
				return errors.Join(runErr, fmt.Errorf("node stop: %w", err))
			}
		case <-time.After(fatalStopWait):
			log.Warn("the node did not stop within its wait; exiting anyway", "wait", fatalStopWait.String())
		}
		return runErr
	}
	// Leadership goes first, so requests keep being served through the new
	// leader while this node's in-flight requests finish.
	node.TransferLeadership(ctx)
	if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("HTTP shutdown did not finish cleanly", "error", err)
	}
	if front != nil {
		if err := front.Shutdown(ctx); err != nil {
			log.Warn("HTTP shutdown did not finish cleanly", "error", err)
		}
	}
	srv.Close()
	if err := node.Shutdown(ctx); err != nil {
		return errors.Join(runErr, fmt.Errorf("node shutdown: %w", err))
	}
	log.Info("stopped cleanly")
	return runErr
}

// minFreeDiskBytes is --min-free-disk as the node's configuration takes
// it: 0 (no floor) is negative there, where 0 is the default.
func minFreeDiskBytes(flagValue int64) int64 {
	if flagValue <= 0 {
		return -1
	}
	return flagValue
}
