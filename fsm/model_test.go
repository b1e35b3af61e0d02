package fsm

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/holdfast/holdfast/internal/secret"
)

// gen produces random commands over small pools of keys, owners, queues,
// jobs and receipts, so that commands collide often, with time moving
// forward by random steps and sometimes backwards (a lagging leader).
type gen struct {
	r      *rand.Rand
	now    int64
	claims []claimRef // claims seen in results, so acks can hit real receipts
}

type claimRef struct {
	queue   secret.ID
	token   secret.Hash
	job     secret.ID
	receipt secret.Hash
}

// observe remembers successful claims from a replica's results.
func (g *gen) observe(c Command, res interface{}) {
	cl, ok := c.(*JobClaim)
	r, ok2 := res.(*QueueResult)
	if ok && ok2 && r.Outcome == JobClaimed {
		g.claims = append(g.claims, claimRef{cl.Queue, cl.Token, r.Job.ID, cl.Receipt})
		if len(g.claims) > 8 {
			g.claims = g.claims[1:]
		}
	}
}

func (g *gen) pick(n int) int { return g.r.IntN(n) }

func (g *gen) hash(kind string, n int) secret.Hash {
	return secret.OwnerTokenHash(fmt.Sprintf("%s-%d", kind, g.pick(n)))
}

func (g *gen) id(kind string, n int) (id secret.ID) {
	copy(id[:], fmt.Sprintf("%s-%d", kind, g.pick(n)))
	return id
}

func (g *gen) next() Command {
	switch g.pick(10) {
	case 0:
		g.now += int64(g.r.IntN(120_000))
	case 1:
		g.now += int64(g.r.IntN(3_600_000))
	case 2:
		g.now -= int64(g.r.IntN(5_000))
	case 3:
		if g.pick(20) == 0 {
			g.now += 86_400_000
		}
	}
	now := g.now
	ttl := []int64{1, 5, 60, 600, 86400, 0}[g.pick(6)]
	vis := []int64{1, 30, 60, 900, 901}[g.pick(5)]
	lease := g.hash("lease", 4)
	owner := g.hash("owner", 5)
	q := g.id("q", 3)
	tok := g.hash("tok", 4)
	job := g.id("job", 8)
	rcpt := g.hash("rcpt", 10)
	if len(g.claims) > 0 && g.pick(3) > 0 {
		c := g.claims[g.pick(len(g.claims))]
		q, tok, job, rcpt = c.queue, c.token, c.job, c.receipt
	}
	switch g.pick(15) {
	case 0, 1:
		return &LeaseAcquire{Now: now, Lease: lease, Fingerprint: g.hash("fp", 2), Owner: owner, TTLSeconds: ttl}
	case 2:
		return &LeaseRenew{Now: now, Lease: lease, Owner: owner, TTLSeconds: ttl}
	case 3:
		return &LeaseRelease{Now: now, Lease: lease, Owner: owner}
	case 4:
		return &LeaseComplete{Now: now, Lease: lease, Owner: owner, Result: []byte(fmt.Sprintf(`{"n":%d}`, g.pick(3)))}
	case 5:
		return &QueueCreate{Now: now, Queue: q, WriteToken: g.hash("tok", 4), WorkerToken: g.hash("tok", 4), ReadToken: g.hash("tok", 4), Client: g.hash("client", 2)}
	case 6, 7:
		return &JobEnqueue{Now: now, Queue: q, Token: tok, Job: job, Key: fmt.Sprintf("k%d", g.pick(6)), Payload: []byte(fmt.Sprintf("%d", g.pick(2)))}
	case 8, 9:
		return &JobClaim{Now: now, Queue: q, Token: tok, Receipt: rcpt, VisibilitySeconds: vis, ByRequest: g.pick(2) == 0}
	case 10:
		return &JobAck{Now: now, Queue: q, Token: tok, Job: job, Receipt: rcpt}
	case 11:
		return &JobRelease{Now: now, Queue: q, Token: tok, Job: job, Receipt: rcpt, DelaySeconds: []int64{0, 0, 30, 900, 901, -1}[g.pick(6)]}
	case 12:
		return &JobRenew{Now: now, Queue: q, Token: tok, Job: job, Receipt: rcpt, VisibilitySeconds: vis}
	case 13:
		return &JobRetry{Now: now, Queue: q, Token: tok, Job: job}
	}
	switch g.pick(18) {
	case 16:
		return &FenceFloor{Now: now, Floor: uint64(g.pick(40))}
	case 17:
		return &SetLevel{Now: now, Level: uint32(g.pick(3))}
	case 0:
		n := fmt.Sprint(g.pick(3))
		return &SetNode{Now: now, Node: NodeInfo{ID: "node" + n, HTTPAddr: "127.0.0.1:70" + n, RaftAddr: fmt.Sprintf("127.0.0.%d:71", g.pick(2))}}
	case 1:
		return &RemoveNode{Now: now, ID: fmt.Sprint("node", g.pick(3))}
	case 2, 3:
		s := DefaultSettings()
		s.QueueMaxJobs = int64(1 + g.pick(6))
		s.VisibilityMinSeconds = 1
		s.QueuesPerClient = int64(1 + g.pick(3))
		s.LeaseLifecycleSeconds = int64(600 + g.pick(86400))
		s.MaxLeases = int64(1 + g.pick(8))
		s.MaxQueues = int64(1 + g.pick(4))
		p := PatchOf(s)
		// Name a random subset of the settings.
		for i, f := range p.slots() {
			if g.pick(2) == 0 && i%3 != 0 {
				*f = nil
			}
		}
		return &SetSettings{Now: now, Patch: p}
	}
	return &Sweep{Now: now, Limit: int64(1 + g.pick(4))}
}

