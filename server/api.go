package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast/holdfast/server/service"
)

// apiBodyLimit bounds API request bodies: room for a 32 KB result or a
// 16 KiB payload written with generous whitespace and escapes.
const apiBodyLimit = 256 << 10

// APIPrefix is the path prefix of the lease and queue API.
const APIPrefix = "/services/v1"

// The REST API is an adapter: each handler decodes its request, calls the
// service and writes the answer.
func (s *Server) routeAPI() {
	g := s.engine.Group(APIPrefix, s.limit(), s.bufferBody(apiBodyLimit))
	lead := s.apiRoute(false)
	read := s.apiRoute(true)
	g.POST("/lease/namespace", s.handle(s.restNamespace))
	for _, r := range s.apiRoutes() {
		g.POST(r.path, lead, s.handle(r.h))
	}
	g.GET("/queue/:queue_id", read, s.handle(s.restReadQueue))
	g.GET("/queue/:queue_id/jobs/:job_id", read, s.handle(s.restReadJob))
}

// apiRouteSpec is a POST route of the API whose operation runs on the
// leader, by its template below APIPrefix: the routes the front also
// serves. waits marks the routes whose requests may wait (wait_seconds).
type apiRouteSpec struct {
	path  string
	h     func(call)
	waits bool
}

func (s *Server) apiRoutes() []apiRouteSpec {
	return []apiRouteSpec{
		{"/lease", s.restAcquire, true},
		{"/lease/acquire", s.restAcquire, true},
		{"/lease/renew", restLeaseOwner(s, s.svc.RenewLease), false},
		{"/lease/release", restLeaseOwner(s, s.svc.ReleaseLease), false},
		{"/lease/complete", restLeaseOwner(s, s.svc.CompleteLease), false},
		{"/lease/checkpoint", restLeaseOwner(s, s.svc.CheckpointLease), false},
		{"/queue", s.restCreateQueue, false},
		{"/queue/:queue_id/jobs", s.restEnqueue, false},
		{"/queue/:queue_id/claim", s.restClaim, true},
		{"/queue/:queue_id/jobs/:job_id/retry", s.restRetry, false},
		{"/queue/:queue_id/jobs/:job_id/:action", s.restJobAction, false},
	}
}

func (s *Server) restNamespace(c call) {
	var in struct{}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	c.Reply(namespaceReply(s.svc.CreateNamespace()))
}

func (s *Server) restAcquire(c call) {
	var in service.AcquireLeaseRequest
	if !bindJSON(c, apiBodyLimit, false, &in) {
		return
	}
	wait, _ := service.WaitSeconds(in.WaitSeconds, service.MaxAcquireWaitSeconds)
	ctx, cancel, ok := s.waitingContext(c, wait)
	if !ok {
		return
	}
	defer cancel()
	c.Reply(leaseReply(s.svc.AcquireLease(ctx, in)))
}

// leaseOwnerOp is the service's renew, release or complete.
type leaseOwnerOp func(context.Context, service.LeaseOwnerRequest) (service.LeaseAnswer, error)

func restLeaseOwner(s *Server, op leaseOwnerOp) func(call) {
	return func(c call) {
		var in service.LeaseOwnerRequest
		if !bindJSON(c, apiBodyLimit, false, &in) {
			return
		}
		ctx, cancel := s.callContext(c)
		defer cancel()
		c.Reply(leaseReply(op(ctx, in)))
	}
}

func (s *Server) restCreateQueue(c call) {
	var in struct{}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	ctx, cancel := s.callContext(c)
	defer cancel()
	c.Reply(queueCreatedReply(s.svc.CreateQueue(ctx, service.CreateQueueRequest{ClientIP: c.ClientIP()})))
}

// bearer extracts the token of an Authorization: Bearer header.
func bearer(c call) (string, bool) {
	h := c.Header("Authorization")
	if h == "" {
		return "", false
	}
	scheme, tok, found := strings.Cut(h, " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return "", true // present but not a bearer token: reported as malformed
	}
	return strings.TrimSpace(tok), true
}

// restQueueAuth validates the path's queue id and the bearer token.
func (s *Server) restQueueAuth(c call) (service.QueueAuth, bool) {
	tok, present := bearer(c)
	a, err := service.ParseQueueAuth(c.Param("queue_id"), tok, present)
	if err != nil {
		c.Reply(errorReply(err))
		return a, false
	}
	return a, true
}

func (s *Server) restEnqueue(c call) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	in := service.EnqueueRequest{Auth: a}
	if !bindJSON(c, apiBodyLimit, false, &in) {
		return
	}
	ctx, cancel := s.callContext(c)
	defer cancel()
	c.Reply(jobAnswerReply(s.svc.Enqueue(ctx, in)))
}

func (s *Server) restClaim(c call) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	in := service.ClaimRequest{Auth: a}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	wait, _ := service.WaitSeconds(in.WaitSeconds, service.MaxClaimWaitSeconds)
	ctx, cancel, ok := s.waitingContext(c, wait)
	if !ok {
		return
	}
	defer cancel()
	c.Reply(jobAnswerReply(s.svc.Claim(ctx, in)))
}

