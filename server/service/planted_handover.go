//go:build holdfast_bug_double_handover

package service

// Planted bug: a hand-over's result reaches the two longest waiters.
const plantedDoubleHandover = true
