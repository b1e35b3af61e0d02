package faultfs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Op is a set of file system operations a Rule applies to.
type Op uint32

// The operations a Rule can hold or fail. Combine them with |.
const (
	// OpRead is a read that reaches the file system: read(2) and page
	// faults on a mapping that miss the kernel's page cache.
	OpRead Op = 1 << iota
	// OpWrite is a write that reaches the file system: write(2), pwrite(2)
	// and the kernel writing back pages of a shared writable mapping.
	OpWrite
	// OpFsync is fsync(2) or fdatasync(2) on a file that is not a directory.
	OpFsync
	// OpFsyncDir is fsync(2) on a directory.
	OpFsyncDir
	// OpOpen is opening an existing file or directory.
	OpOpen
	// OpCreate is making a new name: open with O_CREAT of a name the kernel
	// did not know, mkdir, mknod, symlink and link. Its path is the new name.
	OpCreate
	// OpRemove is unlink(2) and rmdir(2). Its path is the removed name.
	OpRemove
	// OpRename is rename(2); the rule matches if the old or the new path
	// matches.
	OpRename
	// OpTruncate is a change of a file's size through truncate(2),
	// ftruncate(2) or open with O_TRUNC.
	OpTruncate
	// OpAllocate is fallocate(2).
	OpAllocate

	opEnd
)

// OpAll is every operation a Rule can apply to.
const OpAll = opEnd - 1

// String names the operations in o, joined by "|".
func (o Op) String() string {
	if o == 0 {
		return "none"
	}
	all := [...]string{"read", "write", "fsync", "fsyncdir", "open", "create", "remove", "rename", "truncate", "allocate"}
	var names []string
	for i, name := range all {
		if o&(1<<i) != 0 {
			names = append(names, name)
		}
	}
	if rest := o &^ OpAll; rest != 0 {
		names = append(names, fmt.Sprintf("0x%x", uint32(rest)))
	}
	return strings.Join(names, "|")
}

// UntilCleared as a Rule's Stall holds each matching call until the rule
// is cleared (or the calling process is interrupted, or the file system is
// unmounted).
const UntilCleared time.Duration = math.MaxInt64

// Rule says which calls to hold or fail. A call matches when its operation
// is in Op and its path matches Path; the first rule added that matches and
// has calls left acts on the call: it holds the call for Stall, then answers
// it with Err, or lets it proceed when Err is 0. A rule with neither Stall
// nor Err only counts the calls it matches.
type Rule struct {
	// Op is the set of operations the rule applies to; it must not be 0.
	Op Op
	// Path is a pattern in path.Match syntax matched against a path relative
	// to the mount point, without a leading slash ("raft.db",
	// "raft-log/*", "snapshots/*/state.bin"); the mount point itself is ".".
	// A file with several hard links matches if any of its names does; a
	// file that has no name left (unlinked while open) matches only the
	// empty pattern. An empty Path matches every call.
	Path string
	// Stall is how long each matching call is held before it proceeds or
	// fails: 0 for not at all, UntilCleared to hold it until the rule is
	// cleared. Clearing the rule, unmounting, and an interrupt of the
	// calling process (any signal it receives, SIGKILL included) end the
	// hold early; an interrupted call fails with EINTR.
	Stall time.Duration
	// Err is the error matching calls fail with, after any Stall: EIO and
	// ENOSPC are the usual ones. 0 lets the call proceed.
	Err syscall.Errno
	// Times is how many calls the rule acts on before it is exhausted;
	// 0 means every matching call until the rule is cleared.
	Times int
}

// RuleID identifies a rule added to an FS.
type RuleID uint64

// Stats tells what a rule did.
type Stats struct {
	// Hits is the number of calls the rule acted on (held, failed or
	// counted), interrupted ones included.
	Hits int
	// Held is the number of calls it is holding now.
	Held int
	// Active is false once the rule is cleared or exhausted.
	Active bool
}

// ErrInvalidRule is returned by Add for a rule it cannot apply.
var ErrInvalidRule = errors.New("faultfs: invalid rule")

