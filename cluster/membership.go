package cluster

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/tlsconf"
)

// Node-to-node HTTP contract. The server package serves these paths; this
// package calls them on peers.
const (
	// StatusPath answers GET with this node's Status.
	StatusPath = "/cluster/status"
	// JoinPath accepts POST with a JoinRequest; followers forward it to the leader.
	JoinPath = "/cluster/join"
	// RemovePath accepts POST with a RemoveRequest; followers forward it to the leader.
	RemovePath = "/cluster/remove"
	// KeyHeader carries the cluster key on node-to-node calls.
	KeyHeader = "X-Holdfast-Cluster-Key"
)

// ErrInvalidMember is wrapped by errors about a malformed join or remove request.
var ErrInvalidMember = errors.New("invalid member request")

// MemberError is a malformed join or remove request: the field at fault and
// the rule it breaks. It wraps ErrInvalidMember.
type MemberError struct {
	Field, Rule string
}

func (e *MemberError) Error() string { return ErrInvalidMember.Error() + ": " + e.Field + " " + e.Rule }

// Unwrap makes errors.Is(err, ErrInvalidMember) hold.
func (e *MemberError) Unwrap() error { return ErrInvalidMember }

// FieldName is the request field at fault.
func (e *MemberError) FieldName() string { return e.Field }

// ErrUnknownMember is returned when removing an id the cluster does not have.
var ErrUnknownMember = errors.New("no such member")

