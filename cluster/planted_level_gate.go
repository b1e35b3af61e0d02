//go:build holdfast_bug_level_gate

package cluster

// Planted bug: the leader raises the cluster level without asking the
// members, and the proposal gate lets every format through.
const plantedLevelGate = true
