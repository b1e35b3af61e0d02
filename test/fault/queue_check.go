//go:build unix

package fault

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"
)

// Queue operation names (the f of the history).
const (
	fEnqueue     = "enqueue"
	fClaim       = "claim"
	fAck         = "ack"
	fJobRelease  = "release-job"
	fJobRenew    = "renew-job"
	fRead        = "read"
	fFinalRead   = "final-read"
	fFinalCounts = "final-counts"
)

// QueueInput is what a queue operation asked for.
type QueueInput struct {
	Queue string `json:"queue,omitempty"`
	Key   string `json:"job_key,omitempty"`
	JobID string `json:"job_id,omitempty"`
	// Receipt is a short id of the claim's receipt.
	Receipt string `json:"receipt,omitempty"`
	// Vis is the requested visibility timeout in seconds.
	Vis int64 `json:"vis_s,omitempty"`
	// Late marks an ack/release/renew a worker sends on purpose after its
	// claim's window has passed.
	Late bool `json:"late,omitempty"`
	// Wait is a claim's wait_seconds (a long poll).
	Wait int64 `json:"wait_s,omitempty"`
	// RequestID is a short id of a claim's request_id; Repeat marks a
	// claim sent again with it after an unknown outcome.
	RequestID string `json:"request_id,omitempty"`
	Repeat    bool   `json:"repeat,omitempty"`
}

// QueueOutput is what the service answered.
type QueueOutput struct {
	JobID      string  `json:"job_id,omitempty"`
	Key        string  `json:"job_key,omitempty"`
	Status     string  `json:"status,omitempty"`
	Attempts   int     `json:"attempts,omitempty"`
	Receipt    string  `json:"receipt,omitempty"`
	ClaimExpTs int64   `json:"claim_exp_ts,omitempty"`
	Dedup      bool    `json:"dedup,omitempty"`
	Empty      bool    `json:"empty,omitempty"`
	NotFound   bool    `json:"not_found,omitempty"`
	Reason     string  `json:"reason,omitempty"`
	Counts     *Counts `json:"counts,omitempty"`
}

// QueueReport is what the queue checker found.
type QueueReport struct {
	// Enqueued is the number of distinct keys whose enqueue was acknowledged.
	Enqueued int
	// LostJobs counts acknowledged enqueues whose job is not readable at the
	// end; LostAcks counts acknowledged acks whose job is not completed.
	LostJobs, LostAcks int
	// Unexpected counts jobs nobody enqueued, jobs completed without any ack,
	// failed jobs below the attempt limit and queue totals outside what was
	// enqueued.
	Unexpected int
	// JobIDMismatch counts keys seen with more than one job id.
	JobIDMismatch int
	// AttemptsExceeded counts claims or reads with more attempts than the
	// limit; AttemptOrder counts claims whose attempt number did not grow in
	// real-time order.
	AttemptsExceeded, AttemptOrder int

	// Deliveries is the number of acknowledged claims that returned a job;
	// Duplicates those beyond a job's first. RepeatedAnswers are claims
	// sent again with their request id that answered the claim an earlier
	// one made (same job, attempt and receipt): one claim, not two.
	Deliveries, Duplicates, RepeatedAnswers int
	// RedeliveredAfterRelease and RedeliveredAfterExpiry are legal
	// redeliveries; DoubleClaims are claims granted while the previous claim
	// was certainly still valid, and StaleReceiptAccepted are acks, releases
	// or renewals that succeeded with a receipt after a later claim of the
	// job was acknowledged. Both are two valid claims at once and must be 0.
	RedeliveredAfterRelease, RedeliveredAfterExpiry int
	DoubleClaims, StaleReceiptAccepted              int
	// AckedRedelivered counts claims of a job invoked after an ack of it was
	// acknowledged.
	AckedRedelivered int
	// StaleReads counts reads that missed an acknowledged write: a job not
	// found after its enqueue, not completed after its ack, or with fewer
	// attempts than an acknowledged claim.
	StaleReads int
	// Final counts the final status of every acknowledged job.
	Final map[string]int

	Examples []string
}

