package fsm

import (
	"slices"
	"strings"

	"github.com/holdfast/holdfast/internal/wire"
)

// NodeInfo is one cluster member's entry in the replicated node directory,
// which lets every node find any member's HTTP address (the leader's above
// all) by its Raft server id.
type NodeInfo struct {
	ID       string `json:"id"`
	HTTPAddr string `json:"http_addr"`
	RaftAddr string `json:"raft_addr"`
}

func (n NodeInfo) encode(e *wire.Encoder) {
	e.String(n.ID)
	e.String(n.HTTPAddr)
	e.String(n.RaftAddr)
}

func (n *NodeInfo) decode(d *wire.Decoder) {
	n.ID = d.String()
	n.HTTPAddr = d.String()
	n.RaftAddr = d.String()
}

// DirectoryResult is what SetNode and RemoveNode return.
type DirectoryResult struct {
	Now int64
	// Changed is false when the command matched the directory already.
	Changed bool
}

func (s *state) applySetNode(c *SetNode) DirectoryResult {
	if old, ok := s.nodes[c.Node.ID]; ok && old == c.Node {
		return DirectoryResult{Now: s.clock}
	}
	s.nodes[c.Node.ID] = c.Node
	s.nodesDirty = true
	return DirectoryResult{Now: s.clock, Changed: true}
}

func (s *state) applyRemoveNode(c *RemoveNode) DirectoryResult {
	if _, ok := s.nodes[c.ID]; !ok {
		return DirectoryResult{Now: s.clock}
	}
	delete(s.nodes, c.ID)
	s.nodesDirty = true
	s.nodesGone = append(s.nodesGone, c.ID)
	return DirectoryResult{Now: s.clock, Changed: true}
}

// sortedNodes returns the directory ordered by id.
func (s *state) sortedNodes() []NodeInfo {
	out := make([]NodeInfo, 0, len(s.nodes))
	for _, n := range s.nodes {
		out = append(out, n)
	}
	slices.SortFunc(out, func(a, b NodeInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Nodes returns the node directory ordered by id.
func (f *FSM) Nodes() []NodeInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.sortedNodes()
}

// Node returns one member's directory entry.
func (f *FSM) Node(id string) (NodeInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n, ok := f.st.nodes[id]
	return n, ok
}