// JoinRequest asks the leader to add (or update) a voter.
type JoinRequest struct {
	NodeID   string `json:"node_id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Fresh is true when the joining node has no Raft state. A fresh node
	// whose id is already a member is a wiped node: its stale entry is
	// removed before it is added again, so it can never vote twice in a term
	// it has forgotten.
	Fresh bool `json:"fresh"`
	// UpdateOnly asks only to correct the addresses of an existing member
	// (by id); it never adds a voter, so a removed node cannot re-add itself.
	UpdateOnly bool `json:"update_only,omitempty"`
}

// RemoveRequest asks the leader to remove a member.
type RemoveRequest struct {
	NodeID string `json:"node_id"`
}

// CheckKey reports whether key matches the configured cluster key, in
// constant time. With no key configured it reports false: the caller must
// then fall back to its own rule (loopback only).
func (n *Node) CheckKey(key string) bool {
	if n.cfg.ClusterKey == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(key), []byte(n.cfg.ClusterKey)) == 1
}

func validAddr(a string) bool {
	host, port, err := net.SplitHostPort(a)
	return err == nil && host != "" && port != ""
}

// Validate checks the request's fields.
func (r JoinRequest) Validate() error {
	switch {
	case r.NodeID == "" || len(r.NodeID) > 128:
		return &MemberError{"node_id", "must be 1 to 128 characters"}
	case !validAddr(r.RaftAddr):
		return &MemberError{"raft_addr", "must be host:port"}
	case !validAddr(r.HTTPAddr):
		return &MemberError{"http_addr", "must be host:port"}
	}
	return nil
}

// Join adds or updates a voter. It must run on the leader.
func (n *Node) Join(ctx context.Context, req JoinRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if req.NodeID == n.cfg.NodeID || req.RaftAddr == n.RaftAddr() {
		return &MemberError{"node_id", "and raft_addr must not be the leader's own"}
	}
	cf := n.raft.GetConfiguration()
	if err := await(ctx, cf); err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	if req.UpdateOnly && !slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) == req.NodeID
	}) {
		return fmt.Errorf("%w: %s", ErrUnknownMember, req.NodeID)
	}
	if !req.UpdateOnly {
		n.memberLevel.Lock()
		defer n.memberLevel.Unlock()
		if err := n.joinerCanFollow(ctx, req); err != nil {
			return err
		}
	}
	member := false
	for _, s := range cf.Configuration().Servers {
		sameID := string(s.ID) == req.NodeID
		sameAddr := string(s.Address) == req.RaftAddr
		switch {
		case sameID && sameAddr && !req.Fresh:
			member = true
		case sameID && !req.Fresh:
			// A member with its state, back at a new Raft address: AddVoter
			// below updates the address in place.
			n.log.Info("member moved to a new raft address", "node_id", req.NodeID, "old_addr", s.Address, "raft_addr", req.RaftAddr)
		case sameID || sameAddr:
			n.log.Info("removing stale member before join", "stale_id", s.ID, "stale_addr", s.Address, "node_id", req.NodeID)
			if err := n.membershipChange(ctx, n.raft.RemoveServer(s.ID, 0, 0)); err != nil {
				return fmt.Errorf("remove stale member %s: %w", s.ID, err)
			}
		}
	}
	if !member {
		if err := n.membershipChange(ctx, n.raft.AddVoter(raft.ServerID(req.NodeID), raft.ServerAddress(req.RaftAddr), 0, 0)); err != nil {
			return fmt.Errorf("add voter %s: %w", req.NodeID, err)
		}
		n.log.Info("added voter", "node_id", req.NodeID, "raft_addr", req.RaftAddr, "http_addr", req.HTTPAddr)
	}
	info := fsm.NodeInfo{ID: req.NodeID, HTTPAddr: req.HTTPAddr, RaftAddr: req.RaftAddr}
	if cur, ok := n.fsm.Node(info.ID); ok && cur == info {
		return nil
	}
	_, err := n.Propose(ctx, &fsm.SetNode{Now: n.Now(), Node: info})
	return err
}

// Remove removes a member from the Raft configuration and the directory. It
// must run on the leader.
func (n *Node) Remove(ctx context.Context, id string) error {
	if id == "" {
		return &MemberError{"node_id", "is required"}
	}
	if !n.IsLeader() {
		return ErrNotLeader
	}
	cf := n.raft.GetConfiguration()
	if err := await(ctx, cf); err != nil {
		return fmt.Errorf("read configuration: %w", err)
	}
	inConfig := slices.ContainsFunc(cf.Configuration().Servers, func(s raft.Server) bool { return string(s.ID) == id })
	_, inDir := n.fsm.Node(id)
	if !inConfig && !inDir {
		return fmt.Errorf("%w: %s", ErrUnknownMember, id)
	}
	// The directory entry goes first: once the leader removes itself it can
	// no longer propose anything.
	if inDir {
		if _, err := n.Propose(ctx, &fsm.RemoveNode{Now: n.Now(), ID: id}); err != nil {
			return fmt.Errorf("remove %s from the directory: %w", id, err)
		}
	}
	if inConfig {
		if err := n.membershipChange(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, 0)); err != nil {
			return fmt.Errorf("remove server %s: %w", id, err)
		}
	}
	n.log.Info("removed member", "node_id", id)
	return nil
}

// membershipChange waits for a configuration change, mapping errors like a proposal.
func (n *Node) membershipChange(ctx context.Context, f raft.Future) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ProposeTimeout)
	defer cancel()
	if err := await(ctx, f); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
		}
		return n.proposalError(err)
	}
	return nil
}

// DNSJoinPrefix marks a Join entry that is a DNS name: DNSJoinPrefix +
// NAME:PORT stands for PORT at every address NAME resolves to, each the
// HTTP address of a member (a Kubernetes headless Service, a DNS round
// robin). It is resolved again at every attempt to form, join or register.
const DNSJoinPrefix = "dns:"

// ParseDNSJoin splits a DNSJoinPrefix entry into its name and port; ok is
// false for an entry without the prefix.
func ParseDNSJoin(entry string) (name, port string, ok bool, err error) {
	rest, found := strings.CutPrefix(entry, DNSJoinPrefix)
	if !found {
		return "", "", false, nil
	}
	name, port, err = net.SplitHostPort(rest)
	if err != nil || name == "" || port == "" {
		return "", "", true, fmt.Errorf("join %q: must be %sNAME:PORT", entry, DNSJoinPrefix)
	}
	return name, port, true, nil
}

// maxJoinNames bounds joinNames: past it, only the latest lookup's
// addresses are kept.
const maxJoinNames = 1024

// joinAddrs is Join with every DNS entry replaced by the addresses its
// name resolves to now; with peer TLS each such address is verified
// against the name (joinNames, peerRequest). The error names each entry
// that failed to resolve or resolved to nothing; the addresses of the
// others are still returned. seen describes what each DNS entry resolved
// to, for the node's log and errors.
func (n *Node) joinAddrs(ctx context.Context) (addrs []string, seen string, err error) {
	var notes []string
	var errs []error
	names := map[string]string{}
	defer n.rememberJoinNames(names)
	for _, entry := range n.cfg.Join {
		name, port, isDNS, perr := ParseDNSJoin(entry)
		switch {
		case perr != nil:
			errs = append(errs, perr)
			continue
		case !isDNS:
			if !slices.Contains(addrs, entry) {
				addrs = append(addrs, entry)
			}
			continue
		}
		ips, lerr := n.cfg.Resolver.LookupHost(ctx, name)
		if lerr == nil && len(ips) == 0 {
			lerr = errors.New("no addresses")
		}
		if lerr != nil {
			errs = append(errs, fmt.Errorf("resolve --join %s: %w", entry, lerr))
			notes = append(notes, entry+" resolved to nothing")
			continue
		}
		slices.Sort(ips)
		for _, ip := range ips {
			a := net.JoinHostPort(ip, port)
			if !slices.Contains(addrs, a) {
				addrs = append(addrs, a)
			}
			names[a] = name
		}
		notes = append(notes, fmt.Sprintf("%s resolved to %s", entry, strings.Join(ips, ", ")))
	}
	return addrs, strings.Join(notes, "; "), errors.Join(errs...)
}

// rememberJoinNames adds a lookup's addresses to joinNames. Lookups run
// concurrently (forming, registering, clock samples) and one may fail
// while another succeeds, so the names of earlier lookups are kept.
func (n *Node) rememberJoinNames(found map[string]string) {
	if len(found) == 0 {
		return
	}
	for {
		old := n.joinNames.Load()
		merged := map[string]string{}
		if old != nil && len(*old)+len(found) <= maxJoinNames {
			maps.Copy(merged, *old)
		}
		maps.Copy(merged, found)
		if n.joinNames.CompareAndSwap(old, &merged) {
			return
		}
	}
}

// formLoop finds or forms the cluster for a node without state: it joins a
// formed cluster through any peer, waits if a formed cluster already lists
// it, or, with BootstrapExpect > 1, bootstraps once that many unformed nodes
// (itself included) answer. Peers that bootstrap at once do so with the same
// configuration, which Raft allows.
func (n *Node) formLoop() {
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !n.sleep(time.Second) {
			return
		}
		if n.hasConfiguration() {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		done, err := n.formOnce(ctx)
		cancel()
		if done {
			return
		}
		if err != nil && attempt%10 == 0 {
			n.log.Info("waiting for peers to form the cluster", "reason", err)
		}
	}
}

// formOnce makes one attempt of formLoop with the join addresses as they
// resolve now; its error says what each DNS entry resolved to.
func (n *Node) formOnce(ctx context.Context) (bool, error) {
	targets, seen, resolveErr := n.joinAddrs(ctx)
	done, err := n.formWith(ctx, targets)
	if err == nil {
		return done, nil
	}
	if resolveErr != nil {
		err = errors.Join(resolveErr, err)
	}
	if seen != "" {
		err = fmt.Errorf("%w (%s)", err, seen)
	}
	return done, err
}

func (n *Node) formWith(ctx context.Context, targets []string) (bool, error) {
	me := n.self()
	known := []Status{}
	var lastErr error
	for _, addr := range targets {
		st, err := n.PeerStatus(ctx, addr)
		if err != nil {
			lastErr = err
			continue
		}
		if st.NodeID == me.ID {
			continue
		}
		if !st.Formed {
			known = append(known, st)
			continue
		}
		// A cluster that lists this node, stateless here, at its own
		// address either formed with it in a parallel start and still
		// needs its vote to elect a leader (wait for that leader), or has
		// a leader and knew this node before its volume was lost: the
		// Fresh join below removes and adds it again (a node known by a
		// stable name comes back at the same address).
		if slices.ContainsFunc(st.Nodes, func(m Member) bool { return m.ID == me.ID && m.RaftAddr == me.RaftAddr }) && n.cfg.BootstrapExpect > 1 && st.LeaderID == "" {
			n.log.Info("a formed cluster without a leader lists this node; waiting for its leader", "peer", addr)
			return true, nil
		}
		req := JoinRequest{NodeID: me.ID, RaftAddr: me.RaftAddr, HTTPAddr: me.HTTPAddr, Fresh: true}
		if err := n.postJoin(ctx, addr, req); err != nil {
			lastErr = err
			continue
		}
		n.log.Info("joined the cluster", "via", addr)
		return true, nil
	}
	if n.cfg.BootstrapExpect > 1 && len(known)+1 >= n.cfg.BootstrapExpect {
		servers := []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(me.ID), Address: raft.ServerAddress(me.RaftAddr)}}
		for _, st := range known {
			servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(st.NodeID), Address: raft.ServerAddress(st.RaftAddr)})
		}
		slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
		// Every member of the configuration has just answered with the
		// level its build speaks (a build before levels with none: 0), so
		// this node's first term as leader can start the cluster at the
		// lowest of them (startAtBootLevel).
		plan := &bootPlan{servers: servers, level: n.speaks()}
		for _, st := range known {
			n.levels.report(st.NodeID, st.Level, st.BuildVersion, time.Now())
			plan.level = min(plan.level, st.Level)
		}
		n.levels.planBoot(plan)
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			n.levels.planBoot(nil)
			return false, fmt.Errorf("bootstrap: %w", err)
		}
		n.log.Info("bootstrapped the cluster", "voters", len(servers), "level", plan.level)
		return true, nil
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("%d of %d expected nodes answered", len(known)+1, n.cfg.BootstrapExpect)
	}
	return false, lastErr
}

// inConfiguration reports whether this node's id and Raft address are in
// the configuration it knows.
func (n *Node) inConfiguration() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	me := n.self()
	return slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) == me.ID && string(s.Address) == me.RaftAddr
	})
}

func (n *Node) hasConfiguration() bool {
	f := n.raft.GetConfiguration()
	return f.Error() == nil && len(f.Configuration().Servers) > 0
}

// registerLoop keeps this node's directory entry right: a follower whose
// entry is missing or stale (new addresses after a restart) asks the leader
// to update it, and a ready leader whose own record failed tries again,
// since no follower is ready while the directory lacks its leader.
func (n *Node) registerLoop() {
	for n.sleep(time.Second) {
		if n.IsLeader() {
			if n.lead.isReady() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				n.ensureSelfInDirectory(ctx)
				cancel()
			}
			continue
		}
		me := n.self()
		if cur, ok := n.fsm.Node(me.ID); ok && cur == me && n.inConfiguration() {
			continue
		}
		if !n.memberByID() {
			continue // removed, or never added: nothing to correct
		}
		req := JoinRequest{NodeID: me.ID, RaftAddr: me.RaftAddr, HTTPAddr: me.HTTPAddr, UpdateOnly: true}
		for _, addr := range n.registrationTargets() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := n.postJoin(ctx, addr, req)
			cancel()
			if err == nil {
				n.log.Info("updated this node's addresses in the cluster", "via", addr)
				break
			}
			n.log.Debug("updating this node's addresses failed; will retry", "via", addr, "error", err)
		}
	}
}

// registrationTargets lists where to send an address update: the leader if
// known, else every other member in the directory and the --join addresses
// (a follower forwards to the leader). A node whose Raft address changed
// hears from no leader, and its state holds only what a snapshot restored,
// so the join addresses may be its only way back in.
func (n *Node) registrationTargets() []string {
	if addr := n.LeaderDialAddr(); addr != "" {
		return []string{addr}
	}
	var out []string
	for _, m := range n.fsm.Nodes() {
		if m.ID != n.cfg.NodeID && m.HTTPAddr != "" {
			out = append(out, n.httpDialAddr(m.ID, m.HTTPAddr))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	joins, seen, err := n.joinAddrs(ctx)
	if err != nil {
		n.log.Debug("resolving --join for an address update", "error", err, "resolved", seen)
	}
	for _, a := range joins {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// memberByID reports whether this node's id is in the configuration it
// knows, whatever the address recorded for it.
func (n *Node) memberByID() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	return slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool {
		return string(s.ID) == n.cfg.NodeID
	})
}

func (n *Node) peerRequest(ctx context.Context, method, addr, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	if names := n.joinNames.Load(); names != nil {
		if name, ok := (*names)[addr]; ok {
			ctx = tlsconf.WithServerName(ctx, name)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, n.PeerURL(addr, path), rd)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if n.cfg.ClusterKey != "" {
		req.Header.Set(KeyHeader, n.cfg.ClusterKey)
	}
	resp, err := n.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s%s: %w", method, addr, path, err)
	}
	return resp, nil
}

// PeerStatus asks the node at addr (its HTTP address) for its
// /cluster/status, as nodes call each other (TLS and the cluster key as
// configured).
func (n *Node) PeerStatus(ctx context.Context, addr string) (Status, error) {
	resp, err := n.peerRequest(ctx, http.MethodGet, addr, StatusPath, nil)
	if err != nil {
		return Status{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("status of %s: HTTP %d", addr, resp.StatusCode)
	}
	var st Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st); err != nil {
		return Status{}, fmt.Errorf("decode status of %s: %w", addr, err)
	}
	return st, nil
}

func (n *Node) postJoin(ctx context.Context, addr string, req JoinRequest) error {
	resp, err := n.peerRequest(ctx, http.MethodPost, addr, JoinPath, req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("join via %s: HTTP %d: %s", addr, resp.StatusCode, bytes.TrimSpace(msg))
	}
	return nil
}

// Member is one entry of Status.Nodes.
type Member struct {
	ID       string `json:"id"`
	HTTPAddr string `json:"http_addr"`
	RaftAddr string `json:"raft_addr"`
	Voter    bool   `json:"voter"`
	// Level and BuildVersion are what the member last reported of its
	// build (0 and "" for a build before the cluster level, or one not
	// heard from).
	Level        uint32 `json:"level"`
	BuildVersion string `json:"build_version"`
}

// Status describes this node and the cluster as it sees it.
type Status struct {
	NodeID         string `json:"node_id"`
	State          string `json:"state"`
	LeaderID       string `json:"leader_id"`
	LeaderHTTPAddr string `json:"leader_http_addr"`
	Term           uint64 `json:"term"`
	CommitIndex    uint64 `json:"commit_index"`
	AppliedIndex   uint64 `json:"applied_index"`
	LastLogIndex   uint64 `json:"last_log_index"`
	Ready          bool   `json:"ready"`
	HTTPAddr       string `json:"http_addr"`
	RaftAddr       string `json:"raft_addr"`
	Formed         bool   `json:"formed"`
	// Member is true when the Raft configuration this node knows lists it;
	// false on a node that was removed (or has not yet been added).
	Member bool `json:"member"`
	// ClockUnixMs is this node's wall clock when it answered, for peers'
	// clock-skew estimates.
	ClockUnixMs int64 `json:"clock_unix_ms"`
	// ClockSkewed is true when this node's clock is too far from the
	// cluster's median; such a node does not lead.
	ClockSkewed bool `json:"clock_skewed"`
	// ClockOffsetMs is this node's estimated offset from the cluster's median clock.
	ClockOffsetMs int64 `json:"clock_offset_ms"`
	// StateHash is the SHA-256 of the replicated state, filled in only on request.
	StateHash string   `json:"state_hash,omitempty"`
	Nodes     []Member `json:"nodes"`
	// Storage is this node's ability to write its files.
	Storage StorageStatus `json:"storage"`
	// Level is the highest cluster level this node's build speaks, and
	// BuildVersion the build; ActiveLevel is the cluster's, as applied here.
	Level        uint32 `json:"level"`
	BuildVersion string `json:"build_version"`
	ActiveLevel  uint32 `json:"active_level"`
}

// Status reports this node's view of the cluster. Members come from the Raft
// configuration, with HTTP addresses from the directory (this node's own from
// its configuration until the directory has been replayed).
func (n *Node) Status() Status {
	leaderID, leaderHTTP := n.Leader()
	ready, _ := n.Ready()
	st := Status{
		NodeID:         n.cfg.NodeID,
		State:          strings.ToLower(n.raft.State().String()),
		LeaderID:       leaderID,
		LeaderHTTPAddr: leaderHTTP,
		Term:           n.raft.CurrentTerm(),
		CommitIndex:    n.raft.CommitIndex(),
		AppliedIndex:   n.raft.AppliedIndex(),
		LastLogIndex:   n.raft.LastIndex(),
		Ready:          ready,
		HTTPAddr:       n.cfg.HTTPAdvertise,
		RaftAddr:       n.RaftAddr(),
		Nodes:          []Member{},
		Storage:        n.storage.status(),
		Level:          n.speaks(),
		BuildVersion:   n.cfg.BuildVersion,
		ActiveLevel:    n.fsm.Level(),
	}
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			info, _ := n.fsm.Node(string(s.ID))
			m := Member{ID: string(s.ID), HTTPAddr: info.HTTPAddr, RaftAddr: string(s.Address), Voter: s.Suffrage == raft.Voter}
			if m.ID == n.cfg.NodeID {
				m.Level, m.BuildVersion = n.speaks(), n.cfg.BuildVersion
				if m.HTTPAddr == "" { // the directory is not replayed yet
					m.HTTPAddr = n.cfg.HTTPAdvertise
				}
			} else if r, ok := n.levels.of(m.ID); ok {
				m.Level, m.BuildVersion = r.level, r.version
			}
			st.Nodes = append(st.Nodes, m)
			st.Member = st.Member || string(s.ID) == n.cfg.NodeID
		}
	}
	st.Formed = len(st.Nodes) > 0
	skewed, off := n.ClockSkew()
	st.ClockSkewed, st.ClockOffsetMs, st.ClockUnixMs = skewed, off.Milliseconds(), n.Now()
	return st
}

// removed reports whether this node knows a configuration that does not
// list it: it was removed, or is still replaying the log of the cluster it
// is joining.
func (n *Node) removed() bool {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	servers := f.Configuration().Servers
	if len(servers) == 0 {
		return false
	}
	for _, s := range servers {
		if string(s.ID) == n.cfg.NodeID {
			return false
		}
	}
	return true
}