func logOf(i int, c Command) *raft.Log {
	return &raft.Log{Index: uint64(i + 1), Term: 1, Type: raft.LogCommand, Data: Encode(c)}
}

// TestModelReplicasAgree applies long random command sequences to
// replicas that take different paths — one entry at a time, in random
// batches, and through a snapshot and restore midway — and demands equal
// results at every step and equal state hashes.
func TestModelReplicasAgree(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if extra := os.Getenv("HOLDFAST_MODEL_SEEDS"); extra != "" {
		n, _ := strconv.Atoi(extra)
		for i := 0; i < n; i++ {
			seeds = append(seeds, uint64(100+i))
		}
	}
	steps := 4000
	if testing.Short() {
		seeds, steps = seeds[:2], 1000
	}
	var (
		mu  sync.Mutex
		all []interface{}
	)
	defer func() {
		if !t.Failed() {
			requireCoverage(t, all)
		}
	}()
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			g := &gen{r: rand.New(rand.NewPCG(seed, seed*7919)), now: t0}
			a, b, c := New(), New(), New()
			cmds := make([]Command, steps)
			resA := make([]interface{}, steps)
			for i := range cmds {
				cmds[i] = g.next()
				resA[i] = a.Apply(logOf(i, cmds[i]))
				g.observe(cmds[i], resA[i])
				if i%500 == 0 {
					// Capturing a snapshot of a mid-run replica must not
					// change what it does next.
					_ = a.SnapshotBytes()
				}
			}
			// b keeps almost nothing in its caches, so it reads its
			// records back from its store, through key filters built
			// beside its applies from time to time and after its restore:
			// no result may differ.
			var builds sync.WaitGroup
			defer builds.Wait()
			tinyCaches(b)
			for i, cmd := range cmds {
				if i == steps/2 {
					builds.Wait()
					b = snapshotRestore(t, b)
					tinyCaches(b)
				}
				if i%200 == 0 || i == steps/2+1 {
					builds.Add(1)
					go func(f *FSM) {
						defer builds.Done()
						if f.KeyFilterWanted() {
							if err := f.BuildKeyFilter(nil); err != nil {
								t.Error(err)
							}
						}
					}(b)
				}
				got := b.Apply(logOf(i, cmd))
				if !reflect.DeepEqual(got, resA[i]) {
					t.Fatalf("step %d %T: replica results differ:\n a %+v\n b %+v", i, cmd, resA[i], got)
				}
			}
			for i := 0; i < len(cmds); {
				n := min(1+g.pick(64), len(cmds)-i)
				logs := make([]*raft.Log, n)
				for k := range logs {
					logs[k] = logOf(i+k, cmds[i+k])
				}
				out := c.ApplyBatch(logs)
				for k := range out {
					if !reflect.DeepEqual(out[k], resA[i+k]) {
						t.Fatalf("step %d: batched result differs", i+k)
					}
				}
				i += n
			}
			// Replica r stops halfway and is opened again on its store, as a
			// restarted node is; the log is replayed from a quarter of the way,
			// as from an older snapshot: entries the store holds yield nothing
			// and change nothing, the rest give a's results.
			r := New()
			for i := range steps / 2 {
				r.Apply(logOf(i, cmds[i]))
			}
			r, err := Open(r.st.store)
			if err != nil {
				t.Fatal(err)
			}
			for i := steps / 4; i < steps; {
				n := min(1+g.pick(64), steps-i) // batches that straddle the store's index too
				logs := make([]*raft.Log, n)
				for k := range logs {
					logs[k] = logOf(i+k, cmds[i+k])
				}
				for k, got := range r.ApplyBatch(logs) {
					switch j := i + k; {
					case j < steps/2 && got != nil:
						t.Fatalf("step %d, which the store held, was applied again: %+v", j, got)
					case j >= steps/2 && !reflect.DeepEqual(got, resA[j]):
						t.Fatalf("step %d after the reopen: result differs:\n a %+v\n r %+v", j, resA[j], got)
					}
				}
				i += n
			}
			if r.StateHash() != a.StateHash() {
				t.Fatal("the reopened replica's state differs")
			}
			// Replica d receives the same commands grouped into Batch entries.
			d := New()
			for i := 0; i < len(cmds); {
				n := min(1+g.pick(40), len(cmds)-i)
				enc := make([][]byte, n)
				for k := range enc {
					enc[k] = Encode(cmds[i+k])
				}
				out := d.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: encodeBatch(enc)}).(*BatchResult)
				for k, r := range out.Results {
					if !reflect.DeepEqual(r, resA[i+k]) {
						t.Fatalf("step %d: result inside a batch differs", i+k)
					}
				}
				i += n
			}
			// Replica e builds results only for the entries of term 2 and
			// later, as a node proposing in term 2 does: the others apply
			// alike and answer nil, in Batch entries too.
			e := New()
			e.ResultsFrom(2)
			for i := 0; i < len(cmds); {
				n := min(1+g.pick(40), len(cmds)-i)
				term := uint64(1 + g.pick(3))
				enc := make([][]byte, n)
				for k := range enc {
					enc[k] = Encode(cmds[i+k])
				}
				out := e.Apply(&raft.Log{Index: uint64(i + 1), Term: term, Type: raft.LogCommand, Data: encodeBatch(enc)})
				if term < 2 && out != nil {
					t.Fatalf("step %d: a result built for an entry of term %d", i, term)
				}
				if term >= 2 {
					for k, r := range out.(*BatchResult).Results {
						if !reflect.DeepEqual(r, resA[i+k]) {
							t.Fatalf("step %d: result of a term-%d entry differs", i+k, term)
						}
					}
				}
				i += n
			}
			// Each replica's gauges, kept as it wrote, are what its store
			// holds: b went through a restore and r through a reopen.
			for name, f := range map[string]*FSM{"a": a, "b": b, "c": c, "d": d, "e": e, "r": r} {
				if got, want := f.Stats(), storedStats(t, f); got != want {
					t.Fatalf("replica %s: gauges %+v, its store holds %+v", name, got, want)
				}
			}
			ha, hb, hc, hd, he := a.StateHash(), b.StateHash(), c.StateHash(), d.StateHash(), e.StateHash()
			if ha != hb || ha != hc || ha != hd || ha != he {
				t.Fatalf("state hashes differ: %s %s %s %s %s", ha, hb, hc, hd, he)
			}
			mu.Lock()
			all = append(all, resA...)
			mu.Unlock()
		})
	}
}

