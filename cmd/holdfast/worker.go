package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/holdfast/holdfast/internal/client"
)

// Types of the answers the example worker reads.
type (
	queueCreated struct {
		QueueID     string `json:"queue_id"`
		WriteToken  string `json:"write_token"`
		WorkerToken string `json:"worker_token"`
		ReadToken   string `json:"read_token"`
	}
	jobJSON struct {
		JobID    string          `json:"job_id"`
		JobKey   string          `json:"job_key"`
		Payload  json.RawMessage `json:"payload"`
		Status   string          `json:"status"`
		Attempts int             `json:"attempts"`
		Receipt  string          `json:"receipt"`
	}
	jobAnswer struct {
		Job *jobJSON `json:"job"`
	}
	queueCounts struct {
		Counts map[string]int `json:"counts"`
	}
)

// examplePayload is the sample job. Its url and command are there to show
// that the worker treats a payload as data: it never follows or runs them.
const examplePayload = `{"report_id":42,"url":"http://203.0.113.7/never-fetched","command":"echo never-run"}`

func exampleWorker(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("holdfast example-worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := addConnFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	c, err := o.client()
	if err != nil {
		fmt.Fprintf(stderr, "example-worker: %v\n", err)
		return 2
	}
	defer c.CloseIdle()
	ctx := context.Background()
	if err := runExample(ctx, c, stdout); err != nil {
		fmt.Fprintf(stderr, "example-worker: %v\n", err)
		return 1
	}
	return 0
}

// runExample creates a queue, enqueues one sample job, claims it as a
// worker, handles it without executing anything, acknowledges it and reads
// the completion back.
func runExample(ctx context.Context, c *client.Client, out io.Writer) error {
	var q queueCreated
	if err := callJSON(ctx, c, http.MethodPost, "/queue", "", map[string]any{}, &q); err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	fmt.Fprintf(out, "created queue %s (its three tokens stay in this process)\n", q.QueueID)

	var enq jobAnswer
	body := map[string]any{"job_key": "example:report-42", "payload": json.RawMessage(examplePayload)}
	if err := callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/jobs", q.WriteToken, body, &enq); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	fmt.Fprintf(out, "enqueued job %s with key %s\n", enq.Job.JobID, enq.Job.JobKey)

	job, err := claimOne(ctx, c, q)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "claimed job %s (attempt %d)\n", job.JobID, job.Attempts)
	fmt.Fprintf(out, "handled job %s: %s\n", job.JobID, describePayload(job.Payload))

	if err := callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/jobs/"+job.JobID+"/ack", q.WorkerToken, map[string]string{"receipt": job.Receipt}, nil); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	fmt.Fprintf(out, "acknowledged job %s\n", job.JobID)

	var read jobAnswer
	if err := callJSON(ctx, c, http.MethodGet, "/queue/"+q.QueueID+"/jobs/"+job.JobID, q.ReadToken, nil, &read); err != nil {
		return fmt.Errorf("read job: %w", err)
	}
	var counts queueCounts
	if err := callJSON(ctx, c, http.MethodGet, "/queue/"+q.QueueID, q.ReadToken, nil, &counts); err != nil {
		return fmt.Errorf("read queue: %w", err)
	}
	if read.Job == nil || read.Job.Status != "completed" {
		return fmt.Errorf("job %s is not completed after ack: %+v", job.JobID, read.Job)
	}
	fmt.Fprintf(out, "job %s is %s; queue counts: completed=%d total=%d\n", job.JobID, read.Job.Status, counts.Counts["completed"], counts.Counts["total"])
	return nil
}

// claimOne polls for a job with a delay while the queue is empty, a bounded
// number of times.
func claimOne(ctx context.Context, c *client.Client, q queueCreated) (*jobJSON, error) {
	for attempt := 0; attempt < 10; attempt++ {
		var ans jobAnswer
		if err := callJSON(ctx, c, http.MethodPost, "/queue/"+q.QueueID+"/claim", q.WorkerToken, map[string]int{"visibility_timeout": 60}, &ans); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		if ans.Job != nil {
			return ans.Job, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("claim: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
	return nil, errors.New("claim: no job became available")
}

// describePayload is the example's "work": it looks at the payload as data
// and summarises it. It never executes a field or follows a URL.
func describePayload(p json.RawMessage) string {
	var fields map[string]json.RawMessage
	sum := sha256.Sum256(p)
	if json.Unmarshal(p, &fields) != nil {
		return fmt.Sprintf("non-object payload of %d bytes, sha256 %s", len(p), hex.EncodeToString(sum[:8]))
	}
	return fmt.Sprintf("object with %d fields, %d bytes, sha256 %s (no field executed, no URL followed)", len(fields), len(p), hex.EncodeToString(sum[:8]))
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
