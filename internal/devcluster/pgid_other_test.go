//go:build unix && !(darwin || dragonfly || freebsd || linux || netbsd || openbsd)

package devcluster

import (
	"errors"
	"fmt"
	"runtime"
)

func getpgid(int) (int, error) {
	return 0, fmt.Errorf("syscall.Getpgid on %s: %w", runtime.GOOS, errors.ErrUnsupported)
}
