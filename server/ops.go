package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/fsm"
	"github.com/holdfast/holdfast/internal/jsonenc"
	"github.com/holdfast/holdfast/server/service"
)

// opsBodyLimit bounds request bodies of the ops endpoints.
const opsBodyLimit = 64 << 10

func (s *Server) routeOps() {
	e := s.engine
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET(cluster.StatusPath, s.clusterStatus)
	e.GET(OpenAPIPath, serveOpenAPI)
	e.GET(LinkPath, s.guardBrowsers(), s.serveLink)
	guard, op, body := s.guardBrowsers(), s.requireOperator(), s.bufferBody(opsBodyLimit)
	e.POST(cluster.JoinPath, guard, op, body, s.bindJoiner(), s.onLeader(false), s.clusterJoin)
	e.POST(cluster.RemovePath, guard, op, body, s.onLeader(false), s.clusterRemove)
	e.GET("/cluster/settings", guard, s.onLeader(true), s.getSettings)
	e.PUT("/cluster/settings", guard, op, body, s.onLeader(false), s.putSettings)
	e.GET(BackupPath, guard, op, s.onLeader(false), s.getBackup)
	dbg := e.Group("/debug/pprof", guard, op)
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

// bindJoiner binds a join to the joining node's certificate on a node with
// peer TLS: the caller must present a node certificate naming the node_id
// it asks to add or update, unless a proven peer forwarded the request
// (that peer checked it where it arrived). So a node's valid certificate
// cannot add another node, or move another member's addresses.
func (s *Server) bindJoiner() gin.HandlerFunc {
	return func(c *gin.Context) {
		if s.node.Peer() == nil || s.forwardedByPeer(c) {
			c.Next()
			return
		}
		id, ok := s.certPeer(c.Request)
		if !ok {
			fail(c, http.StatusForbidden, "joining needs a node certificate issued by the peer CA (holdfast tls cert create --node-id)")
			return
		}
		var req cluster.JoinRequest
		b, err := readJSONBody(s.callOf(c), opsBodyLimit, false)
		setBody(c, b)
		if err == nil && decodeStrict(b, &req) == nil && req.NodeID != id {
			fail(c, http.StatusForbidden, fmt.Sprintf("the client certificate names node %q, which may not join or update node %q", id, req.NodeID))
			return
		}
		c.Next()
	}
}

func (s *Server) clusterJoin(c *gin.Context) {
	var req cluster.JoinRequest
	if !bindJSON(s.callOf(c), opsBodyLimit, false, &req) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	if err := s.node.Join(ctx, req); err != nil {
		errorReply(service.ClusterError(err)).write(c)
		return
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "node_id": req.NodeID})
}

func (s *Server) clusterRemove(c *gin.Context) {
	var req cluster.RemoveRequest
	if !bindJSON(s.callOf(c), opsBodyLimit, false, &req) {
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	if err := s.node.Remove(ctx, req.NodeID); err != nil {
		errorReply(service.ClusterError(err)).write(c)
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
			errorReply(service.ClusterError(err)).write(c)
			return
		}
	}
	c.JSON(http.StatusOK, gin.H{"ok": true, "settings": st})
}

// BackupPath answers a backup of the replicated state, taken on the leader.
const BackupPath = "/cluster/snapshot"

// backupTimeout bounds taking a backup: a snapshot of a large state takes
// seconds.
const backupTimeout = 2 * time.Minute

// backupIdle is how long a backup's answer may wait for the client to
// take its next bytes before the connection is given up.
const backupIdle = 30 * time.Second

// getBackup answers a consistent snapshot of the replicated state as the
// leader sees it, in the backup file format (cluster.BackupFormat). The
// server's write timeout would cut the answer of a large state short (it
// counts from the request, and reading a state of ten million records
// twice takes minutes): each write has backupIdle from its start.
func (s *Server) getBackup(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), max(backupTimeout, s.cfg.RequestTimeout))
	defer cancel()
	start := time.Now()
	b, err := s.node.TakeBackup(ctx)
	if err != nil {
		errorReply(service.ClusterError(err)).write(c)
		return
	}
	took := time.Since(start)
	c.Header("X-Holdfast-Backup-Index", strconv.FormatUint(b.Header.Index, 10))
	c.Header("Content-Type", "application/octet-stream")
	c.Status(http.StatusOK)
	if _, err := b.WriteTo(idleWriter{w: c.Writer, rc: http.NewResponseController(c.Writer)}); err != nil {
		s.log.Warn("sending a backup failed", "error", err)
		return
	}
	s.log.Info("backup sent", "index", b.Header.Index, "bytes", b.Header.Size,
		"snapshot_seconds", took.Seconds(), "total_seconds", time.Since(start).Seconds())
}

// idleWriter gives each write backupIdle from its start.
type idleWriter struct {
	w  io.Writer
	rc *http.ResponseController
}

func (w idleWriter) Write(p []byte) (int, error) {
	_ = w.rc.SetWriteDeadline(time.Now().Add(backupIdle))
	return w.w.Write(p)
}

func (s *Server) putSettings(c *gin.Context) {
	var p fsm.SettingsPatch
	if !bindJSON(s.callOf(c), opsBodyLimit, false, &p) {
		return
	}
	if p.Empty() {
		errReply(http.StatusBadRequest, "body must name at least one setting", jsonenc.H{"field": "body"}).write(c)
		return
	}
	// A quick check against the local settings catches most mistakes without
	// a log entry; the state machine validates the merged result again.
	if err := s.node.FSM().Settings().With(p).Validate(); err != nil {
		errorReply(service.InvalidError(err)).write(c)
		return
	}
	ctx, cancel := s.requestContext(c)
	defer cancel()
	res, err := s.node.Propose(ctx, &fsm.SetSettings{Now: s.node.Now(), Patch: p})
	if err != nil {
		errorReply(service.ClusterError(err)).write(c)
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
