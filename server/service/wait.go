package service

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
)

// Waiting requests (a long-poll claim, a blocking acquire, a read that
// awaits a job's outcome) wait on the leader, outside the state machine, for
// at most their wait_seconds. Every write goes through the leader's execute,
// which wakes the waiters of what it changed; what changes by time alone (a
// lease or a claim window ending, a release's delay passing) each waiter
// sleeps until itself, having asked the state when that is. Claims on a
// queue and acquires of a key are served in arrival order: only the first
// waiter tries, and the next one is woken when it leaves. A waiter costs a
// goroutine blocked in a select and nothing else; when the leader's term
// ends it answers at once that nothing was done.

// Bounds of wait_seconds.
const (
	// MaxClaimWaitSeconds bounds a claim's wait_seconds.
	MaxClaimWaitSeconds = 20
	// MaxAcquireWaitSeconds bounds an acquire's wait_seconds; no wait is longer.
	MaxAcquireWaitSeconds = 60
	// MaxReadWaitSeconds bounds a job read's wait_seconds.
	MaxReadWaitSeconds = 60
	// waitRetryFloor keeps a waiter whose try lost a race (the state said
	// it could succeed; another request got there first) from trying again
	// sooner than this unless something it waits for changes.
	waitRetryFloor = 20 * time.Millisecond
)

// waitKind names what a room's waiters wait for.
type waitKind uint8

const (
	waitClaim waitKind = iota + 1 // a claimable job in a queue: first come, first served
	waitLease                     // a lease key that is not held: first come, first served
	waitJob                       // a job's outcome: every waiter is woken
)

type waitKey struct {
	kind waitKind
	id   [32]byte
}

func claimRoom(q secret.ID) waitKey {
	k := waitKey{kind: waitClaim}
	copy(k.id[:], q[:])
	return k
}

func leaseRoom(l secret.Hash) waitKey { return waitKey{kind: waitLease, id: l} }

func jobRoom(q, j secret.ID) waitKey {
	k := waitKey{kind: waitJob}
	copy(k.id[:16], q[:])
	copy(k.id[16:], j[:])
	return k
}

// waiter is one waiting request; wake holds at most one pending wake-up.
// A claim or an acquire also gives next, its command stamped anew, so that
// the write that frees what it waits for can carry it along in the same
// log entry (a hand-over); handed then brings the result.
type waiter struct {
	wake   chan struct{}
	next   func(now int64) fsm.Command
	handed chan opResult
	// reserved (guarded by waitRooms.mu) marks the waiter's command in
	// flight: carried by a hand-over, whose result will come on handed (so
	// the waiter neither tries nor leaves meanwhile), or its own try (so no
	// hand-over carries it twice).
	reserved bool
}

