package server

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
	if r.waiting(waitLease) != 0 || len(r.rooms) != 0 {
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

func TestHandoverRooms(t *testing.T) {
	q, l := secret.ID{7}, secret.Hash{8}
	for _, c := range []struct {
		cmd  fsm.Command
		room waitKey
		ok   bool
	}{
		{&fsm.LeaseRelease{Lease: l}, leaseRoom(l), true},
		{&fsm.LeaseComplete{Lease: l}, leaseRoom(l), true},
		{&fsm.JobEnqueue{Queue: q}, claimRoom(q), true},
		{&fsm.JobRetry{Queue: q}, claimRoom(q), true},
		{&fsm.JobRelease{Queue: q}, claimRoom(q), true},
		{&fsm.JobRelease{Queue: q, DelaySeconds: 5}, waitKey{}, false},
		{&fsm.JobAck{Queue: q}, waitKey{}, false},
		{&fsm.LeaseAcquire{Lease: l}, waitKey{}, false},
	} {
		room, ok := handoverRoom(c.cmd)
		if ok != c.ok || ok && room != c.room {
			t.Errorf("%T: room %v %v, want %v %v", c.cmd, room, ok, c.room, c.ok)
		}
	}
}