// requireCoverage fails when a random run missed outcomes that matter, so
// the model test cannot silently degrade into exercising nothing.
func requireCoverage(t *testing.T, results []interface{}) {
	t.Helper()
	seen := map[string]bool{}
	for _, r := range results {
		switch r := r.(type) {
		case *LeaseResult:
			seen["lease:"+r.Outcome.String()] = true
		case *QueueResult:
			seen["queue:"+r.Outcome.String()] = true
		case *SweepResult:
			if r.LeasesRemoved+r.QueuesRemoved+r.ClaimsReturned+r.JobsFailed > 0 {
				seen["sweep:work"] = true
			}
		}
	}
	for _, want := range []string{"lease:granted", "lease:held", "lease:completed", "lease:conflict", "lease:renewed",
		"lease:released", "lease:lost", "queue:created", "queue:job_created", "queue:deduplicated",
		"queue:job_key_conflict", "queue:claimed", "queue:acked", "queue:released", "queue:renewed",
		"queue:receipt_rejected", "queue:forbidden", "sweep:work"} {
		if !seen[want] {
			t.Errorf("random run never produced %s", want)
		}
	}
}

func TestCommandEncodingRoundTrip(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(42, 42)), now: t0}
	seen := map[CommandType]bool{}
	for i := 0; i < 2000; i++ {
		c := g.next()
		seen[c.Type()] = true
		b := Encode(c)
		d, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(%T): %v", c, err)
		}
		if !reflect.DeepEqual(normalize(c), normalize(d)) {
			t.Fatalf("round trip changed %T:\n%+v\n%+v", c, c, d)
		}
		// Every strict prefix is rejected, never misread.
		for n := 0; n < len(b); n++ {
			if _, err := Decode(b[:n]); err == nil {
				t.Fatalf("%T: prefix of %d/%d bytes decoded", c, n, len(b))
			}
		}
	}
	if want := int(TypeSetLevel) - 1; len(seen) != want { // all but Batch
		t.Fatalf("generator covered %d command types, want %d", len(seen), want)
	}
	if _, err := Decode([]byte{99, 1}); err == nil || !strings.Contains(err.Error(), "unknown command type") {
		t.Fatalf("unknown type: %v", err)
	}
	if _, err := Decode([]byte{byte(TypeSweep), 9, 0, 0}); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("unknown version: %v", err)
	}
	if _, err := Decode(append(Encode(&Sweep{Now: 1, Limit: 1}), 0)); err == nil {
		t.Fatal("trailing byte accepted")
	}
}