// Lost sums lost jobs and lost acks.
func (r *QueueReport) Lost() int { return r.LostJobs + r.LostAcks }

// Violations sums every check that must be 0.
func (r *QueueReport) Violations() int {
	return r.Lost() + r.Unexpected + r.JobIDMismatch + r.AttemptsExceeded + r.AttemptOrder +
		r.DoubleClaims + r.StaleReceiptAccepted + r.AckedRedelivered + r.StaleReads
}

func (r *QueueReport) example(count int, format string, args ...any) {
	if count <= 3 {
		r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
	}
}

type claimRec struct {
	op  Op
	out QueueOutput
	vis int64
}

// CheckQueue checks a queue history. maxAttempts is the replicated attempt
// limit; tol the timing slack for claim windows.
func CheckQueue(ops []Op, maxAttempts int, tol time.Duration) *QueueReport {
	rep := &QueueReport{Final: map[string]int{}}
	t := int64(tol)
	invokedKeys := map[string]bool{}
	okKeys := map[string]bool{}
	idsOfKey := map[string]map[string]bool{}
	keyOfID := map[string]string{}
	see := func(key, id string) {
		if key == "" || id == "" {
			return
		}
		if idsOfKey[key] == nil {
			idsOfKey[key] = map[string]bool{}
		}
		idsOfKey[key][id] = true
		keyOfID[id] = key
	}
	claims := map[string][]claimRec{}     // job id -> claims
	receiptOps := map[string][]Op{}       // receipt -> ack/release/renew ops
	receiptClaim := map[string]claimRec{} // receipt -> its claim
	acksOK := map[string][]Op{}           // job id -> acknowledged acks
	ackAttempted := map[string]bool{}     // job id -> an ack that may have happened
	enqOK := map[string]Op{}              // job id -> first acknowledged enqueue
	var reads []Op
	queueOfID := map[string]string{}
	totals := map[string]int{} // queue -> final total
	keysOfQueue := map[string]map[string]bool{}
	okKeysOfQueue := map[string]map[string]bool{}

	for _, o := range ops {
		in, _ := o.Input.(QueueInput)
		out, hasOut := o.Output.(QueueOutput)
		switch o.F {
		case fEnqueue:
			invokedKeys[in.Key] = true
			if keysOfQueue[in.Queue] == nil {
				keysOfQueue[in.Queue], okKeysOfQueue[in.Queue] = map[string]bool{}, map[string]bool{}
			}
			keysOfQueue[in.Queue][in.Key] = true
			if o.Type == OK && hasOut {
				okKeys[in.Key] = true
				okKeysOfQueue[in.Queue][in.Key] = true
				see(in.Key, out.JobID)
				queueOfID[out.JobID] = in.Queue
				if _, ok := enqOK[out.JobID]; !ok {
					enqOK[out.JobID] = o
				}
			}
		case fClaim:
			if o.Type == OK && hasOut && !out.Empty {
				c := claimRec{op: o, out: out, vis: in.Vis}
				if in.Repeat {
					// The claim may have been made by the earlier send, before
					// this call: only the answer's expiry bounds its window.
					c.vis = 0
				}
				if slices.ContainsFunc(claims[out.JobID], func(p claimRec) bool {
					return p.out.Receipt == out.Receipt && p.out.Attempts == out.Attempts
				}) {
					rep.RepeatedAnswers++
					continue
				}
				claims[out.JobID] = append(claims[out.JobID], c)
				receiptClaim[out.Receipt] = c
				see(out.Key, out.JobID)
			}
		case fAck, fJobRelease, fJobRenew:
			receiptOps[in.Receipt] = append(receiptOps[in.Receipt], o)
			if o.F == fAck {
				if o.Type == OK || o.Type == Info {
					ackAttempted[in.JobID] = true
				}
				if o.Type == OK {
					acksOK[in.JobID] = append(acksOK[in.JobID], o)
				}
			}
		case fRead, fFinalRead:
			if o.Type == OK && hasOut {
				reads = append(reads, o)
				see(out.Key, out.JobID)
			}
		case fFinalCounts:
			if o.Type == OK && hasOut && out.Counts != nil {
				totals[in.Queue] = out.Counts.Total
			}
		}
	}
	rep.Enqueued = len(okKeys)

	keys := slices.Sorted(maps.Keys(idsOfKey))
	for _, k := range keys {
		if len(idsOfKey[k]) > 1 {
			rep.JobIDMismatch++
			rep.example(rep.JobIDMismatch, "job key %s has job ids %v", k, idsOfKey[k])
		}
		if !invokedKeys[k] {
			rep.Unexpected++
			rep.example(rep.Unexpected, "job key %s was never enqueued", k)
		}
	}

	jobIDs := slices.Sorted(maps.Keys(claims))
	for _, id := range jobIDs {
		cs := claims[id]
		rep.Deliveries += len(cs)
		rep.Duplicates += len(cs) - 1
		for _, c := range cs {
			if c.out.Attempts > maxAttempts || c.out.Attempts < 1 {
				rep.AttemptsExceeded++
				rep.example(rep.AttemptsExceeded, "claim of %s (#%d) reports %d attempts (limit %d)", id, c.op.index, c.out.Attempts, maxAttempts)
			}
			for _, a := range acksOK[id] {
				if c.op.Call > a.Ret {
					rep.AckedRedelivered++
					rep.example(rep.AckedRedelivered, "job %s was delivered again (#%d) after its ack was acknowledged (#%d)", id, c.op.index, a.index)
					break
				}
			}
		}
		// Real-time order of claims implies growing attempts.
		for _, a := range cs {
			for _, b := range cs {
				if a.op.Ret < b.op.Call && a.out.Attempts >= b.out.Attempts {
					rep.AttemptOrder++
					rep.example(rep.AttemptOrder, "claims of %s: #%d (attempt %d) before #%d (attempt %d)", id, a.op.index, a.out.Attempts, b.op.index, b.out.Attempts)
				}
			}
		}
		sorted := append([]claimRec(nil), cs...)
		sort.Slice(sorted, func(i, j int) bool {
			if sorted[i].out.Attempts != sorted[j].out.Attempts {
				return sorted[i].out.Attempts < sorted[j].out.Attempts
			}
			return sorted[i].op.Ret < sorted[j].op.Ret
		})
		for i := 1; i < len(sorted); i++ {
			prev, next := sorted[i-1], sorted[i]
			released := false
			validLo := satAdd(prev.op.Call, prev.vis*int64(time.Second))
			if ts := prev.out.ClaimExpTs * int64(time.Second); ts > validLo {
				validLo = ts
			}
			for _, o := range receiptOps[prev.out.Receipt] {
				in := o.Input.(QueueInput)
				if o.F == fJobRelease && (o.Type == OK || o.Type == Info) && o.Call < next.op.Ret {
					released = true
				}
				if o.F == fJobRenew && o.Type == OK && o.Ret < next.op.Call {
					out, _ := o.Output.(QueueOutput)
					v := satAdd(o.Call, in.Vis*int64(time.Second))
					if ts := out.ClaimExpTs * int64(time.Second); ts > v {
						v = ts
					}
					validLo = max(validLo, v)
				}
			}
			switch {
			case released:
				rep.RedeliveredAfterRelease++
			case next.op.Ret < validLo-t:
				rep.DoubleClaims++
				rep.example(rep.DoubleClaims, "job %s claimed again (#%d, attempt %d, at %s) while claim #%d (attempt %d) was valid until at least %s",
					id, next.op.index, next.out.Attempts, fmtNs(next.op.Ret), prev.op.index, prev.out.Attempts, fmtNs(validLo))
			default:
				rep.RedeliveredAfterExpiry++
			}
		}
	}

	// A receipt is dead once a later claim of its job was acknowledged.
	receipts := slices.Sorted(maps.Keys(receiptOps))
	for _, r := range receipts {
		c, ok := receiptClaim[r]
		if !ok {
			continue
		}
		for _, o := range receiptOps[r] {
			if o.Type != OK {
				continue
			}
			for _, later := range claims[c.out.JobID] {
				// A request id sent again after its claim ended makes a new
				// claim with the same receipt: that receipt is the later
				// claim's too.
				if later.out.Attempts > c.out.Attempts && later.op.Ret < o.Call && later.out.Receipt != r {
					rep.StaleReceiptAccepted++
					rep.example(rep.StaleReceiptAccepted, "%s of job %s with the receipt of claim #%d (attempt %d) succeeded (#%d) after claim #%d (attempt %d) was acknowledged",
						o.F, c.out.JobID, c.op.index, c.out.Attempts, o.index, later.op.index, later.out.Attempts)
					break
				}
			}
		}
	}

	// Reads see every acknowledged write that completed before they began.
	finals := map[string]QueueOutput{}
	for _, rd := range reads {
		in := rd.Input.(QueueInput)
		out := rd.Output.(QueueOutput)
		if rd.F == fFinalRead {
			finals[in.JobID] = out
		}
		what := ""
		if e, ok := enqOK[in.JobID]; ok && e.Ret < rd.Call && out.NotFound {
			what = "not found after its enqueue was acknowledged"
		}
		for _, a := range acksOK[in.JobID] {
			if what == "" && a.Ret < rd.Call && !out.NotFound && out.Status != "completed" {
				what = fmt.Sprintf("%s after its ack (#%d) was acknowledged", out.Status, a.index)
			}
		}
		for _, c := range claims[in.JobID] {
			if what == "" && c.op.Ret < rd.Call && !out.NotFound && out.Attempts < c.out.Attempts {
				what = fmt.Sprintf("at %d attempts after claim #%d (attempt %d) was acknowledged", out.Attempts, c.op.index, c.out.Attempts)
			}
		}
		if what != "" {
			rep.StaleReads++
			rep.example(rep.StaleReads, "%s of job %s via %s (#%d): %s", rd.F, in.JobID, rd.Node, rd.index, what)
		}
	}

	// Every acknowledged job ends completed, failed at the limit, or readable.
	ids := slices.Sorted(maps.Keys(enqOK))
	for _, id := range ids {
		out, ok := finals[id]
		switch {
		case !ok || out.NotFound:
			rep.LostJobs++
			rep.Final["missing"]++
			rep.example(rep.LostJobs, "job %s (key %s, enqueue #%d) is not readable at the end", id, keyOfID[id], enqOK[id].index)
			continue
		}
		rep.Final[out.Status]++
		if out.Attempts > maxAttempts {
			rep.AttemptsExceeded++
			rep.example(rep.AttemptsExceeded, "job %s ends with %d attempts (limit %d)", id, out.Attempts, maxAttempts)
		}
		if len(acksOK[id]) > 0 && out.Status != "completed" {
			rep.LostAcks++
			rep.example(rep.LostAcks, "job %s was acked (#%d) but ends %s", id, acksOK[id][0].index, out.Status)
		}
		if out.Status == "completed" && !ackAttempted[id] {
			rep.Unexpected++
			rep.example(rep.Unexpected, "job %s ends completed though no ack of it may have happened", id)
		}
		if out.Status == "failed" && out.Attempts != maxAttempts {
			rep.Unexpected++
			rep.example(rep.Unexpected, "job %s ends failed after %d attempts (limit %d)", id, out.Attempts, maxAttempts)
		}
	}
	// Queue totals lie between the acknowledged and the attempted keys.
	qs := slices.Sorted(maps.Keys(totals))
	for _, q := range qs {
		total := totals[q]
		switch {
		case total > len(keysOfQueue[q]):
			rep.Unexpected++
			rep.example(rep.Unexpected, "queue %s holds %d jobs, only %d keys were ever enqueued", q, total, len(keysOfQueue[q]))
		case total < len(okKeysOfQueue[q]) && rep.LostJobs == 0:
			// Reads found every job, yet the counts miss some.
			rep.LostJobs += len(okKeysOfQueue[q]) - total
			rep.example(rep.LostJobs, "queue %s holds %d jobs, %d enqueues were acknowledged", q, total, len(okKeysOfQueue[q]))
		}
	}
	return rep
}