type rule struct {
	Rule
	id      RuleID
	hits    int
	held    int
	active  bool
	cleared chan struct{}
}

// ruleSet holds every rule of an FS, cleared and exhausted ones included, so
// their counters stay readable.
type ruleSet struct {
	mu     sync.Mutex
	nextID RuleID
	all    map[RuleID]*rule
	active []*rule // in the order they were added
}

func validate(r Rule) error {
	if r.Op == 0 || r.Op&^OpAll != 0 {
		return fmt.Errorf("%w: operations %v", ErrInvalidRule, r.Op)
	}
	if _, err := path.Match(r.Path, ""); err != nil {
		return fmt.Errorf("%w: path pattern %q: %v", ErrInvalidRule, r.Path, err)
	}
	if r.Stall < 0 || r.Times < 0 || r.Err < 0 {
		return fmt.Errorf("%w: negative stall, times or errno in %+v", ErrInvalidRule, r)
	}
	return nil
}

func (s *ruleSet) add(r Rule) (RuleID, error) {
	if err := validate(r); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all == nil {
		s.all = map[RuleID]*rule{}
	}
	s.nextID++
	nr := &rule{Rule: r, id: s.nextID, active: true, cleared: make(chan struct{})}
	s.all[nr.id] = nr
	s.active = append(s.active, nr)
	return nr.id, nil
}

// deactivate takes r out of the active list; s.mu must be held.
func (s *ruleSet) deactivate(r *rule) {
	if !r.active {
		return
	}
	r.active = false
	for i, a := range s.active {
		if a == r {
			s.active = append(s.active[:i:i], s.active[i+1:]...)
			break
		}
	}
}

func (s *ruleSet) clear(id RuleID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.all[id]
	if !ok {
		return
	}
	s.deactivate(r)
	select {
	case <-r.cleared:
	default:
		close(r.cleared)
	}
}

func (s *ruleSet) clearAll() {
	s.mu.Lock()
	ids := make([]RuleID, 0, len(s.all))
	for id := range s.all {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.clear(id)
	}
}

func (s *ruleSet) stats(id RuleID) (Stats, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.all[id]
	if !ok {
		return Stats{}, false
	}
	return Stats{Hits: r.hits, Held: r.held, Active: r.active}, true
}

// any reports whether some rule may act on a call of op.
func (s *ruleSet) any(op Op) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.active {
		if r.Op&op != 0 {
			return true
		}
	}
	return false
}

func matches(pattern string, paths []string) bool {
	if pattern == "" {
		return true
	}
	for _, p := range paths {
		if ok, _ := path.Match(pattern, p); ok {
			return true
		}
	}
	return false
}

// apply lets the first active rule that matches a call of op on paths act
// on it: it counts the call, holds it and returns the error to answer it
// with (0 to let it proceed). paths is called only when some rule covers op.
func (s *ruleSet) apply(ctx context.Context, op Op, paths func() []string) syscall.Errno {
	if !s.any(op) {
		return 0
	}
	ps := paths()
	s.mu.Lock()
	var hit *rule
	for _, r := range s.active {
		if r.Op&op != 0 && matches(r.Path, ps) {
			hit = r
			break
		}
	}
	if hit == nil {
		s.mu.Unlock()
		return 0
	}
	hit.hits++
	if hit.Times > 0 && hit.hits >= hit.Times {
		s.deactivate(hit)
	}
	if hit.Stall > 0 {
		hit.held++
	}
	s.mu.Unlock()

	if hit.Stall > 0 {
		interrupted := hold(ctx, hit.Stall, hit.cleared)
		s.mu.Lock()
		hit.held--
		s.mu.Unlock()
		if interrupted {
			return syscall.EINTR
		}
	}
	return hit.Err
}

// hold waits for d, for cleared to close or for ctx to end, and reports
// whether ctx ended it.
func hold(ctx context.Context, d time.Duration, cleared <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-cleared:
		return false
	case <-ctx.Done():
		return true
	}
}
