//go:build linux

package devcluster

import "syscall"

// nodeProcAttr puts a node in a process group of its own (see startNode)
// and has the kernel send it SIGTERM when the thread that started it dies,
// so the nodes stop even if this process is killed with SIGKILL. Run starts
// the nodes from a goroutine locked to its thread for the whole run (see
// cluster.start), because a Go thread can exit while the process lives on.
//
// When the whole process dies, the kernel sends the signal again each time
// it hands the node to another of the dying threads: a node may then get
// SIGTERM more than once and, as `holdfast serve` does on a second signal,
// exit at once instead of gracefully. It stops either way.
func nodeProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
