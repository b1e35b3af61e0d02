//go:build unix

package fault

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/holdfast/holdfast/test/harness"
)

// queueWorkload drives the queue: producers enqueue unique keys (retrying a
// key whose enqueue had an unknown outcome, as a new process), workers claim
// with a short visibility window and ack, release, renew, or stall past the
// window and then use their old receipt, and readers read jobs — recently
// acknowledged ones above all — through every node.
type queueWorkload struct {
	r         *run
	queues    []queueRef
	producers int
	workers   int
	readers   int
	// maxJobs caps what producers enqueue in total.
	maxJobs int

	mu    sync.Mutex
	jobs  []jobRef
	acked []jobRef
}

type queueRef struct {
	id, write, worker, read string
}

type jobRef struct {
	queue int
	id    string
}

func newQueueWorkload(r *run) *queueWorkload {
	return &queueWorkload{r: r, producers: 2, workers: 4, readers: r.sc.Nodes, maxJobs: 4000}
}

func (w *queueWorkload) setup(ctx context.Context) error {
	r := w.r
	for i := 0; i < 2; i++ {
		err := poll(ctx, 30*time.Second, 250*time.Millisecond, func() error {
			node := r.leader()
			if node == nil {
				return fmt.Errorf("no leader")
			}
			a := r.ops.Do(ctx, node.HTTPAddr, http.MethodPost, apiPrefix+"/queue", map[string]any{}, "")
			if a.Status != http.StatusCreated || a.Body.QueueID == "" {
				return fmt.Errorf("create a queue: HTTP %d %.200s %v", a.Status, a.Raw, a.Err)
			}
			w.queues = append(w.queues, queueRef{id: a.Body.QueueID, write: a.Body.WriteToken, worker: a.Body.WorkerToken, read: a.Body.ReadToken})
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *queueWorkload) start(ctx context.Context, wg *sync.WaitGroup) {
	spawn := func(f func(context.Context, int), n int) { spawnWorkers(ctx, wg, n, f) }
	spawn(w.producer, w.producers)
	spawn(w.worker, w.workers)
	spawn(w.reader, w.readers)
}

func (w *queueWorkload) queueOf(key string) int {
	h := fnv.New32a()
	_, _ = io.WriteString(h, key)
	return int(h.Sum32() % uint32(len(w.queues)))
}

// queueCall performs one queue operation and records it; classify maps a
// definite answer to (type, output, understood).
func (w *queueWorkload) queueCall(proc int, node *harness.Node, f, method, path, token string, in QueueInput, body any,
	classify func(Answer) (string, QueueOutput, bool)) (Class, string, QueueOutput, Answer) {
	r := w.r
	p := r.rec.Invoke(proc, node.ID, f, in.Key, in)
	a := r.client.DoWaiting(context.Background(), time.Duration(in.Wait)*time.Second, node.HTTPAddr, method, apiPrefix+path, body, token)
	cls := a.Classify()
	switch cls {
	case NotApplied:
		r.rec.Complete(p, Fail, nil, a.Status, a.ErrText())
		return cls, Fail, QueueOutput{}, a
	case Unknown:
		r.rec.Complete(p, Info, nil, a.Status, a.ErrText())
		return cls, Info, QueueOutput{}, a
	}
	typ, out, ok := classify(a)
	if !ok {
		r.unexpectedAnswer(f, a)
		r.rec.Complete(p, Fail, nil, a.Status, "unexpected answer: "+a.ErrText())
		return cls, Fail, QueueOutput{}, a
	}
	r.rec.Complete(p, typ, out, a.Status, a.ErrText())
	return cls, typ, out, a
}

func jobOutput(j *JobAnswer) QueueOutput {
	return QueueOutput{JobID: j.JobID, Key: j.JobKey, Status: j.Status, Attempts: j.Attempts, ClaimExpTs: j.ClaimExpireTimestamp, Receipt: shortToken(j.Receipt)}
}

func (w *queueWorkload) enqueue(proc int, node *harness.Node, key string) (Class, string) {
	qi := w.queueOf(key)
	q := w.queues[qi]
	in := QueueInput{Queue: shortToken(q.id), Key: key}
	body := map[string]any{"job_key": key, "payload": map[string]any{"key": key}}
	cls, typ, out, _ := w.queueCall(proc, node, fEnqueue, http.MethodPost, "/queue/"+q.id+"/jobs", q.write, in, body, func(a Answer) (string, QueueOutput, bool) {
		if (a.Status == http.StatusCreated || a.Status == http.StatusOK) && a.Body.Job != nil {
			out := jobOutput(a.Body.Job)
			out.Dedup = a.Body.Deduplicated
			return OK, out, true
		}
		return "", QueueOutput{}, false
	})
	if typ == OK {
		w.mu.Lock()
		w.jobs = append(w.jobs, jobRef{queue: qi, id: out.JobID})
		w.mu.Unlock()
	}
	return cls, typ
}

func (w *queueWorkload) producer(ctx context.Context, i int) {
	r := w.r
	rng := r.rng(uint64(2000 + i))
	node := r.targets[i%len(r.targets)]
	proc := r.rec.NewProcess()
	var retry []string
	for n := 0; ctx.Err() == nil; {
		w.mu.Lock()
		full := len(w.jobs) >= w.maxJobs
		w.mu.Unlock()
		if full {
			sleepCtx(ctx, time.Second)
			continue
		}
		var key string
		if len(retry) > 0 {
			key, retry = retry[0], retry[1:]
		} else {
			key = fmt.Sprintf("p%d-%d", i, n)
			n++
		}
		cls, typ := w.enqueue(proc, node, key)
		switch {
		case cls == Unknown:
			// Retired; the new process retries the key (safe: same payload).
			proc = r.rec.NewProcess()
			retry = append(retry, key)
		case typ != OK:
			retry = append(retry, key)
		}
		sleepCtx(ctx, between(rng, 200*time.Millisecond, 500*time.Millisecond))
	}
}

// claimed is a job a worker holds.
type claimed struct {
	queue   int
	job     QueueOutput
	receipt string
}

// claim claims a job of queue qi with the request id rid (a long poll of
// wait seconds); repeat marks the same claim sent again after an unknown
// outcome.
func (w *queueWorkload) claim(proc int, node *harness.Node, qi int, rid string, wait int64, repeat bool) (Class, string, *claimed) {
	q := w.queues[qi]
	in := QueueInput{Queue: shortToken(q.id), Vis: visibility, Wait: wait, RequestID: shortToken(rid), Repeat: repeat}
	body := map[string]any{"visibility_timeout": visibility, "request_id": rid}
	if wait > 0 {
		body["wait_seconds"] = wait
	}
	var receipt string
	cls, typ, out, _ := w.queueCall(proc, node, fClaim, http.MethodPost, "/queue/"+q.id+"/claim", q.worker, in,
		body, func(a Answer) (string, QueueOutput, bool) {
			if a.Status != http.StatusOK {
				return "", QueueOutput{}, false
			}
			if a.Body.Job == nil {
				return OK, QueueOutput{Empty: true}, true
			}
			if a.Body.Job.Receipt == "" || a.Body.Job.Status != "claimed" {
				return "", QueueOutput{}, false
			}
			receipt = a.Body.Job.Receipt
			return OK, jobOutput(a.Body.Job), true
		})
	if typ != OK || out.Empty {
		return cls, typ, nil
	}
	return cls, typ, &claimed{queue: qi, job: out, receipt: receipt}
}

// receiptOp sends ack, release or renew with a claim's receipt.
func (w *queueWorkload) receiptOp(proc int, node *harness.Node, f string, c *claimed, late bool) (Class, string) {
	q := w.queues[c.queue]
	action := map[string]string{fAck: "ack", fJobRelease: "release", fJobRenew: "renew"}[f]
	in := QueueInput{Queue: shortToken(q.id), Key: c.job.Key, JobID: c.job.JobID, Receipt: shortToken(c.receipt), Late: late}
	body := map[string]any{"receipt": c.receipt}
	if f == fJobRenew {
		in.Vis = visibility
		body["visibility_timeout"] = visibility
	}
	cls, typ, _, _ := w.queueCall(proc, node, f, http.MethodPost, "/queue/"+q.id+"/jobs/"+c.job.JobID+"/"+action, q.worker, in, body,
		func(a Answer) (string, QueueOutput, bool) {
			switch {
			case a.Status == http.StatusOK && a.Body.Job != nil:
				return OK, jobOutput(a.Body.Job), true
			case a.Status == http.StatusConflict && a.Body.Reason != "":
				return Fail, QueueOutput{Reason: a.Body.Reason}, true
			}
			return "", QueueOutput{}, false
		})
	if f == fAck && typ == OK {
		w.mu.Lock()
		w.acked = append(w.acked, jobRef{queue: c.queue, id: c.job.JobID})
		if len(w.acked) > 200 {
			w.acked = w.acked[len(w.acked)-100:]
		}
		w.mu.Unlock()
	}
	return cls, typ
}

func (w *queueWorkload) worker(ctx context.Context, i int) {
	r := w.r
	rng := r.rng(uint64(3000 + i))
	node := r.targets[(i+1)%len(r.targets)]
	proc := r.rec.NewProcess()
	retire := func(cls Class) {
		if cls == Unknown {
			proc = r.rec.NewProcess()
		}
	}
	for ctx.Err() == nil {
		// Every claim has a request id of its own and most are long polls;
		// one whose outcome is unknown is sent again with the same request
		// id, which answers the claim it made, if it made one.
		qi, rid := rng.IntN(len(w.queues)), fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
		wait := []int64{0, 1, 2, 2}[rng.IntN(4)]
		cls, typ, c := w.claim(proc, node, qi, rid, wait, false)
		for tries := 0; cls == Unknown && tries < 2 && ctx.Err() == nil; tries++ {
			retire(cls)
			cls, typ, c = w.claim(proc, node, qi, rid, 0, true)
		}
		retire(cls)
		if c == nil {
			switch {
			case typ == OK && wait > 0:
				// The service waited already.
			case typ == OK:
				sleepCtx(ctx, between(rng, 100*time.Millisecond, 250*time.Millisecond))
			default:
				sleepCtx(ctx, between(rng, 100*time.Millisecond, 300*time.Millisecond))
			}
			continue
		}
		switch x := rng.IntN(100); {
		case x < 15:
			sleepCtx(ctx, between(rng, 200*time.Millisecond, 600*time.Millisecond))
			cls, typ := w.receiptOp(proc, node, fJobRenew, c, false)
			retire(cls)
			if typ == OK {
				sleepCtx(ctx, between(rng, 100*time.Millisecond, 400*time.Millisecond))
				cls, _ := w.receiptOp(proc, node, fAck, c, false)
				retire(cls)
			}
		case x < 62:
			sleepCtx(ctx, between(rng, 0, 400*time.Millisecond))
			cls, _ := w.receiptOp(proc, node, fAck, c, false)
			retire(cls)
		case x < 78:
			sleepCtx(ctx, between(rng, 0, 300*time.Millisecond))
			cls, _ := w.receiptOp(proc, node, fJobRelease, c, false)
			retire(cls)
		default:
			// Stall past the window, then use the old receipt: it must be
			// refused (expired, or superseded if the job was claimed again).
			if !sleepCtx(ctx, visibility*time.Second+between(rng, 500*time.Millisecond, 1200*time.Millisecond)) {
				continue
			}
			f := fAck
			if y := rng.IntN(10); y >= 8 {
				f = fJobRenew
			} else if y >= 6 {
				f = fJobRelease
			}
			cls, _ := w.receiptOp(proc, node, f, c, true)
			retire(cls)
		}
	}
}

func (w *queueWorkload) readJob(proc int, node *harness.Node, f string, j jobRef) (Class, string) {
	q := w.queues[j.queue]
	in := QueueInput{Queue: shortToken(q.id), JobID: j.id}
	cls, typ, _, _ := w.queueCall(proc, node, f, http.MethodGet, "/queue/"+q.id+"/jobs/"+j.id, q.read, in, nil,
		func(a Answer) (string, QueueOutput, bool) {
			switch {
			case a.Status == http.StatusOK && a.Body.Job != nil:
				return OK, jobOutput(a.Body.Job), true
			case a.Status == http.StatusNotFound:
				return OK, QueueOutput{JobID: j.id, NotFound: true}, true
			}
			return "", QueueOutput{}, false
		})
	return cls, typ
}

func (w *queueWorkload) reader(ctx context.Context, i int) {
	r := w.r
	rng := r.rng(uint64(4000 + i))
	node := r.targets[i%len(r.targets)]
	proc := r.rec.NewProcess()
	for ctx.Err() == nil {
		j, ok := w.pickRead(rng)
		if !ok {
			sleepCtx(ctx, 200*time.Millisecond)
			continue
		}
		if cls, _ := w.readJob(proc, node, fRead, j); cls == Unknown {
			proc = r.rec.NewProcess()
		}
		sleepCtx(ctx, between(rng, 50*time.Millisecond, 150*time.Millisecond))
	}
}

func (w *queueWorkload) pickRead(rng *rand.Rand) (jobRef, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.acked) > 0 && rng.IntN(10) < 7 {
		recent := w.acked[max(0, len(w.acked)-20):]
		return recent[rng.IntN(len(recent))], true
	}
	if len(w.jobs) == 0 {
		return jobRef{}, false
	}
	return w.jobs[rng.IntN(len(w.jobs))], true
}

// final reads every acknowledged job and each queue's counts through the
// leader, after healing.
func (w *queueWorkload) final(ctx context.Context) error {
	r := w.r
	w.mu.Lock()
	seen := map[string]bool{}
	var jobs []jobRef
	for _, j := range w.jobs {
		if !seen[j.id] {
			seen[j.id] = true
			jobs = append(jobs, j)
		}
	}
	w.mu.Unlock()
	proc := r.rec.NewProcess()
	var node *harness.Node
	for _, j := range jobs {
		err := poll(ctx, 30*time.Second, 200*time.Millisecond, func() error {
			if node == nil {
				if node = r.leader(); node == nil {
					return fmt.Errorf("no leader")
				}
			}
			cls, typ := w.readJob(proc, node, fFinalRead, j)
			if cls == Unknown {
				proc = r.rec.NewProcess()
			}
			if typ != OK {
				node = nil
				return fmt.Errorf("final read of %s: no definite answer", j.id)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	for qi, q := range w.queues {
		err := poll(ctx, 30*time.Second, 200*time.Millisecond, func() error {
			node := r.leader()
			if node == nil {
				return fmt.Errorf("no leader")
			}
			in := QueueInput{Queue: shortToken(q.id)}
			_, typ, _, _ := w.queueCall(proc, node, fFinalCounts, http.MethodGet, "/queue/"+q.id, q.read, in, nil,
				func(a Answer) (string, QueueOutput, bool) {
					if a.Status == http.StatusOK && a.Body.Counts != nil {
						return OK, QueueOutput{Counts: a.Body.Counts}, true
					}
					return "", QueueOutput{}, false
				})
			if typ != OK {
				return fmt.Errorf("final counts of queue %d: no definite answer", qi)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (w *queueWorkload) check(res *Result) {
	r := w.r
	rep := CheckQueue(r.rec.Ops(), r.maxAttempts, Tolerance)
	res.Lost = rep.Lost()
	res.Unexpected = rep.Unexpected + rep.JobIDMismatch + rep.AttemptsExceeded
	res.Fencing = rep.DoubleClaims + rep.StaleReceiptAccepted
	res.Lin = VerdictOK
	if rep.StaleReads+rep.AckedRedelivered+rep.AttemptOrder > 0 {
		res.Lin = VerdictInvalid
	}
	res.Violations += rep.Violations()
	res.Details = append(res.Details,
		fmt.Sprintf("queue: %d keys enqueued; final %v; %d deliveries, %d duplicates (%d after expiry, %d after release), %d claims answered again by request id, double claims %d, stale receipts accepted %d, acked then redelivered %d, attempt order %d, stale reads %d; lost jobs %d, lost acks %d, unexpected %d, job id mismatches %d, attempts over limit %d",
			rep.Enqueued, rep.Final, rep.Deliveries, rep.Duplicates, rep.RedeliveredAfterExpiry, rep.RedeliveredAfterRelease,
			rep.RepeatedAnswers, rep.DoubleClaims, rep.StaleReceiptAccepted, rep.AckedRedelivered, rep.AttemptOrder, rep.StaleReads,
			rep.LostJobs, rep.LostAcks, rep.Unexpected, rep.JobIDMismatch, rep.AttemptsExceeded))
	res.Details = append(res.Details, rep.Examples...)
	if rep.Enqueued == 0 {
		r.problem("the queue workload enqueued nothing")
	}
}