// deliver hands the waiter the result of a hand-over.
func (w *waiter) deliver(r opResult) {
	select {
	case w.handed <- r:
	default:
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// waitRooms holds the waiters of each room in arrival order.
type waitRooms struct {
	mu    sync.Mutex
	rooms map[waitKey][]*waiter
	count [waitJob + 1]int // waiters by kind
	total atomic.Int64     // waiters of every kind, read without mu
	// handovers counts writes that carried a waiter's command.
	handovers atomic.Uint64
}

func newWaitRooms() *waitRooms { return &waitRooms{rooms: make(map[waitKey][]*waiter)} }

func (r *waitRooms) join(k waitKey, next func(now int64) fsm.Command) *waiter {
	w := &waiter{wake: make(chan struct{}, 1), next: next, handed: make(chan opResult, 1)}
	r.mu.Lock()
	r.rooms[k] = append(r.rooms[k], w)
	r.count[k.kind]++
	r.total.Add(1)
	r.mu.Unlock()
	return w
}

// leave removes w; if it was first in a first-come room, the next one is
// woken to take its turn. Leaving twice is leaving once.
func (r *waitRooms) leave(k waitKey, w *waiter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.remove(k, w)
}

// leaveIfFree removes w unless its command is in flight.
func (r *waitRooms) leaveIfFree(k waitKey, w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.reserved {
		return false
	}
	r.remove(k, w)
	return true
}

// remove is leave with r.mu held.
func (r *waitRooms) remove(k waitKey, w *waiter) {
	ws := r.rooms[k]
	for i, x := range ws {
		if x != w {
			continue
		}
		ws = append(ws[:i], ws[i+1:]...)
		r.count[k.kind]--
		r.total.Add(-1)
		if len(ws) == 0 {
			delete(r.rooms, k)
			return
		}
		r.rooms[k] = ws
		if i == 0 && k.kind != waitJob {
			ws[0].signal()
		}
		return
	}
}

// reserveHead reserves the longest waiter of a first-come room for a
// hand-over, if it can take one; skip passes over that many waiters first
// (only a planted bug asks for another than the first).
func (r *waitRooms) reserveHead(k waitKey, skip int) *waiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.rooms[k]
	if len(ws) <= skip || ws[skip].next == nil || ws[skip].reserved {
		return nil
	}
	ws[skip].reserved = true
	return ws[skip]
}

// reserve marks w's own try in flight, so that no hand-over carries it at
// the same time; false if a hand-over already does.
func (r *waitRooms) reserve(w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.reserved {
		return false
	}
	w.reserved = true
	return true
}

// isReserved reports whether a hand-over is in flight for w.
func (r *waitRooms) isReserved(w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return w.reserved
}

// unreserve ends w's hand-over.
func (r *waitRooms) unreserve(w *waiter) {
	r.mu.Lock()
	w.reserved = false
	r.mu.Unlock()
}

// first reports whether w is the longest-waiting of its room.
func (r *waitRooms) first(k waitKey, w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.rooms[k]
	return len(ws) > 0 && ws[0] == w
}

// notify wakes the first waiter of a first-come room, or every waiter of
// a job's room.
func (r *waitRooms) notify(k waitKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := r.rooms[k]
	if len(ws) == 0 {
		return
	}
	if k.kind != waitJob {
		ws[0].signal()
		return
	}
	for _, w := range ws {
		w.signal()
	}
}

// empty reports, without taking the lock, whether no request waits: the
// writes on the hot path then skip the rooms.
func (r *waitRooms) empty() bool { return r.total.Load() == 0 }

// waiting is the number of requests of a kind waiting on this node.
func (r *waitRooms) waiting(kind waitKind) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count[kind]
}

// register adds the waiting requests and the hand-overs to the metrics.
func (r *waitRooms) register(reg *prometheus.Registry) {
	for kind, name := range map[waitKind]string{waitClaim: "claim", waitLease: "acquire", waitJob: "job_read"} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "holdfast_waiting_requests",
			Help:        "Requests waiting on this node (wait_seconds), by kind.",
			ConstLabels: prometheus.Labels{"kind": name},
		}, func() float64 { return float64(r.waiting(kind)) }))
	}
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "holdfast_handovers_total",
		Help: "Writes on this leader that carried a waiting acquire or claim in their log entry.",
	}, func() float64 { return float64(r.handovers.Load()) }))
}

// freed names what a write frees when it succeeds: the first-come room
// whose waiters can now succeed (a lease's acquirers, a queue's claims),
// whether a hand-over may carry that room's longest waiter (not for a
// release with a delay: its job is not claimable yet), and a job whose
// outcome readers may await.
type freed struct {
	room     waitKey
	handover bool
	job      waitKey
}

// freedBy says what cmd frees when it succeeds; ok is false for a command
// that frees nothing.
func freedBy(cmd fsm.Command) (f freed, ok bool) {
	switch c := cmd.(type) {
	case *fsm.LeaseRelease:
		return freed{room: leaseRoom(c.Lease), handover: true}, true
	case *fsm.LeaseComplete:
		return freed{room: leaseRoom(c.Lease), handover: true}, true
	case *fsm.JobEnqueue:
		return freed{room: claimRoom(c.Queue), handover: true}, true
	case *fsm.JobRetry:
		return freed{room: claimRoom(c.Queue), handover: true}, true
	case *fsm.JobRelease: // the job may also have failed
		return freed{room: claimRoom(c.Queue), handover: c.DelaySeconds == 0, job: jobRoom(c.Queue, c.Job)}, true
	case *fsm.JobAck:
		return freed{job: jobRoom(c.Queue, c.Job)}, true
	}
	return freed{}, false
}

// succeeded reports whether a write's result is the outcome that frees
// what freedBy names.
func succeeded(res opResult) bool {
	switch {
	case res.lease != nil:
		return res.lease.Outcome == fsm.LeaseReleased || res.lease.Outcome == fsm.LeaseCompleted
	case res.queue != nil:
		switch res.queue.Outcome {
		case fsm.JobCreated, fsm.JobRetried, fsm.JobReleased, fsm.JobAcked:
			return true
		}
	}
	return false
}

