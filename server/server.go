package server

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/hashicorp/go-hclog"

	"github.com/holdfast/holdfast/cluster"
	"github.com/holdfast/holdfast/internal/ratelimit"
	"github.com/holdfast/holdfast/server/service"
)

// Config configures a Server.
type Config struct {
	// Node is the cluster node this server fronts.
	Node *cluster.Node
	// Logger is the parent logger; the server logs under "http".
	Logger hclog.Logger
	// LeaderWait is how long a request waits for a leader during an
	// election before it is answered 503 (default 3 s).
	LeaderWait time.Duration
	// RequestTimeout bounds the work of one request, proposals included (default 10 s).
	RequestTimeout time.Duration
	// RateLimit is the sustained API requests per second allowed per client
	// address on this node; 0 disables the limit.
	RateLimit float64
	// RateBurst is how many API requests a client address may make at once.
	RateBurst int
	// BodyTimeout bounds how long a request body may take to arrive once its
	// headers have (default 10 s).
	BodyTimeout time.Duration
	// ListenAddr is the address the HTTP listener is bound to; with the
	// node's advertised address it is the node's own Host for the
	// operator endpoints' DNS-rebinding guard.
	ListenAddr string
}

// Server serves holdfast's HTTP endpoints for one node.
type Server struct {
	cfg     Config
	node    *cluster.Node
	log     hclog.Logger
	engine  *gin.Engine
	proxy   *http.Transport
	metrics *metrics
	limiter *ratelimit.Limiter
	svc     *service.Service
}

// New builds the router for cfg.Node.
func New(cfg Config) *Server {
	d := service.Config{Logger: cfg.Logger, LeaderWait: cfg.LeaderWait, RequestTimeout: cfg.RequestTimeout}.WithDefaults()
	cfg.Logger, cfg.LeaderWait, cfg.RequestTimeout = d.Logger, d.LeaderWait, d.RequestTimeout
	if cfg.BodyTimeout <= 0 {
		cfg.BodyTimeout = 10 * time.Second
	}
	s := &Server{
		cfg:   cfg,
		node:  cfg.Node,
		log:   cfg.Logger.Named("http"),
		proxy: cluster.PeerTransport(cfg.Node.Peer()),
	}
	// A forwarded request may wait on the leader (long-poll claim, blocking
	// acquire, awaited job): the longest wait is added.
	s.proxy.ResponseHeaderTimeout = cfg.RequestTimeout + service.MaxAcquireWaitSeconds*time.Second + 5*time.Second
	s.metrics = newMetrics(cfg.Node)
	s.svc = service.New(service.Config{Node: cfg.Node, Logger: s.log, LeaderWait: cfg.LeaderWait,
		RequestTimeout: cfg.RequestTimeout, Dialer: linkDialer{node: cfg.Node}})
	s.svc.RegisterMetrics(s.metrics.reg)
	s.limiter = ratelimit.New(cfg.RateLimit, cfg.RateBurst)
	s.engine = gin.New()
	s.engine.HandleMethodNotAllowed = true
	s.engine.RedirectTrailingSlash = false
	s.engine.RedirectFixedPath = false
	s.engine.Use(s.recoverJSON(), s.metrics.observe(), s.logRequests(), s.callerTimeout())
	s.engine.GET("/metrics", s.metrics.handler())
	s.engine.NoRoute(func(c *gin.Context) { fail(c, http.StatusNotFound, "no such endpoint") })
	s.engine.NoMethod(func(c *gin.Context) { fail(c, http.StatusMethodNotAllowed, "method not allowed on this endpoint") })
	s.routeOps()
	s.routeAPI()
	s.routeMCP()
	s.routeUI()
	return s
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.engine }

// Close closes the peer links and releases idle forwarding connections.
func (s *Server) Close() {
	s.svc.Close()
	s.proxy.CloseIdleConnections()
}

// HTTPServer wraps the server's handler with the timeouts and header limits
// every holdfast listener uses; net/http's own error lines go to the
// server's logger.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.engine,
		ConnContext:       connContext,
		ErrorLog:          s.log.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true}),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// requestContext bounds a handler's work.
func (s *Server) requestContext(c *gin.Context) (context.Context, context.CancelFunc) {
	return s.callContext(s.callOf(c))
}

// recoverJSON turns a panic in a handler into a logged 500 with a JSON body.
func (s *Server) recoverJSON() gin.HandlerFunc {
	return gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, rec any) {
		s.log.Error("handler panic", "route", c.FullPath(), "panic", rec)
		fail(c, http.StatusInternalServerError, "internal error")
	})
}

// routeOf is the request's route template ("unmatched" for none): the only
// form of the path that logs and metric labels may carry.
func routeOf(c *gin.Context) string {
	if r := c.FullPath(); r != "" {
		return r
	}
	return "unmatched"
}

// logRequests logs one line per request: route template, never the raw
// path or query (which may carry ids) and never headers or bodies.
func (s *Server) logRequests() gin.HandlerFunc {
	return func(c *gin.Context) {
		if !s.log.IsDebug() {
			c.Next()
			return
		}
		start := time.Now()
		c.Next()
		s.log.Debug("request", "method", c.Request.Method, "route", routeOf(c), "status", c.Writer.Status(),
			"duration_ms", time.Since(start).Milliseconds(), "forwarded", s.forwardedByPeer(c))
	}
}
