// Package metrics exposes opledger's Prometheus metrics: the gRPC server
// metrics (as go-grpc-middleware names them) and the ledger's own, all
// named opledger_*.
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "opledger"

// handlingBuckets are the bounds, in seconds, of the gRPC handling-time
// histogram.
var handlingBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Metrics holds every collector and implements ledger.Observer.
type Metrics struct {
	// Registry holds everything; Handler serves it.
	Registry *prometheus.Registry
	// GRPC is the gRPC server metrics interceptor source.
	GRPC *GRPC

	executions  *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	replays     *prometheus.CounterVec
	outcomes    *prometheus.CounterVec
	unknown     *prometheus.CounterVec
	downstream  *prometheus.HistogramVec
	reconciles  *prometheus.CounterVec
	approvals   *prometheus.HistogramVec
	limitUsed   *prometheus.CounterVec
	limitRefuse *prometheus.CounterVec
	openCounter func(ctx context.Context) (map[string]int64, error)

	// A new tool call's series, looked up once per tool (and outcome) and
	// kept: WithLabelValues hashes its labels under the vector's lock on
	// every call (finding 27 did the same for the gRPC series). Tools come
	// from the tools file and outcomes from executor.Outcome, so both maps
	// stay small.
	startedByTool sync.Map // tool → prometheus.Counter
	calledByKey   sync.Map // [2]string{tool, outcome} → *downstreamSeries
}

// downstreamSeries are the series one tool's downstream calls with one
// outcome count into.
type downstreamSeries struct {
	outcomes prometheus.Counter
	duration prometheus.Observer
	unknown  prometheus.Counter // nil unless the outcome is unknown
}

// New registers opledger's metrics in a fresh registry. countOpen, if not
// nil, is asked at scrape time for the open operations by state.
func New(countOpen func(ctx context.Context) (map[string]int64, error)) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		GRPC:     newGRPC(handlingBuckets),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "executions_started_total",
			Help: "Downstream calls started (claims and lease takeovers), by tool."}, []string{"tool"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "duplicates_prevented_total",
			Help: "Repeated Prepare or Execute calls answered from the ledger without reaching the downstream."}, []string{"method", "tool"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "replays_served_total",
			Help: "Recorded outcomes replayed to a repeated call."}, []string{"method", "tool"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "downstream_outcomes_total",
			Help: "Downstream call outcomes (succeeded, failed, unknown, not_submitted), by tool."}, []string{"tool", "outcome"}),
		unknown: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "outcome_unknown_total",
			Help: "Downstream calls whose outcome could not be determined, by tool."}, []string{"tool"}),
		downstream: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "downstream_duration_seconds",
			Help: "Downstream call latency, retries included, by tool and outcome.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14)},
			[]string{"tool", "outcome"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "reconciliations_total",
			Help: "Reconciliations by tool and result (succeeded, failed, ready, outcome_unknown, inconclusive)."}, []string{"tool", "result"}),
		approvals: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "approval_latency_seconds",
			Help: "Time from Prepare to an approver's decision, by tool and decision.", Buckets: prometheus.ExponentialBuckets(1, 3, 10)},
			[]string{"tool", "decision"}),
		limitUsed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "limit_reservations_total",
			Help: "Operations that took a share of a budget (a tools-file limit), by limit."}, []string{"limit"}),
		limitRefuse: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "limit_refusals_total",
			Help: "Prepares refused by a limit (LIMIT_EXCEEDED), or by a business identity (limit \"identity:<tool>\", OPERATION_DUPLICATE)."}, []string{"limit"}),
		openCounter: countOpen,
	}
	m.Registry.MustRegister(m.GRPC, m.executions, m.duplicates, m.replays, m.outcomes, m.unknown, m.downstream, m.reconciles, m.approvals,
		m.limitUsed, m.limitRefuse,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if countOpen != nil {
		m.Registry.MustRegister(&openCollector{m: m})
	}
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// ExecutionStarted implements ledger.Observer.
func (m *Metrics) ExecutionStarted(tool string) {
	c, ok := m.startedByTool.Load(tool)
	if !ok {
		c, _ = m.startedByTool.LoadOrStore(tool, m.executions.WithLabelValues(tool))
	}
	c.(prometheus.Counter).Inc()
}

// DuplicatePrevented implements ledger.Observer.
func (m *Metrics) DuplicatePrevented(method, tool string, replay bool) {
	m.duplicates.WithLabelValues(method, tool).Inc()
	if replay {
		m.replays.WithLabelValues(method, tool).Inc()
	}
}

// DownstreamCalled implements ledger.Observer.
func (m *Metrics) DownstreamCalled(tool, outcome string, d time.Duration) {
	key := [2]string{tool, outcome}
	v, ok := m.calledByKey.Load(key)
	if !ok {
		ds := &downstreamSeries{outcomes: m.outcomes.WithLabelValues(tool, outcome), duration: m.downstream.WithLabelValues(tool, outcome)}
		if outcome == "unknown" {
			ds.unknown = m.unknown.WithLabelValues(tool)
		}
		v, _ = m.calledByKey.LoadOrStore(key, ds)
	}
	ds := v.(*downstreamSeries)
	ds.outcomes.Inc()
	ds.duration.Observe(d.Seconds())
	if ds.unknown != nil {
		ds.unknown.Inc()
	}
}

// Reconciled implements ledger.Observer.
func (m *Metrics) Reconciled(tool, result string) { m.reconciles.WithLabelValues(tool, result).Inc() }

// LimitUsed implements ledger.Observer.
func (m *Metrics) LimitUsed(limit string) { m.limitUsed.WithLabelValues(limit).Inc() }

// LimitRefused implements ledger.Observer.
func (m *Metrics) LimitRefused(limit string) { m.limitRefuse.WithLabelValues(limit).Inc() }

// Decided implements ledger.Observer.
func (m *Metrics) Decided(tool, decision string, d time.Duration) {
	m.approvals.WithLabelValues(tool, decision).Observe(d.Seconds())
}

var openDesc = prometheus.NewDesc(namespace+"_operations", "Open operations by state, across tenants, counted at scrape time.", []string{"state"}, nil)

// openCollector asks the database at scrape time, so every replica reports
// the same, true number.
type openCollector struct{ m *Metrics }

func (c *openCollector) Describe(ch chan<- *prometheus.Desc) { ch <- openDesc }

func (c *openCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	counts, err := c.m.openCounter(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(openDesc, err)
		return
	}
	for _, s := range []string{"AWAITING_APPROVAL", "READY", "EXECUTING", "OUTCOME_UNKNOWN"} {
		ch <- prometheus.MustNewConstMetric(openDesc, prometheus.GaugeValue, float64(counts[s]), s)
	}
}
