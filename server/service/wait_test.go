package service

import (
	"testing"

	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/secret"
)

func woken(w *waiter) bool {
	select {
	case <-w.wake:
		return true
	default:
		return false
	}
}

func TestWaitRoomsServeInArrivalOrder(t *testing.T) {
	r := newWaitRooms()
	k := leaseRoom(secret.Hash{1})
	next := func(int64) fsm.Command { return &fsm.LeaseAcquire{} }
	a, b, c := r.join(k, next), r.join(k, next), r.join(k, next)
	if r.empty() {
		t.Fatal("rooms with waiters report empty")
	}
	if !r.first(k, a) || r.first(k, b) || r.waiting(waitLease) != 3 {
		t.Fatal("the first to join is not first")
	}
	r.notify(k)
	if !woken(a) || woken(b) || woken(c) {
		t.Fatal("a notification must wake only the longest waiter")
	}
	// A hand-over reserves the first waiter: it cannot leave, and no second
	// hand-over takes it.
	if got := r.reserveHead(k, 0); got != a {
		t.Fatal("the hand-over did not reserve the longest waiter")
	}
	if r.reserveHead(k, 0) != nil || r.reserve(a) || r.leaveIfFree(k, a) {
		t.Fatal("a reserved waiter was reserved again or left")
	}
	r.unreserve(a)
	if !r.leaveIfFree(k, a) || !r.first(k, b) || !woken(b) {
		t.Fatal("after the first leaves, the next is first and woken")
	}
	r.leave(k, a) // twice is once
	r.leave(k, c)
	if woken(b) || r.waiting(waitLease) != 1 {
		t.Fatal("a waiter behind the first leaving wakes nobody")
	}
	r.leave(k, b)
	if r.waiting(waitLease) != 0 || len(r.rooms) != 0 || !r.empty() {
		t.Fatal("empty rooms are dropped")
	}
	// A job's room wakes every waiter, and takes no hand-over.
	j := jobRoom(secret.ID{1}, secret.ID{2})
	x, y := r.join(j, nil), r.join(j, nil)
	r.notify(j)
	if !woken(x) || !woken(y) || r.reserveHead(j, 0) != nil {
		t.Fatal("a job's room wakes all and takes no hand-over")
	}
}

func TestFreedRooms(t *testing.T) {
	q, j, l := secret.ID{7}, secret.ID{9}, secret.Hash{8}
	for _, c := range []struct {
		cmd  fsm.Command
		want freed
		ok   bool
	}{
		{&fsm.LeaseRelease{Lease: l}, freed{room: leaseRoom(l), handover: true}, true},
		{&fsm.LeaseComplete{Lease: l}, freed{room: leaseRoom(l), handover: true}, true},
		{&fsm.JobEnqueue{Queue: q}, freed{room: claimRoom(q), handover: true}, true},
		{&fsm.JobRetry{Queue: q}, freed{room: claimRoom(q), handover: true}, true},
		{&fsm.JobRelease{Queue: q, Job: j}, freed{room: claimRoom(q), handover: true, job: jobRoom(q, j)}, true},
		{&fsm.JobRelease{Queue: q, Job: j, DelaySeconds: 5}, freed{room: claimRoom(q), job: jobRoom(q, j)}, true},
		{&fsm.JobAck{Queue: q, Job: j}, freed{job: jobRoom(q, j)}, true},
		{&fsm.LeaseAcquire{Lease: l}, freed{}, false},
		{&fsm.JobClaim{Queue: q}, freed{}, false},
	} {
		got, ok := freedBy(c.cmd)
		if ok != c.ok || got != c.want {
			t.Errorf("%T: %+v %v, want %+v %v", c.cmd, got, ok, c.want, c.ok)
		}
	}
	if !succeeded(opResult{lease: &fsm.LeaseResult{Outcome: fsm.LeaseReleased}}) || succeeded(opResult{lease: &fsm.LeaseResult{Outcome: fsm.LeaseLost}}) ||
		!succeeded(opResult{queue: &fsm.QueueResult{Outcome: fsm.JobCreated}}) || succeeded(opResult{queue: &fsm.QueueResult{Outcome: fsm.JobDeduplicated}}) {
		t.Error("succeeded does not tell a freeing outcome from another")
	}
}
