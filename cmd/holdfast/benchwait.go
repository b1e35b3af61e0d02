package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/holdfast/holdfast/internal/client"
)

// Workloads of waiting requests.

// hotKey is the hot-key workload: every client acquires one shared key with
// a blocking acquire and releases it at once, so each cycle is one
// hand-over from one client to the longest waiter.
type hotKey struct{ ns, key string }

func newHotKey(cl *client.Client) (*hotKey, error) {
	var ans struct {
		Namespace string `json:"namespace"`
	}
	if err := callJSON(context.Background(), cl, http.MethodPost, "/lease/namespace", "", map[string]any{}, &ans); err != nil {
		return nil, fmt.Errorf("hot-key: create a namespace: %w", err)
	}
	return &hotKey{ns: ans.Namespace, key: fmt.Sprintf("hot:%d", time.Now().UnixNano())}, nil
}

func (h *hotKey) cycle(ctx context.Context, c *client.Client, _ *benchWorker) error {
	const wait = 60 * time.Second
	var held struct {
		OwnerToken string `json:"owner_token"`
	}
	if err := callJSONWait(ctx, c, wait, http.MethodPost, "/lease", "", map[string]any{
		"namespace": h.ns, "key": h.key, "ttl_seconds": 30, "wait_seconds": int(wait / time.Second),
	}, &held); err != nil {
		return err
	}
	return callJSON(ctx, c, http.MethodPost, "/lease/release", "", map[string]any{"namespace": h.ns, "key": h.key, "owner_token": held.OwnerToken}, nil)
}

// claimWake is the claim-wake workload: the client's own queue, a claim
// waiting on it, then an enqueue; the sample is the time from the
// enqueue's answer to the waiting claim's (0 when the claim's came first).
func claimWake(ctx context.Context, c *client.Client, w *benchWorker) error {
	q, err := w.nextJob(ctx, c)
	if err != nil {
		return err
	}
	type claimed struct {
		ans jobAnswer
		at  time.Time
		err error
	}
	got := make(chan claimed, 1)
	go func() {
		var a claimed
		a.err = callJSONWait(ctx, c, 20*time.Second, http.MethodPost, "/queue/"+q.QueueID+"/claim", q.WorkerToken,
			map[string]int{"visibility_timeout": 60, "wait_seconds": 20}, &a.ans)
		a.at = time.Now()
		got <- a
	}()
	time.Sleep(20 * time.Millisecond) // let the claim reach the leader and wait there
	err = callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/jobs", q.WriteToken,
		map[string]any{"job_key": fmt.Sprintf("job-%d", w.n), "payload": map[string]int{"n": w.n}}, nil)
	enqueued := time.Now()
	a := <-got
	switch {
	case err != nil:
		return err
	case a.err != nil:
		return a.err
	case a.ans.Job == nil:
		return errors.New("the waiting claim got no job")
	}
	w.sample = max(a.at.Sub(enqueued), 0)
	return callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/jobs/"+a.ans.Job.JobID+"/ack", q.WorkerToken, map[string]string{"receipt": a.ans.Job.Receipt}, nil)
}
