package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// child is a command run by exec or work, in a process group of its own so
// that a signal reaches it (and whatever it started) exactly once: from
// holdfast, which forwards the signals it gets.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the command has exited
	code int           // its exit status, valid after done
}

// startChild starts argv with env added to holdfast's environment.
func startChild(argv, env []string, stdin io.Reader, stdout, stderr io.Writer) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		c.code = exitStatus(cmd.ProcessState, err)
		close(c.done)
	}()
	return c, nil
}

// exitStatus is a finished command's status in the shell's terms: its exit
// code, or 128 plus the signal that ended it.
func exitStatus(ps *os.ProcessState, err error) int {
	if ps == nil {
		return exitFailed
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return exitFailed
}

// signal sends sig to the child's process group.
func (c *child) signal(sig syscall.Signal) {
	_ = syscall.Kill(-c.cmd.Process.Pid, sig)
}

// stop sends SIGTERM to the group, then SIGKILL after grace, and waits.
func (c *child) stop(grace time.Duration) {
	c.signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		c.signal(syscall.SIGKILL)
		<-c.done
	}
	// Whatever the command left running in its group goes too.
	c.signal(syscall.SIGKILL)
}

// forwardedSignals are the signals holdfast passes on to its children.
func forwardedSignals() []os.Signal {
	return []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}
}

// notifySignals starts delivery of the forwarded signals to a new channel;
// the returned function stops it.
func notifySignals() (<-chan os.Signal, func()) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, forwardedSignals()...)
	return ch, func() { signal.Stop(ch) }
}

// renewal is the outcome of one renewal: ok with the new time to live, lost
// for good, or neither (try again).
type renewal struct {
	ok, lost bool
	ttl      time.Duration
}

// keepAlive renews a lease or claim every third of ttl until ctx ends
// (returning ""), or until it is gone: a renewal answers lost, or it would
// expire before a renewal succeeds. Expiry is counted by this process's
// clock from when the last successful renewal was sent (first: the time to
// live from now), so it is never later than the server's. A failed renewal
// is tried again after a second.
func keepAlive(ctx context.Context, ttl, first time.Duration, renew func(context.Context) renewal) string {
	expires := time.Now().Add(first)
	next := ttl / 3
	for {
		t := time.NewTimer(min(next, time.Until(expires)))
		select {
		case <-ctx.Done():
			t.Stop()
			return ""
		case <-t.C:
		}
		if !time.Now().Before(expires) {
			return "expired before a renewal succeeded"
		}
		sent := time.Now()
		callCtx, cancel := context.WithDeadline(ctx, expires)
		out := renew(callCtx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ""
		case out.ok:
			expires, next = sent.Add(out.ttl), ttl/3
		case out.lost:
			return "was lost (someone else may hold it now)"
		default:
			next = time.Second
		}
	}
}
