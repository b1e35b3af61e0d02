//go:build !holdfast_bug_level_gate

package cluster

// plantedLevelGate, true only in a build with its tag, makes a leader
// raise the cluster level at once and write any format whatever the level:
// the fault suite's upgrade test must catch it.
const plantedLevelGate = false