// restJobAction answers ack, release and renew, whose bodies carry the
// claim's receipt.
func (s *Server) restJobAction(c call) {
	switch c.Param("action") {
	case "ack":
		restReceipt(s, c, (*service.Service).AckJob, ackRequest)
	case "release":
		restReceipt(s, c, (*service.Service).ReleaseJob, releaseRequest)
	case "renew":
		restReceipt(s, c, (*service.Service).RenewJob, renewRequest)
	default:
		c.Reply(errReply(http.StatusNotFound, "no such endpoint: the job action must be ack, release, renew or retry", nil))
	}
}

// ackRequest, releaseRequest and renewRequest start the request of a
// receipt operation on a job; its body fills in the rest.
func ackRequest(a service.QueueAuth, job string) *service.AckJobRequest {
	return &service.AckJobRequest{Auth: a, JobID: job}
}

func releaseRequest(a service.QueueAuth, job string) *service.ReleaseJobRequest {
	return &service.ReleaseJobRequest{Auth: a, JobID: job}
}

func renewRequest(a service.QueueAuth, job string) *service.RenewJobRequest {
	return &service.RenewJobRequest{Auth: a, JobID: job}
}

// receiptOp is the service's ack, release or renew.
type receiptOp[R any] func(*service.Service, context.Context, R) (service.JobAnswer, error)

// restReceipt runs a receipt operation: the path's queue and job and the
// bearer token start the request newReq makes, the body fills in the rest.
func restReceipt[R any](s *Server, c call, op receiptOp[R], newReq func(service.QueueAuth, string) *R) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	ctx, cancel := s.callContext(c)
	defer cancel()
	in := newReq(a, c.Param("job_id"))
	if !bindJSON(c, apiBodyLimit, false, in) {
		return
	}
	c.Reply(jobAnswerReply(op(s.svc, ctx, *in)))
}

// restRetry answers POST /queue/{id}/jobs/{job_id}/retry, whose body is
// empty or {}.
func (s *Server) restRetry(c call) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	var in struct{}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	ctx, cancel := s.callContext(c)
	defer cancel()
	c.Reply(jobAnswerReply(s.svc.RetryJob(ctx, service.RetryJobRequest{Auth: a, JobID: c.Param("job_id")})))
}

// readParams are the query parameters of a read: stale and wait_seconds.
func (s *Server) readParams(c call) (service.QueueAuth, bool, time.Duration, bool) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return a, false, 0, false
	}
	wait, err := queryWaitSeconds(c)
	if err != nil {
		c.Reply(errorReply(err))
		return a, false, 0, false
	}
	stale, _ := c.Query("stale")
	return a, stale == "true", wait, true
}

func (s *Server) restReadQueue(c call) {
	a, stale, wait, ok := s.readParams(c)
	if !ok {
		return
	}
	ctx, cancel, ok := s.waitingContext(c, wait)
	if !ok {
		return
	}
	defer cancel()
	c.Reply(queueReply(s.svc.ReadQueue(ctx, service.ReadQueueRequest{Auth: a, Stale: stale, Wait: wait})))
}

func (s *Server) restReadJob(c call) {
	a, stale, wait, ok := s.readParams(c)
	if !ok {
		return
	}
	ctx, cancel, ok := s.waitingContext(c, wait)
	if !ok {
		return
	}
	defer cancel()
	c.Reply(jobReadReply(s.svc.ReadJob(ctx, service.ReadJobRequest{Auth: a, JobID: c.Param("job_id"), Stale: stale, Wait: wait})))
}

// queryWaitSeconds parses the wait_seconds query parameter of a read.
func queryWaitSeconds(c call) (time.Duration, error) {
	raw, ok := c.Query("wait_seconds")
	if !ok {
		return 0, nil
	}
	v, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, service.Invalid("wait_seconds", fmt.Sprintf("must be an integer from 0 to %d", service.MaxReadWaitSeconds))
	}
	return service.WaitSeconds(&v, service.MaxReadWaitSeconds)
}

// waitingContext is the context of a call that may wait up to wait before
// its answer (the request timeout plus the wait). ok is false when the call
// was handed to a server that notices its client leaving while it waits:
// the handler then returns at once, without an answer.
func (s *Server) waitingContext(c call, wait time.Duration) (ctx context.Context, cancel context.CancelFunc, ok bool) {
	if wait > 0 && !c.Waits(time.Now().Add(s.cfg.RequestTimeout+wait+5*time.Second)) {
		return nil, nil, false
	}
	ctx, cancel = c.Bounded(s.cfg.RequestTimeout + wait)
	return ctx, cancel, true
}

// callContext bounds a call's work by the request timeout.
func (s *Server) callContext(c call) (context.Context, context.CancelFunc) {
	return c.Bounded(s.cfg.RequestTimeout)
}
