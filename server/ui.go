package server

import (
	"context"
	"embed"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/fsm"
)

// uiFiles are the status page's assets: plain HTML, CSS and JavaScript, no
// framework and no build step.
//
//go:embed ui/index.html ui/app.js ui/style.css
var uiFiles embed.FS

// UIPath is the status page.
const UIPath = "/ui/"

// uiPeerTimeout bounds asking another member for its status.
const uiPeerTimeout = time.Second

// routeUI serves the status page and its data to anyone, with the browser
// protections of /mcp: no cross-origin use, a Host that names this node or
// loopback, no framing.
func (s *Server) routeUI() {
	g := s.engine.Group("/ui", s.uiGuard())
	for path, file := range map[string]struct{ name, kind string }{
		"/":          {"ui/index.html", "text/html; charset=utf-8"},
		"/app.js":    {"ui/app.js", "text/javascript; charset=utf-8"},
		"/style.css": {"ui/style.css", "text/css; charset=utf-8"},
	} {
		body, err := uiFiles.ReadFile(file.name)
		if err != nil {
			s.log.Error("status page asset missing", "file", file.name, "error", err)
			continue
		}
		kind := file.kind
		g.GET(path, func(c *gin.Context) { c.Data(http.StatusOK, kind, body) })
	}
	g.GET("/status.json", s.uiStatus)
	s.engine.GET("/ui", s.uiGuard(), func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, UIPath) })
}

// uiGuard refuses what a page of another site could send, and sets headers
// that keep the page from being framed or its types guessed.
func (s *Server) uiGuard() gin.HandlerFunc {
	return func(c *gin.Context) {
		h := c.Writer.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if why := s.browserRefusal(c.Request); why != "" {
			fail(c, http.StatusForbidden, why)
			return
		}
		c.Next()
	}
}

// uiMember is one member as the status page shows it.
type uiMember struct {
	ID            string `json:"id"`
	HTTPAddr      string `json:"http_addr"`
	Voter         bool   `json:"voter"`
	Leader        bool   `json:"leader"`
	State         string `json:"state"`
	Term          uint64 `json:"term"`
	CommitIndex   uint64 `json:"commit_index"`
	AppliedIndex  uint64 `json:"applied_index"`
	Ready         bool   `json:"ready"`
	ClockOffsetMs int64  `json:"clock_offset_ms"`
	ClockSkewed   bool   `json:"clock_skewed"`
	Error         string `json:"error,omitempty"`
}

// uiLimits are the bounds the counts run up against.
type uiLimits struct {
	MaxLeases int64 `json:"max_leases"`
	MaxQueues int64 `json:"max_queues"`
}

// uiStatusBody is the status page's data: no secret is in any of it.
type uiStatusBody struct {
	NodeID        string            `json:"node_id"`
	LeaderID      string            `json:"leader_id"`
	Term          uint64            `json:"term"`
	Members       []uiMember        `json:"members"`
	Counts        fsm.Stats         `json:"counts"`
	Limits        uiLimits          `json:"limits"`
	Proposals     map[string]uint64 `json:"proposals"`
	RequestsTotal uint64            `json:"requests_total"`
	TimeUnixMs    int64             `json:"time_unix_ms"`
}

// uiStatus answers this node's view with every member's own status, asked
// for in parallel (a member that does not answer in time shows its error).
func (s *Server) uiStatus(c *gin.Context) {
	self := s.node.Status()
	members := make([]uiMember, len(self.Nodes))
	var wg sync.WaitGroup
	for i, m := range self.Nodes {
		members[i] = uiMember{ID: m.ID, HTTPAddr: m.HTTPAddr, Voter: m.Voter, Leader: m.ID == self.LeaderID}
		if m.ID == self.NodeID {
			members[i].fill(self)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(c.Request.Context(), uiPeerTimeout)
			defer cancel()
			st, err := s.node.PeerStatus(ctx, m.HTTPAddr)
			if err != nil {
				members[i].Error = "no answer: " + err.Error()
				return
			}
			members[i].fill(st)
		}()
	}
	wg.Wait()
	now := s.node.Now()
	set := s.node.FSM().Settings()
	c.JSON(http.StatusOK, uiStatusBody{
		Limits: uiLimits{MaxLeases: set.MaxLeases, MaxQueues: set.MaxQueues},
		NodeID: self.NodeID, LeaderID: self.LeaderID, Term: self.Term, Members: members,
		Counts:        s.node.FSM().Stats(),
		Proposals:     s.node.Counters().Proposals,
		RequestsTotal: s.metrics.requestsTotal(),
		TimeUnixMs:    now,
	})
}

// fill copies a member's own status.
func (m *uiMember) fill(st cluster.Status) {
	m.State, m.Term, m.CommitIndex, m.AppliedIndex = st.State, st.Term, st.CommitIndex, st.AppliedIndex
	m.Ready, m.ClockOffsetMs, m.ClockSkewed = st.Ready, st.ClockOffsetMs, st.ClockSkewed
}
