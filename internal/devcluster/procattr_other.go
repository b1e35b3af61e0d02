//go:build !unix

package devcluster

import "syscall"

// nodeProcAttr gives a node no special attributes: outside unix there are
// no process groups to put it in (and no SIGTERM to forward, so a stop ends
// with a kill after Config.StopTimeout). This file only keeps the package
// building; `holdfast dev` is meant for unix systems.
func nodeProcAttr() *syscall.SysProcAttr { return nil }
