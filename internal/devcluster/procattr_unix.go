//go:build unix && !linux

package devcluster

import "syscall"

// nodeProcAttr puts a node in a process group of its own (see startNode).
// Nothing stops the nodes if this process is killed with SIGKILL; the next
// Run on the same directory refuses to start while they still answer.
func nodeProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
