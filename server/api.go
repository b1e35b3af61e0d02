package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

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
	g.POST("/lease/namespace", s.restNamespace)
	g.POST("/lease", lead, s.restAcquire)
	g.POST("/lease/acquire", lead, s.restAcquire)
	g.POST("/lease/renew", lead, restLeaseOwner(s, s.svc.RenewLease))
	g.POST("/lease/release", lead, restLeaseOwner(s, s.svc.ReleaseLease))
	g.POST("/lease/complete", lead, restLeaseOwner(s, s.svc.CompleteLease))
	g.POST("/queue", lead, s.restCreateQueue)
	g.POST("/queue/:queue_id/jobs", lead, s.restEnqueue)
	g.POST("/queue/:queue_id/claim", lead, s.restClaim)
	g.POST("/queue/:queue_id/jobs/:job_id/retry", lead, s.restRetry)
	g.POST("/queue/:queue_id/jobs/:job_id/:action", lead, s.restJobAction)
	g.GET("/queue/:queue_id", read, s.restReadQueue)
	g.GET("/queue/:queue_id/jobs/:job_id", read, s.restReadJob)
}

func (s *Server) restNamespace(c *gin.Context) {
	var in struct{}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	namespaceReply(s.svc.CreateNamespace()).write(c)
}

func (s *Server) restAcquire(c *gin.Context) {
	var in service.AcquireLeaseRequest
	if !bindJSON(c, apiBodyLimit, false, &in) {
		return
	}
	wait, _ := service.WaitSeconds(in.WaitSeconds, service.MaxAcquireWaitSeconds)
	ctx, cancel := s.waitingContext(c, wait)
	defer cancel()
	leaseReply(s.svc.AcquireLease(ctx, in)).write(c)
}

// leaseOwnerOp is the service's renew, release or complete.
type leaseOwnerOp func(context.Context, service.LeaseOwnerRequest) (service.LeaseAnswer, error)

func restLeaseOwner(s *Server, op leaseOwnerOp) gin.HandlerFunc {
	return func(c *gin.Context) {
		var in service.LeaseOwnerRequest
		if !bindJSON(c, apiBodyLimit, false, &in) {
			return
		}
		ctx, cancel := s.requestContext(c)
		defer cancel()
		leaseReply(op(ctx, in)).write(c)
	}
}

func (s *Server) restCreateQueue(c *gin.Context) {
	var in struct{}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	queueCreatedReply(s.svc.CreateQueue(ctx, service.CreateQueueRequest{ClientIP: s.clientIP(c)})).write(c)
}

// bearer extracts the token of an Authorization: Bearer header.
func bearer(c *gin.Context) (string, bool) {
	h := c.GetHeader("Authorization")
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
func (s *Server) restQueueAuth(c *gin.Context) (service.QueueAuth, bool) {
	tok, present := bearer(c)
	a, err := service.ParseQueueAuth(c.Param("queue_id"), tok, present)
	if err != nil {
		errorReply(err).write(c)
		return a, false
	}
	return a, true
}

func (s *Server) restEnqueue(c *gin.Context) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	in := service.EnqueueRequest{Auth: a}
	if !bindJSON(c, apiBodyLimit, false, &in) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	jobAnswerReply(s.svc.Enqueue(ctx, in)).write(c)
}

func (s *Server) restClaim(c *gin.Context) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	in := service.ClaimRequest{Auth: a}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	wait, _ := service.WaitSeconds(in.WaitSeconds, service.MaxClaimWaitSeconds)
	ctx, cancel := s.waitingContext(c, wait)
	defer cancel()
	jobAnswerReply(s.svc.Claim(ctx, in)).write(c)
}

// restJobAction answers ack, release and renew, whose bodies carry the
// claim's receipt.
func (s *Server) restJobAction(c *gin.Context) {
	switch c.Param("action") {
	case "ack":
		restReceipt(s, c, (*service.Service).AckJob, ackRequest)
	case "release":
		restReceipt(s, c, (*service.Service).ReleaseJob, releaseRequest)
	case "renew":
		restReceipt(s, c, (*service.Service).RenewJob, renewRequest)
	default:
		fail(c, http.StatusNotFound, "no such endpoint: the job action must be ack, release, renew or retry")
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
func restReceipt[R any](s *Server, c *gin.Context, op receiptOp[R], newReq func(service.QueueAuth, string) *R) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	in := newReq(a, c.Param("job_id"))
	if !bindJSON(c, apiBodyLimit, false, in) {
		return
	}
	jobAnswerReply(op(s.svc, ctx, *in)).write(c)
}

// restRetry answers POST /queue/{id}/jobs/{job_id}/retry, whose body is
// empty or {}.
func (s *Server) restRetry(c *gin.Context) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	var in struct{}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	jobAnswerReply(s.svc.RetryJob(ctx, service.RetryJobRequest{Auth: a, JobID: c.Param("job_id")})).write(c)
}

// readParams are the query parameters of a read: stale and wait_seconds.
func (s *Server) readParams(c *gin.Context) (service.QueueAuth, bool, time.Duration, bool) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return a, false, 0, false
	}
	wait, err := queryWaitSeconds(c)
	if err != nil {
		errorReply(err).write(c)
		return a, false, 0, false
	}
	return a, c.Query("stale") == "true", wait, true
}

func (s *Server) restReadQueue(c *gin.Context) {
	a, stale, wait, ok := s.readParams(c)
	if !ok {
		return
	}
	ctx, cancel := s.waitingContext(c, wait)
	defer cancel()
	queueReply(s.svc.ReadQueue(ctx, service.ReadQueueRequest{Auth: a, Stale: stale, Wait: wait})).write(c)
}

func (s *Server) restReadJob(c *gin.Context) {
	a, stale, wait, ok := s.readParams(c)
	if !ok {
		return
	}
	ctx, cancel := s.waitingContext(c, wait)
	defer cancel()
	jobReadReply(s.svc.ReadJob(ctx, service.ReadJobRequest{Auth: a, JobID: c.Param("job_id"), Stale: stale, Wait: wait})).write(c)
}

// queryWaitSeconds parses the wait_seconds query parameter of a read.
func queryWaitSeconds(c *gin.Context) (time.Duration, error) {
	raw, ok := c.GetQuery("wait_seconds")
	if !ok {
		return 0, nil
	}
	v, err := strconv.ParseInt(raw, 10, 64)
	if err != nil {
		return 0, service.Invalid("wait_seconds", fmt.Sprintf("must be an integer from 0 to %d", service.MaxReadWaitSeconds))
	}
	return service.WaitSeconds(&v, service.MaxReadWaitSeconds)
}

// waitingContext is the context of a request that may wait: the request
// timeout plus the wait. It also moves the connection's write deadline past
// the wait, so the HTTP server's write timeout does not cut the answer.
func (s *Server) waitingContext(c *gin.Context, wait time.Duration) (context.Context, context.CancelFunc) {
	if wait > 0 {
		_ = http.NewResponseController(c.Writer).SetWriteDeadline(time.Now().Add(s.cfg.RequestTimeout + wait + 5*time.Second))
	}
	return context.WithTimeout(c.Request.Context(), s.cfg.RequestTimeout+wait)
}
