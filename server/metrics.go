package server

import (
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/holdfast/holdfast/cluster"
)

// metrics is the server's Prometheus registry: request counts and latency
// by route template and status (never raw paths, ids or tokens), and a
// collector reading the node's Raft and state-machine figures at scrape
// time.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	cache    sync.Map // seriesKey -> *requestSeries
}

func newMetrics(node *cluster.Node) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "holdfast_http_requests_total",
			Help: "HTTP requests by method, route template and status code.",
		}, []string{"method", "route", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "holdfast_http_request_duration_seconds",
			Help:    "HTTP request latency by method and route template.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route"}),
	}
	m.reg.MustRegister(m.requests, m.latency, &nodeCollector{node: node},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// observe records one request by its route template.
func (m *metrics) observe() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		s := m.series(c.Request.Method, routeOf(c), c.Writer.Status())
		s.count.Inc()
		s.latency.Observe(time.Since(start).Seconds())
	}
}

// requestSeries are the metrics of one method, route and status.
type requestSeries struct {
	count   prometheus.Counter
	latency prometheus.Observer
}

type seriesKey struct {
	method, route string
	status        int
}

// series returns the metrics of a request, resolved once per label set
// (routes are templates, so there are few).
func (m *metrics) series(method, route string, status int) *requestSeries {
	k := seriesKey{method, route, status}
	if s, ok := m.cache.Load(k); ok {
		return s.(*requestSeries)
	}
	s := &requestSeries{
		count:   m.requests.WithLabelValues(method, route, strconv.Itoa(status)),
		latency: m.latency.WithLabelValues(method, route),
	}
	m.cache.Store(k, s)
	return s
}

// requestsTotal sums the request counters: every request answered since the
// node started, read from the series the requests already count in.
func (m *metrics) requestsTotal() uint64 {
	var total float64
	m.cache.Range(func(_, v any) bool {
		var d dto.Metric
		if v.(*requestSeries).count.Write(&d) == nil {
			total += d.GetCounter().GetValue()
		}
		return true
	})
	return uint64(total)
}

func (m *metrics) handler() gin.HandlerFunc {
	h := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return func(c *gin.Context) { h.ServeHTTP(c.Writer, c.Request) }
}

// nodeCollector reads gauges and counters from the node at scrape time.
type nodeCollector struct {
	node *cluster.Node
}

var (
	descRaftState = prometheus.NewDesc("holdfast_raft_state", "1 for this node's current Raft state.", []string{"state"}, nil)
	descTerm      = prometheus.NewDesc("holdfast_raft_term", "Current Raft term.", nil, nil)
	descCommit    = prometheus.NewDesc("holdfast_raft_commit_index", "Raft commit index known to this node.", nil, nil)
	descApplied   = prometheus.NewDesc("holdfast_raft_applied_index", "Raft index applied to this node's state machine.", nil, nil)
	descReady     = prometheus.NewDesc("holdfast_ready", "1 when this node is ready (leader known, caught up).", nil, nil)
	descProposals = prometheus.NewDesc("holdfast_proposals_total", "Proposals made on this node by outcome.", []string{"outcome"}, nil)
	descLeases    = prometheus.NewDesc("holdfast_leases", "Lease records (a record leaves at the sweep after its lifecycle ends).", nil, nil)
	descHeld      = prometheus.NewDesc("holdfast_leases_held", "Holds the lease records show (a hold that ran out unreleased counts until its key is used again or its lifecycle ends).", nil, nil)
	descQueues    = prometheus.NewDesc("holdfast_queues", "Queues (a queue leaves at the sweep after it expires).", nil, nil)
	descJobs      = prometheus.NewDesc("holdfast_jobs", "Jobs of the queues by status (a claim whose window ran out counts as claimed until the sweep that ends it).", []string{"status"}, nil)
	descMaxLeases = prometheus.NewDesc("holdfast_max_leases", "The replicated setting max_leases: lease records beyond which an acquire of a new key is refused.", nil, nil)
	descMaxQueues = prometheus.NewDesc("holdfast_max_queues", "The replicated setting max_queues: queues beyond which a creation is refused.", nil, nil)
	descSweeps    = prometheus.NewDesc("holdfast_sweeps_total", "Sweep entries this node committed as leader.", nil, nil)
	descSwept     = prometheus.NewDesc("holdfast_swept_total", "What sweeps committed by this node expired, by kind.", []string{"kind"}, nil)
	descStorageOK = prometheus.NewDesc("holdfast_storage_ok", "1 when this node can write its files (Raft log, raft.db, snapshots); 0 during a storage fault.", nil, nil)
	descStorageEr = prometheus.NewDesc("holdfast_storage_errors_total", "Storage fault episodes by kind of file (raft-log, raft.db, snapshots): each counts once, from a first failed write until writes work again.", []string{"kind"}, nil)
)