// notifyChange wakes the waiters of what a write applied on this leader
// freed.
func (s *Service) notifyChange(cmd fsm.Command, res opResult) {
	if s.waits.empty() {
		return
	}
	f, ok := freedBy(cmd)
	if !ok || !succeeded(res) {
		return
	}
	if f.room.kind != 0 {
		s.waits.notify(f.room)
	}
	if f.job.kind != 0 {
		s.waits.notify(f.job)
	}
}

// turn is a first-come waiting request: probe says whether trying can
// succeed now and, if not, when that may change by time alone (Unix ms, 0
// for never); next is the request's command stamped with a time, which a
// try proposes and a hand-over carries; final says whether an answer (its
// own or a hand-over's) ends the wait; expire is the answer at the deadline.
type turn struct {
	room   waitKey
	probe  func(now int64) (ready bool, nextAt int64)
	final  func(opResult) bool
	next   func(now int64) fsm.Command
	expire func() opResult
}

// proposeWithHandover commits cmd; when the room cmd frees has a waiter,
// that waiter's own command goes in the same entry, right after cmd, and
// its result to the waiter: one commit per hand-over instead of two.
func (s *Service) proposeWithHandover(ctx context.Context, cmd fsm.Command) opResult {
	f, ok := freedBy(cmd)
	if !ok || !f.handover || s.waits.empty() {
		return s.propose(ctx, cmd)
	}
	room := f.room
	w := s.waits.reserveHead(room, 0)
	if w == nil {
		return s.propose(ctx, cmd)
	}
	s.waits.handovers.Add(1)
	rs, err := s.node.ProposeAll(ctx, cmd, w.next(s.node.Now()))
	if err != nil {
		res := refused(ClusterError(err))
		w.deliver(res)
		return res
	}
	first, second := typedResult(rs[0]), typedResult(rs[1])
	w.deliver(second)
	if plantedDoubleHandover {
		if w2 := s.waits.reserveHead(room, 1); w2 != nil {
			w2.deliver(second)
		}
	}
	s.notifyChange(cmd, first)
	return first
}

// leadershipLost is the answer of a waiter whose node stopped leading.
func leadershipLost() opResult {
	return refused(NotApplied("leadership moved while the request waited; nothing was changed, retry"))
}

// waitCancelled is the answer of a waiter whose caller went away.
func waitCancelled() opResult {
	return refused(NotApplied("the request ended while it waited; nothing was changed"))
}

// awaitTurn waits for up to wait, on the ready leader, for t's turn. A
// waiter leaves its room only while nothing of it is in flight, so no
// hand-over's result is ever left without its request.
func (s *Service) awaitTurn(ctx context.Context, wait time.Duration, t turn) opResult {
	deadline := s.node.Now() + wait.Milliseconds()
	lost := s.node.LeadershipDone()
	w := s.waits.join(t.room, t.next)
	defer s.waits.leave(t.room, w)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var retryAt int64 // no try before this, after one that lost a race
	// settle takes the result of w's command, in flight until now: a final
	// one ends the wait (w leaves before it is free again), another makes w
	// wait on.
	settle := func(res opResult) bool {
		if t.final(res) {
			s.waits.leave(t.room, w)
			return true
		}
		s.waits.unreserve(w)
		retryAt = s.node.Now() + waitRetryFloor.Milliseconds()
		return false
	}
	for {
		if s.waits.isReserved(w) {
			// A hand-over carries this request: its result decides,
			// whatever the deadline or the caller's state.
			if res := <-w.handed; settle(res) {
				return res
			}
			continue
		}
		now := s.node.Now()
		wakeAt := deadline
		if s.waits.first(t.room, w) {
			ready, nextAt := t.probe(now)
			switch {
			case ready && now >= retryAt:
				if !s.waits.reserve(w) {
					continue // a hand-over carries it already
				}
				if res := s.propose(ctx, t.next(s.node.Now())); settle(res) {
					return res
				}
				continue
			case ready:
				wakeAt = min(wakeAt, retryAt)
			case nextAt > 0:
				wakeAt = min(wakeAt, nextAt)
			}
		}
		if now >= deadline {
			if !s.waits.leaveIfFree(t.room, w) {
				continue
			}
			return t.expire()
		}
		timer.Reset(time.Duration(wakeAt-now) * time.Millisecond)
		select {
		case <-w.wake:
		case res := <-w.handed:
			if settle(res) {
				return res
			}
		case <-timer.C:
		case <-ctx.Done():
			if s.waits.leaveIfFree(t.room, w) {
				return waitCancelled()
			}
		case <-lost:
			if s.waits.leaveIfFree(t.room, w) {
				return leadershipLost()
			}
		}
	}
}

