//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package main

import "io"

// isTerminal reports false: terminals are recognised on Linux and the BSDs
// only, so elsewhere commands print what they print to a pipe.
func isTerminal(io.Writer) bool { return false }