// Describe implements prometheus.Collector.
func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRaftState, descTerm, descCommit, descApplied, descReady, descProposals,
		descLeases, descHeld, descQueues, descJobs, descMaxLeases, descMaxQueues, descSweeps, descSwept, descStorageOK, descStorageEr} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.node.Status()
	for _, s := range []string{"leader", "follower", "candidate", "shutdown"} {
		v := 0.0
		if st.State == s {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descRaftState, prometheus.GaugeValue, v, s)
	}
	ch <- prometheus.MustNewConstMetric(descTerm, prometheus.GaugeValue, float64(st.Term))
	ch <- prometheus.MustNewConstMetric(descCommit, prometheus.GaugeValue, float64(st.CommitIndex))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(st.AppliedIndex))
	ready := 0.0
	if st.Ready {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	storageOK := 0.0
	if st.Storage.OK {
		storageOK = 1
	}
	ch <- prometheus.MustNewConstMetric(descStorageOK, prometheus.GaugeValue, storageOK)
	for kind, v := range c.node.StorageFaults() {
		ch <- prometheus.MustNewConstMetric(descStorageEr, prometheus.CounterValue, float64(v), kind)
	}

	cnt := c.node.Counters()
	for _, o := range []string{"applied", "not_leader", "busy", "storage", "outcome_unknown"} {
		ch <- prometheus.MustNewConstMetric(descProposals, prometheus.CounterValue, float64(cnt.Proposals[o]), o)
	}
	ch <- prometheus.MustNewConstMetric(descSweeps, prometheus.CounterValue, float64(cnt.Sweeps))
	for kind, v := range map[string]int{
		"leases_removed": cnt.Swept.LeasesRemoved, "queues_removed": cnt.Swept.QueuesRemoved,
		"claims_returned": cnt.Swept.ClaimsReturned, "jobs_failed": cnt.Swept.JobsFailed, "clients_pruned": cnt.Swept.ClientsPruned,
	} {
		ch <- prometheus.MustNewConstMetric(descSwept, prometheus.CounterValue, float64(v), kind)
	}

	stats := c.node.FSM().Stats()
	ch <- prometheus.MustNewConstMetric(descLeases, prometheus.GaugeValue, float64(stats.Leases))
	ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(stats.LeasesHeld))
	ch <- prometheus.MustNewConstMetric(descQueues, prometheus.GaugeValue, float64(stats.Queues))
	for status, v := range map[string]int{"pending": stats.Jobs.Pending, "claimed": stats.Jobs.Claimed, "completed": stats.Jobs.Completed, "failed": stats.Jobs.Failed} {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(v), status)
	}
	set := c.node.FSM().Settings()
	ch <- prometheus.MustNewConstMetric(descMaxLeases, prometheus.GaugeValue, float64(set.MaxLeases))
	ch <- prometheus.MustNewConstMetric(descMaxQueues, prometheus.GaugeValue, float64(set.MaxQueues))
}
