package cluster

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// peerFailureLines are the Raft library's lines about one failed call to a
// peer. With a peer down, the leader writes several a second (each
// heartbeat, each replication attempt, each lease check); peerLogs turns
// them into one line when the peer is lost, one a minute while it stays
// lost, and one when it is back.
var peerFailureLines = []string{
	"failed to heartbeat to",
	"failed to appendEntries to",
	"failed to pipeline appendEntries",
	"failed to start pipeline replication to",
	"failed to make requestVote RPC",
	"failed to contact",
}

// peerLossRepeat is how often a peer that stays lost is logged again, and
// peerLossForgotten how long a peer without failures counts as lost: its
// next failure after that starts a new episode.
const (
	peerLossRepeat    = time.Minute
	peerLossForgotten = 2 * time.Minute
)

// peerLogs sums up the failures of calls to each peer.
type peerLogs struct {
	log hclog.Logger
	now func() time.Time

	mu    sync.Mutex
	lost  map[string]*peerLoss // by peer address (or id, when no address is known)
	addrs map[raft.ServerID]raft.ServerAddress
}

// peerLoss is one episode of failures to reach a peer.
type peerLoss struct {
	since, lastLine, lastFailure time.Time
	failures                     int // since since
	unreported                   int // since lastLine
	lastErr                      string
}

func newPeerLogs(log hclog.Logger, now func() time.Time) *peerLogs {
	if now == nil {
		now = time.Now
	}
	return &peerLogs{log: log, now: now, lost: map[string]*peerLoss{}, addrs: map[raft.ServerID]raft.ServerAddress{}}
}

// holdBack reports whether the Raft library's line msg is a failed call to
// a peer; if so it is counted, and logged only as the episode's first line
// or its once-a-minute summary.
func (p *peerLogs) holdBack(msg string, args []interface{}) bool {
	if !slices.Contains(peerFailureLines, msg) {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	peer, errText := p.peerOf(args)
	now := p.now()
	l := p.lost[peer]
	if l != nil && now.Sub(l.lastFailure) >= peerLossForgotten {
		l = nil // a new episode
	}
	if l == nil {
		l = &peerLoss{since: now, lastLine: now}
		p.lost[peer] = l
		l.failures, l.lastFailure, l.lastErr = 1, now, errText
		kv := []interface{}{"peer", peer, "failure", msg}
		if errText != "" {
			kv = append(kv, "error", errText)
		}
		p.log.Error("lost contact with a peer; further failures are summed up once a minute", kv...)
		return true
	}
	l.failures++
	l.unreported++
	l.lastFailure = now
	if errText != "" {
		l.lastErr = errText
	}
	if now.Sub(l.lastLine) >= peerLossRepeat {
		p.log.Error("still no contact with a peer", "peer", peer, "failures", l.unreported,
			"lost_for", now.Sub(l.since).Round(time.Second).String(), "last_error", l.lastErr)
		l.lastLine, l.unreported = now, 0
	}
	return true
}

// back logs that the peer id answers again, if it was lost.
func (p *peerLogs) back(id raft.ServerID) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := []string{string(id)}
	if a, ok := p.addrs[id]; ok {
		keys = append(keys, string(a))
	}
	for _, k := range keys {
		if l := p.lost[k]; l != nil {
			delete(p.lost, k)
			p.log.Info("peer reachable again", "peer", k, "failures", l.failures, "lost_for", p.now().Sub(l.since).Round(time.Second).String())
		}
	}
}

// learn records the members' addresses, so that a line naming a peer by
// its id counts toward the same peer as lines naming its address.
func (p *peerLogs) learn(servers []raft.Server) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, sv := range servers {
		p.addrs[sv.ID] = sv.Address
	}
}

// peerOf reads the peer and the error from a failure line's arguments:
// "peer" or "target" (a raft.Server or its address), or "server-id" (named
// by its address once a raft.Server has shown it).
func (p *peerLogs) peerOf(args []interface{}) (peer, errText string) {
	for i := 0; i+1 < len(args); i += 2 {
		k, _ := args[i].(string)
		switch v := args[i+1].(type) {
		case raft.Server:
			p.addrs[v.ID] = v.Address
			peer = string(v.Address)
		case raft.ServerAddress:
			peer = string(v)
		case raft.ServerID:
			if a, ok := p.addrs[v]; ok {
				peer = string(a)
			} else {
				peer = string(v)
			}
		case error:
			if k == "error" {
				errText = v.Error()
			}
		default:
			if k == "peer" || k == "target" {
				peer = fmt.Sprint(v)
			}
		}
	}
	if peer == "" {
		peer = "unknown"
	}
	return peer, errText
}

// peerAddrRefresh is how often watchPeers reads the members' addresses.
const peerAddrRefresh = 5 * time.Second

// watchPeers ends the loss episodes of peers whose heartbeats resume, and
// keeps peerLogs' member addresses current, until the node shuts down.
func (n *Node) watchPeers() {
	refresh := time.NewTicker(peerAddrRefresh)
	defer refresh.Stop()
	learn := func() {
		if f := n.raft.GetConfiguration(); f.Error() == nil {
			n.peers.learn(f.Configuration().Servers)
		}
	}
	learn()
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.ResumedHeartbeatObservation)
		return ok
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	for {
		select {
		case o := <-ch:
			if r, ok := o.Data.(raft.ResumedHeartbeatObservation); ok {
				n.peers.back(r.PeerID)
			}
		case <-refresh.C:
			learn()
		case <-n.shutdownCh:
			return
		}
	}
}
