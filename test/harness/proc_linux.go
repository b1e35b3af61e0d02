//go:build linux

package harness

import "syscall"

// sysProcAttr puts the node in its own process group (a ^C to `go test`
// does not reach it twice) and has the kernel kill it if the test binary
// dies without running its cleanups (a panic or -timeout).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