// normalize maps empty byte slices to nil, as decoding does.
func normalize(c Command) Command {
	switch c := c.(type) {
	case *LeaseComplete:
		if len(c.Result) == 0 {
			c.Result = nil
		}
	case *JobEnqueue:
		if len(c.Payload) == 0 {
			c.Payload = nil
		}
	}
	return c
}

func TestBatchRejectsNesting(t *testing.T) {
	inner := encodeBatch([][]byte{Encode(&Sweep{Now: 1, Limit: 1})})
	if _, err := Decode(encodeBatch([][]byte{inner})); err == nil {
		t.Fatal("a nested batch decoded")
	}
	if _, err := Decode(encodeBatch([][]byte{{byte(TypeSweep), 1}})); err == nil {
		t.Fatal("a batch with a truncated command decoded")
	}
	c, err := Decode(encodeBatch([][]byte{Encode(&Sweep{Now: 1, Limit: 1}), Encode(&RemoveNode{Now: 2, ID: "x"})}))
	if err != nil || len(c.(*Batch).Commands) != 2 {
		t.Fatalf("valid batch: %v", err)
	}
}

func TestApplyPanicsOnUndecodableEntry(t *testing.T) {
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), "cannot apply log entry index=7") {
			t.Fatalf("recover() = %v", r)
		}
	}()
	New().Apply(&raft.Log{Index: 7, Type: raft.LogCommand, Data: []byte{1, 1, 2}})
}

func TestApplyBatchSkipsNonCommands(t *testing.T) {
	f := New()
	out := f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogConfiguration, Data: []byte("not ours")},
		logOf(1, &Sweep{Now: t0, Limit: 1}),
	})
	if len(out) != 2 || out[0] != nil {
		t.Fatalf("results %v", out)
	}
	if _, ok := out[1].(*SweepResult); !ok {
		t.Fatalf("result %T", out[1])
	}
}

func TestSnapshotIsDeterministicAndVerified(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(9, 9)), now: t0}
	f := New()
	for i := 0; i < 1500; i++ {
		f.Apply(logOf(i, g.next()))
	}
	b1 := f.SnapshotBytes()
	b2 := f.SnapshotBytes()
	if !bytes.Equal(b1, b2) {
		t.Fatal("two snapshots of one state differ")
	}
	r := snapshotRestore(t, f)
	if !bytes.Equal(r.SnapshotBytes(), b1) {
		t.Fatal("snapshot of a restored state differs")
	}
	// Corruption anywhere is refused and leaves the old state in place.
	before := r.StateHash()
	for _, pos := range []int{0, len(b1) / 2, len(b1) - 1} {
		bad := bytes.Clone(b1)
		bad[pos] ^= 0x40
		if err := r.Restore(&nopCloser{Reader: bytes.NewReader(bad)}); err == nil {
			t.Fatalf("corrupt byte %d accepted", pos)
		}
	}
	if err := r.Restore(&nopCloser{Reader: bytes.NewReader(b1[:10])}); err == nil {
		t.Fatal("truncated snapshot accepted")
	}
	if r.StateHash() != before {
		t.Fatal("a refused restore changed the state")
	}
}

// TestPersistWhileApplying checks that a snapshot persisted concurrently
// with Apply captures exactly the state at Snapshot time (run with -race).
func TestPersistWhileApplying(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(5, 5)), now: t0}
	f := New()
	i := 0
	for ; i < 1000; i++ {
		f.Apply(logOf(i, g.next()))
	}
	want := f.SnapshotBytes()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	sink := &memSink{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := snap.Persist(sink); err != nil {
			t.Errorf("Persist: %v", err)
		}
	}()
	for ; i < 3000; i++ {
		f.Apply(logOf(i, g.next()))
		if i%100 == 0 {
			_ = f.Stats()
		}
	}
	wg.Wait()
	if !sink.closed || !bytes.Equal(sink.Bytes(), want) {
		t.Fatal("persisted snapshot does not match the state at Snapshot time")
	}
}

// tinyCaches makes f keep about a record of each table between batches,
// so that it reads them back from its store.
func tinyCaches(f *FSM) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.leases.limit, f.st.queues.limit, f.st.clients.limit = 2*recordOverhead, 2*recordOverhead, 2*recordOverhead
}
