//go:build darwin || dragonfly || freebsd || linux || netbsd || openbsd

package devcluster

import "syscall"

func getpgid(pid int) (int, error) { return syscall.Getpgid(pid) }
