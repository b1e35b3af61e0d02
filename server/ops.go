package server

import (
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/fsm"
)

// opsBodyLimit bounds request bodies of the ops endpoints.
const opsBodyLimit = 64 << 10

func (s *Server) routeOps() {
	e := s.engine
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET(cluster.StatusPath, s.clusterStatus)
	e.POST(cluster.JoinPath, s.requirePeer(), s.onLeader(false), s.clusterJoin)
	e.POST(cluster.RemovePath, s.requirePeer(), s.onLeader(false), s.clusterRemove)
	e.GET("/cluster/settings", s.onLeader(true), s.getSettings)
	e.PUT("/cluster/settings", s.requirePeer(), s.onLeader(false), s.putSettings)
	dbg := e.Group("/debug/pprof", s.requirePeer())
	dbg.GET("/", gin.WrapF(pprof.Index))
	dbg.GET("/cmdline", gin.WrapF(pprof.Cmdline))
	dbg.GET("/profile", gin.WrapF(pprof.Profile))
	dbg.GET("/symbol", gin.WrapF(pprof.Symbol))
	dbg.GET("/trace", gin.WrapF(pprof.Trace))
	dbg.GET("/:name", func(c *gin.Context) { pprof.Handler(c.Param("name")).ServeHTTP(c.Writer, c.Request) })
}

func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"ok": true, "node_id": s.node.ID()})
}

func (s *Server) readyz(c *gin.Context) {
	if ok, why := s.node.Ready(); !ok {
		fail(c, http.StatusServiceUnavailable, why)
		return
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "node_id": s.node.ID()})
}

func (s *Server) clusterStatus(c *gin.Context) {
	st := s.node.Status()
	if c.Query("hash") == "true" {
		st.StateHash = s.node.FSM().StateHash().String()
	}
	c.JSON(http.StatusOK, st)
}

func (s *Server) clusterJoin(c *gin.Context) {
	var req cluster.JoinRequest
	if !bindJSON(c, opsBodyLimit, false, &req) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	if err := s.node.Join(ctx, req); err != nil {
		clusterReply(err).write(c)
		return
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "node_id": req.NodeID})
}

func (s *Server) clusterRemove(c *gin.Context) {
	var req cluster.RemoveRequest
	if !bindJSON(c, opsBodyLimit, false, &req) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	if err := s.node.Remove(ctx, req.NodeID); err != nil {
		clusterReply(err).write(c)
		return
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "node_id": req.NodeID})
}

func (s *Server) getSettings(c *gin.Context) {
	var st fsm.Settings
	if c.Query("stale") == "true" {
		st = s.node.FSM().Settings()
	} else {
		ctx, cancel := s.requestContext(c)
		defer cancel()
		if err := s.node.ReadLinearizable(ctx, func() { st = s.node.FSM().Settings() }); err != nil {
			clusterReply(err).write(c)
			return
		}
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "settings": st})
}

// settingsPatch holds the settings a PUT names; omitted ones keep their value.
type settingsPatch struct {
	LeaseLifecycleSeconds    *int64 `json:"lease_lifecycle_seconds"`
	LeaseTTLMinSeconds       *int64 `json:"lease_ttl_min_seconds"`
	LeaseTTLMaxSeconds       *int64 `json:"lease_ttl_max_seconds"`
	LeaseTTLDefaultSeconds   *int64 `json:"lease_ttl_default_seconds"`
	MaxResultBytes           *int64 `json:"max_result_bytes"`
	QueueLifetimeSeconds     *int64 `json:"queue_lifetime_seconds"`
	QueueMaxJobs             *int64 `json:"queue_max_jobs"`
	QueueMaxAttempts         *int64 `json:"queue_max_attempts"`
	VisibilityMinSeconds     *int64 `json:"visibility_min_seconds"`
	VisibilityMaxSeconds     *int64 `json:"visibility_max_seconds"`
	VisibilityDefaultSeconds *int64 `json:"visibility_default_seconds"`
	MaxPayloadBytes          *int64 `json:"max_payload_bytes"`
	QueuesPerClient          *int64 `json:"queues_per_client"`
	QueueCreateWindowSeconds *int64 `json:"queue_create_window_seconds"`
}

func (p settingsPatch) apply(s fsm.Settings) fsm.Settings {
	pairs := []struct {
		src *int64
		dst *int64
	}{
		{p.LeaseLifecycleSeconds, &s.LeaseLifecycleSeconds}, {p.LeaseTTLMinSeconds, &s.LeaseTTLMinSeconds},
		{p.LeaseTTLMaxSeconds, &s.LeaseTTLMaxSeconds}, {p.LeaseTTLDefaultSeconds, &s.LeaseTTLDefaultSeconds},
		{p.MaxResultBytes, &s.MaxResultBytes}, {p.QueueLifetimeSeconds, &s.QueueLifetimeSeconds},
		{p.QueueMaxJobs, &s.QueueMaxJobs}, {p.QueueMaxAttempts, &s.QueueMaxAttempts},
		{p.VisibilityMinSeconds, &s.VisibilityMinSeconds}, {p.VisibilityMaxSeconds, &s.VisibilityMaxSeconds},
		{p.VisibilityDefaultSeconds, &s.VisibilityDefaultSeconds}, {p.MaxPayloadBytes, &s.MaxPayloadBytes},
		{p.QueuesPerClient, &s.QueuesPerClient}, {p.QueueCreateWindowSeconds, &s.QueueCreateWindowSeconds},
	}
	for _, x := range pairs {
		if x.src != nil {
			*x.dst = *x.src
		}
	}
	return s
}

func (s *Server) putSettings(c *gin.Context) {
	var p settingsPatch
	if !bindJSON(c, opsBodyLimit, false, &p) {
		return
	}
	next := p.apply(s.node.FSM().Settings())
	if err := next.Validate(); err != nil {
		fail(c, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	res, err := s.node.Propose(ctx, &fsm.SetSettings{Now: s.node.Now(), Settings: next})
	if err != nil {
		clusterReply(err).write(c)
		return
	}
	r, ok := res.(*fsm.SettingsResult)
	if !ok {
		fail(c, http.StatusInternalServerError, fmt.Sprintf("unexpected result %T", res))
		return
	}
	if !r.Applied {
		fail(c, http.StatusBadRequest, r.Error)
		return
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "settings": r.Settings})
}