// waitClaim is a claim with wait_seconds: it takes the first job to become
// claimable, or answers job: null at the deadline.
func (s *Service) waitClaim(ctx context.Context, wait time.Duration, c *fsm.JobClaim) opResult {
	f := s.node.FSM()
	return s.awaitTurn(ctx, wait, turn{
		room:  claimRoom(c.Queue),
		probe: func(now int64) (bool, int64) { return f.ClaimWait(c, now) },
		final: func(res opResult) bool { return res.queue == nil || res.queue.Outcome != fsm.QueueEmpty },
		next: func(now int64) fsm.Command {
			n := *c
			n.Now = now
			return &n
		},
		expire: func() opResult {
			// Nothing to claim, as a leader that still leads says.
			if err := s.node.ReadLinearizable(ctx, func() {}); err != nil {
				return refused(ClusterError(err))
			}
			return opResult{queue: &fsm.QueueResult{Outcome: fsm.QueueEmpty, Now: s.node.Now()}}
		},
	})
}

// waitAcquire is an acquire with wait_seconds: while the lease is held it
// waits; when the lease is released, expires or completes, the longest
// waiter tries first.
func (s *Service) waitAcquire(ctx context.Context, wait time.Duration, c *fsm.LeaseAcquire) opResult {
	f := s.node.FSM()
	next := func(now int64) fsm.Command {
		n := *c
		n.Now = now
		return &n
	}
	return s.awaitTurn(ctx, wait, turn{
		room: leaseRoom(c.Lease),
		probe: func(now int64) (bool, int64) {
			held, ready := f.AcquireWait(c, now)
			return ready, held.LeaseExpiresAt
		},
		final: func(res opResult) bool { return res.lease == nil || res.lease.Outcome != fsm.LeaseHeld },
		next:  next,
		expire: func() opResult {
			// The holder, read linearizably: a deposed leader must not
			// answer "held" from its stale state.
			var held fsm.LeaseResult
			var ready bool
			if err := s.node.ReadLinearizable(ctx, func() { held, ready = f.AcquireWait(c, s.node.Now()) }); err != nil {
				return refused(ClusterError(err))
			}
			if !ready {
				return opResult{lease: &held}
			}
			return s.propose(ctx, next(s.node.Now()))
		},
	})
}

// awaitJob is a job read with wait_seconds: it answers as soon as the job
// is completed or failed (or the read fails), or its state at the deadline.
func (s *Service) awaitJob(ctx context.Context, wait time.Duration, q *queueRead) opResult {
	deadline := s.node.Now() + wait.Milliseconds()
	lost := s.node.LeadershipDone()
	room := jobRoom(q.queue, q.job)
	w := s.waits.join(room, nil)
	defer s.waits.leave(room, w)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		res := s.executeRead(ctx, q)
		now := s.node.Now()
		if jobSettled(res) || now >= deadline {
			return res
		}
		wakeAt := min(deadline, res.queue.Job.QueueExpiresAt)
		if j := res.queue.Job; j.Status == fsm.JobClaimedStatus {
			wakeAt = min(wakeAt, j.VisibleAt) // the claim may end in failure
		}
		timer.Reset(time.Duration(max(wakeAt-now, 1)) * time.Millisecond)
		select {
		case <-w.wake:
		case <-timer.C:
		case <-ctx.Done():
			return waitCancelled()
		case <-lost:
			return leadershipLost()
		}
	}
}

// jobSettled reports whether a job read is final for a waiting read: a
// refusal, no such queue or job, or a completed or failed job.
func jobSettled(r opResult) bool {
	if r.queue == nil || r.queue.Outcome != fsm.QueueFound || r.queue.Job == nil {
		return true
	}
	st := r.queue.Job.Status
	return st == fsm.JobCompleted || st == fsm.JobFailed
}

// WaitSeconds checks an optional wait_seconds against its bound.
func WaitSeconds(v *int64, maxSeconds int64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if *v < 0 || *v > maxSeconds {
		return 0, Invalid("wait_seconds", fmt.Sprintf("must be an integer from 0 to %d", maxSeconds))
	}
	return time.Duration(*v) * time.Second, nil
}
