package server

import (
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
)

// apiBodyLimit bounds API request bodies: room for a 32 KB result or a
// 16 KiB payload written with generous whitespace and escapes.
const apiBodyLimit = 256 << 10

// APIPrefix is the path prefix of the lease and queue API.
const APIPrefix = "/services/v1"

func (s *Server) routeAPI() {
	g := s.engine.Group(APIPrefix, s.limit(), s.bufferBody(apiBodyLimit))
	lead := s.apiRoute(false)
	read := s.apiRoute(true)
	g.POST("/lease/namespace", s.restNamespace)
	g.POST("/lease", lead, s.restAcquire)
	g.POST("/lease/acquire", lead, s.restAcquire)
	g.POST("/lease/renew", lead, s.restLeaseOwner(opRenew))
	g.POST("/lease/release", lead, s.restLeaseOwner(opRelease))
	g.POST("/lease/complete", lead, s.restLeaseOwner(opComplete))
	g.POST("/queue", lead, s.restCreateQueue)
	g.POST("/queue/:queue_id/jobs", lead, s.restEnqueue)
	g.POST("/queue/:queue_id/claim", lead, s.restClaim)
	g.POST("/queue/:queue_id/jobs/:job_id/retry", lead, s.restRetry)
	g.POST("/queue/:queue_id/jobs/:job_id/:action", lead, s.restJobAction)
	g.GET("/queue/:queue_id", read, s.restRead)
	g.GET("/queue/:queue_id/jobs/:job_id", read, s.restRead)
}

func (s *Server) restNamespace(c *gin.Context) {
	var in struct{}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	s.createNamespace().write(c)
}

func (s *Server) restAcquire(c *gin.Context) {
	var in LeaseAcquireInput
	if !bindJSON(c, apiBodyLimit, false, &in) {
		return
	}
	wait, _ := waitSeconds(in.WaitSeconds, maxAcquireWaitSeconds)
	ctx, cancel := s.waitingContext(c, wait)
	defer cancel()
	s.acquireLease(ctx, in).write(c)
}

func (s *Server) restLeaseOwner(op leaseOp) gin.HandlerFunc {
	return func(c *gin.Context) {
		var in LeaseOwnerInput
		if !bindJSON(c, apiBodyLimit, false, &in) {
			return
		}
		ctx, cancel := s.requestContext(c)
		defer cancel()
		s.ownerLease(ctx, op, in).write(c)
	}
}

func (s *Server) restCreateQueue(c *gin.Context) {
	var in struct{}
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	s.createQueue(ctx, s.clientIP(c)).write(c)
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
func (s *Server) restQueueAuth(c *gin.Context) (queueAuth, bool) {
	tok, present := bearer(c)
	a, bad := parseQueueAuth(c.Param("queue_id"), tok, present)
	if bad != nil {
		bad.write(c)
		return a, false
	}
	return a, true
}

func (s *Server) restEnqueue(c *gin.Context) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	var in EnqueueInput
	if !bindJSON(c, apiBodyLimit, false, &in) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	s.enqueue(ctx, a, in).write(c)
}

func (s *Server) restClaim(c *gin.Context) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	var in ClaimInput
	if !bindJSON(c, apiBodyLimit, true, &in) {
		return
	}
	wait, _ := waitSeconds(in.WaitSeconds, maxClaimWaitSeconds)
	ctx, cancel := s.waitingContext(c, wait)
	defer cancel()
	s.claim(ctx, a, in).write(c)
}

func (s *Server) restJobAction(c *gin.Context) {
	var op jobOp
	switch c.Param("action") {
	case "ack":
		op = opAck
	case "release":
		op = opJobRelease
	case "renew":
		op = opJobRenew
	default:
		fail(c, http.StatusNotFound, "no such endpoint: the job action must be ack, release, renew or retry")
		return
	}
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	in, ok := receiptBody(op, func(v any) bool { return bindJSON(c, apiBodyLimit, false, v) })
	if !ok {
		return
	}
	s.receiptOp(ctx, op, a, c.Param("job_id"), in).write(c)
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
	s.retryJob(ctx, a, c.Param("job_id")).write(c)
}

func (s *Server) restRead(c *gin.Context) {
	a, ok := s.restQueueAuth(c)
	if !ok {
		return
	}
	wait, bad := queryWaitSeconds(c)
	if bad != nil {
		bad.write(c)
		return
	}
	ctx, cancel := s.waitingContext(c, wait)
	defer cancel()
	s.readQueue(ctx, a, c.Param("job_id"), c.Query("stale") == "true", wait).write(c)
}
