package fsm

import (
	"fmt"
	"strings"
	"testing"

	"github.com/holdfast/holdfast/internal/secret"
)

// eachStored calls fn with every lease and every queue (jobs loaded) f's
// store holds.
func eachStored(t *testing.T, f *FSM, lease func(*lease), queue func(*queue)) {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	store := f.st.store
	lower, upper := tableBounds(tableLease)
	if err := store.Scan(lower, upper, func(_, v []byte) bool {
		l, err := decodeLease(v)
		if err != nil {
			t.Fatal(err)
		}
		lease(l)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	var ids []secret.ID
	lower, upper = tableBounds(tableQueue)
	if err := store.Scan(lower, upper, func(k, _ []byte) bool {
		ids = append(ids, secret.ID(k[1:]))
		return true
	}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		v, _, err := store.Get(queueKey(id))
		if err != nil {
			t.Fatal(err)
		}
		q, err := loadQueue(store, v)
		if err != nil {
			t.Fatal(err)
		}
		queue(q)
	}
}

// storedStats counts what f's gauges count, by a scan of its store.
func storedStats(t *testing.T, f *FSM) Stats {
	t.Helper()
	var st Stats
	eachStored(t, f, func(l *lease) {
		st.Leases++
		st.LeasesHeld += int(l.holds())
	}, func(q *queue) {
		st.Queues++
		for _, j := range q.jobs {
			switch j.status {
			case JobPending:
				st.Jobs.Pending++
			case JobClaimedStatus:
				st.Jobs.Claimed++
			case JobCompleted:
				st.Jobs.Completed++
			case JobFailed:
				st.Jobs.Failed++
			}
			st.Jobs.Total++
		}
	})
	return st
}

// scanStats counts f's live records at now as a snapshot's summary does.
func scanStats(t *testing.T, f *FSM, now int64) Stats {
	t.Helper()
	var st Stats
	eachStored(t, f, func(l *lease) { st.countLease(l, now) }, func(q *queue) { st.countQueue(f.st, q, now) })
	return st
}

// TestRecordCachesStayWithinTheirLimit: what the caches keep between
// batches is bounded by bytes, however large the records grow while
// cached (a result stored on a lease read before).
func TestRecordCachesStayWithinTheirLimit(t *testing.T) {
	h := newHarness(t)
	const limit = 1 << 20
	h.f.st.leases.limit = limit
	result := []byte(`"` + strings.Repeat("r", 30_000) + `"`)
	cached := func() (n int64) {
		for _, m := range []map[secret.Hash]*lease{h.f.st.leases.cache, h.f.st.leases.old} {
			for _, l := range m {
				n += weighLease(l)
			}
		}
		return n
	}
	for i := range 500 {
		k := secret.OwnerTokenHash(fmt.Sprint("key-", i))
		h.lease(&LeaseAcquire{Now: h.now, Lease: k, Owner: secret.Hash{1}, TTLSeconds: 60})
		if r := h.lease(&LeaseComplete{Now: h.now, Lease: k, Owner: secret.Hash{1}, Result: result}); r.Outcome != LeaseCompleted {
			t.Fatalf("complete %d: %v", i, r.Outcome)
		}
		if n := cached(); n > limit+2*weighLease(&lease{result: result}) {
			t.Fatalf("after %d completed leases the cache keeps %d bytes, limit %d", i+1, n, limit)
		}
	}
}
