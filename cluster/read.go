package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/raft"
)

// ReadLinearizable runs read against this node's state only if the node is
// a ready leader, and returns nil only if the node still holds leadership
// after the read (read, then VerifyLeader, then answer). On error the
// caller must discard what read produced: it may be stale. ErrNotLeader and
// ErrNotReady are safe to retry on the leader.
func (n *Node) ReadLinearizable(ctx context.Context, read func()) error {
	if plantedStaleRead {
		read()
		return nil
	}
	if n.raft.State() != raft.Leader {
		return ErrNotLeader
	}
	if !n.lead.isReady() {
		return ErrNotReady
	}
	if err := n.logStall(); err != nil {
		// Raft confirms leadership on the loop that waits for the stalled
		// append, and queues only so many confirmations. Refused as by a
		// node that does not lead (it will not for long), not as a write
		// refused for want of storage: the cause is only text here.
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	}
	read()
	if err := await(ctx, n.raft.VerifyLeader()); err != nil {
		return fmt.Errorf("%w: leadership not confirmed: %w", ErrNotLeader, err)
	}
	return nil
}

// Ready reports whether this node can serve: it can write its files, a
// leader is known (on a follower, with its address) and this node has
// applied everything it knows to be committed. The reason says why not (a
// storage fault names the data dir, the kind of file and the error).
func (n *Node) Ready() (bool, string) {
	if err := n.FatalErr(); err != nil {
		return false, fmt.Sprintf("storage failed and the node is stopping: %v", err)
	}
	if st := n.storage.status(); !st.OK {
		f := st.Faults[0]
		return false, fmt.Sprintf("storage fault: this node cannot write its %s in data dir %s since %s: %s",
			f.Kind, st.DataDir, time.UnixMilli(f.SinceUnixMs).UTC().Format(time.RFC3339), f.Error)
	}
	if _, id := n.raft.LeaderWithID(); id == "" {
		if n.removed() {
			return false, "no leader is known and this node is not in the cluster's configuration: if it was removed, stop it, or wipe its data directory and start it with --join to add it again"
		}
		return false, "no leader is known"
	}
	if n.IsLeader() && !n.lead.isReady() {
		return false, "leader has not yet applied its term's barrier"
	}
	if !n.IsLeader() {
		// Raft itself gives up on a silent leader only after a randomised
		// one to two heartbeat timeouts; its writes fail well before that.
		if since := time.Since(n.raft.LastContact()); since > n.leaderContactBound() {
			return false, fmt.Sprintf("no contact with the leader for %s", since.Round(time.Millisecond))
		}
		// Without the leader's entry in the node directory this node can
		// forward nothing to it: a new leader records itself once it is
		// ready, and a follower that has not applied that entry yet does
		// not know where to send a write. A leader is ready only after it
		// has raised a new cluster's level, so a follower that has applied
		// the entry serves that level too.
		if _, addr := n.Leader(); addr == "" {
			return false, "the leader's address is not known yet: its entry in the node directory is not applied on this node"
		}
	}
	if applied, commit := n.raft.AppliedIndex(), n.raft.CommitIndex(); applied < commit {
		return false, fmt.Sprintf("applied index %d is behind commit index %d", applied, commit)
	}
	return true, ""
}

// LeadershipDone returns a channel closed when this node's current term as
// leader ends; it is closed already when the node does not lead. A request
// that waits on the leader stops waiting when it closes.
func (n *Node) LeadershipDone() <-chan struct{} { return n.lead.done() }

// IsReadyLeader reports whether this node leads and has applied everything
// committed before its term, so its local state is current enough to refuse
// a request early (Apply still decides).
func (n *Node) IsReadyLeader() bool {
	return n.raft.State() == raft.Leader && n.lead.isReady()
}

// leaderContactBound is how long a follower may go without hearing from
// its leader and still call itself ready: half a heartbeat timeout, several
// times the interval of the leader's heartbeats (a tenth to a fifth of the
// timeout), so readiness turns within one heartbeat timeout of losing the
// leader.
func (n *Node) leaderContactBound() time.Duration { return n.cfg.HeartbeatTimeout / 2 }
