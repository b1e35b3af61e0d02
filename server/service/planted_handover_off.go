//go:build !holdfast_bug_double_handover

package service

// plantedDoubleHandover is true only in the build that plants the
// double-hand-over bug for the fault suite: a hand-over's result then also
// reaches the second waiter.
const plantedDoubleHandover = false
