package ordered

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderedq/ordered/policy"
)

// metrics are a worker's Prometheus collectors. Keys are never labels: their number is
// unbounded. Workers that share a Registerer and the same MetricsLabels share the collectors.
type metrics struct {
	claims             prometheus.Counter
	completions        prometheus.Counter
	retries            prometheus.Counter
	failures           *prometheus.CounterVec
	expiredRecovered   prometheus.Counter
	lostOwnership      prometheus.Counter
	timeouts           prometheus.Counter
	givenBack          prometheus.Counter
	jobDuration        prometheus.Histogram
	claimDuration      prometheus.Histogram
	completionDuration prometheus.Histogram
	enqueueToStart     prometheus.Histogram

	queue *queueGauges
	// warnedShared is set once this worker has warned that another queue shares its gauges.
	warnedShared atomic.Bool
}

// Buckets, in seconds. Statements take milliseconds; handlers and the wait for a first start
// can take minutes behind a backlog, so theirs reach an hour.
var (
	latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	longBuckets    = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600}
)

// queueWide ends the help of the gauges that describe the queue, not the worker.
const queueWide = " Queue-wide: every worker of the queue reports the same value, so aggregate with max, not sum."

// queueGauges are the gauges of the queue's counts, one collector so that the workers that
// share them also share which queue (schema) they show.
type queueGauges struct {
	jobs          *prometheus.GaugeVec
	oldestReady   prometheus.Gauge
	blockedKeys   prometheus.Gauge
	expiredLeases prometheus.Gauge
	countedAt     prometheus.Gauge
	gapKeys       prometheus.Gauge
	gapBlocked    prometheus.Gauge
	oldestGap     prometheus.Gauge

	mu     sync.Mutex
	schema string // the first queue shown; "" until then
}

func (g *queueGauges) collectors() []prometheus.Collector {
	return []prometheus.Collector{g.jobs, g.oldestReady, g.blockedKeys, g.expiredLeases, g.countedAt,
		g.gapKeys, g.gapBlocked, g.oldestGap}
}

func (g *queueGauges) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range g.collectors() {
		c.Describe(ch)
	}
}

func (g *queueGauges) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g.collectors() {
		c.Collect(ch)
	}
}

// claimFor records schema as the queue shown and returns the queue shown before, if another.
func (g *queueGauges) claimFor(schema string) (other string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.schema == "" {
		g.schema = schema
	}
	if g.schema != schema {
		return g.schema
	}
	return ""
}

// newMetrics creates the collectors, with labels as constant labels, and registers them on reg
// (nil: not registered). Several workers may share one registry: with the same labels they
// then share the collectors; give the workers of each queue labels of their own.
func newMetrics(reg prometheus.Registerer, labels prometheus.Labels) (*metrics, error) {
	for name := range labels {
		if name == "status" || name == "decision" {
			return nil, fmt.Errorf("WorkerConfig.MetricsLabels: %q is a label of ordered's own metrics", name)
		}
	}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help + queueWide, ConstLabels: labels})
	}
	m := &metrics{
		claims:      counter("ordered_claims_total", "Jobs claimed, recovered leases included."),
		completions: counter("ordered_completions_total", "Jobs completed."),
		retries:     counter("ordered_retries_total", "Failed attempts released for a retry."),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordered_failures_total", Help: "Jobs failed for good, by the policy's decision (block or skip).", ConstLabels: labels,
		}, []string{"decision"}),
		expiredRecovered: counter("ordered_expired_leases_recovered_total", "Jobs claimed again after their previous claim's lease expired."),
		lostOwnership:    counter("ordered_lost_ownership_total", "Attempts whose claim was lost (lease expired or job reclaimed); their outcome was not acknowledged."),
		timeouts:         counter("ordered_job_timeouts_total", "Attempts recorded as failed because their handler ran past WorkerConfig.JobTimeout (retried, or failed for good)."),
		givenBack:        counter("ordered_claimed_ahead_given_back_total", "Jobs claimed ahead of the handler slots that waited too long for one and went back to the queue unrun (attempt not counted)."),
		jobDuration: histogram("ordered_job_duration_seconds",
			"Handler run time, up to its return (a TxHandlerFunc's completion and commit are not included).", longBuckets),
		claimDuration: histogram("ordered_claim_duration_seconds", "Claim statement round trip.", latencyBuckets),
		completionDuration: histogram("ordered_completion_duration_seconds",
			"From a handler's return to its job's completion committed: a HandlerFunc's waits for the batch in flight, a TxHandlerFunc's is its CompleteTx and commit.", latencyBuckets),
		enqueueToStart: histogram("ordered_enqueue_to_start_seconds", "From enqueue to the first attempt's claim, by the database clock, once a job: when the attempt runs (a job given back unrun is claimed again).", longBuckets),
		queue: &queueGauges{
			jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
				Name: "ordered_jobs", Help: "Jobs by status (queued, running, done, failed; blocked: failed and holding its key), as of the last maintenance pass." + queueWide,
				ConstLabels: labels,
			}, []string{"status"}),
			oldestReady:   gauge("ordered_oldest_ready_job_age_seconds", "How long the oldest claimable job has waited, as of the last maintenance pass."),
			blockedKeys:   gauge("ordered_blocked_keys", "Keys held by a blocked job, as of the last maintenance pass."),
			expiredLeases: gauge("ordered_expired_leases", "Running jobs whose lease has expired, as of the last maintenance pass."),
			countedAt:     gauge("ordered_jobs_counted_timestamp_seconds", "When the counts behind the queue-wide gauges were taken (Unix time)."),
			gapKeys:       gauge("ordered_gap_keys", "Contiguous keys waiting on a gap (a missing seq), as of the last maintenance pass."),
			gapBlocked:    gauge("ordered_gap_blocked_keys", "Contiguous keys whose gap policy blocked them for an operator, as of the last maintenance pass."),
			oldestGap:     gauge("ordered_oldest_gap_age_seconds", "How long the oldest open gap has held its key (0: none), as of the last maintenance pass."),
		},
	}
	if reg != nil {
		var err error
		m.claims = register(reg, m.claims, &err)
		m.completions = register(reg, m.completions, &err)
		m.retries = register(reg, m.retries, &err)
		m.failures = register(reg, m.failures, &err)
		m.expiredRecovered = register(reg, m.expiredRecovered, &err)
		m.lostOwnership = register(reg, m.lostOwnership, &err)
		m.timeouts = register(reg, m.timeouts, &err)
		m.givenBack = register(reg, m.givenBack, &err)
		m.jobDuration = register(reg, m.jobDuration, &err)
		m.claimDuration = register(reg, m.claimDuration, &err)
		m.completionDuration = register(reg, m.completionDuration, &err)
		m.enqueueToStart = register(reg, m.enqueueToStart, &err)
		m.queue = register(reg, m.queue, &err)
		if err != nil {
			return nil, fmt.Errorf("WorkerConfig.MetricsLabels must be valid and have the same names in every worker on one Registerer: %w", err)
		}
	}
	// Both decisions are exported from the start, so that a rate over them is defined at 0.
	m.failures.WithLabelValues(policy.Block.String())
	m.failures.WithLabelValues(policy.Skip.String())
	return m, nil
}

// register registers c, or returns the collector already registered under its name.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if *errp == nil {
			*errp = err
		}
	}
	return c
}

// observeStats sets the queue-wide gauges to the counts of schema's queue. Gauges that show
// another queue already are set all the same, and the worker warns once: two queues' workers
// share them (the same Registerer and MetricsLabels), so each overwrites the other's counts.
func (m *metrics) observeStats(log *slog.Logger, schema string, s Stats) {
	g := m.queue
	if other := g.claimFor(schema); other != "" && m.warnedShared.CompareAndSwap(false, true) {
		log.Warn("ordered: the metrics of two queues overwrite each other: give each queue's workers their own WorkerConfig.MetricsLabels",
			"schema", schema, "other_schema", other)
	}
	g.jobs.WithLabelValues("queued").Set(float64(s.Queued))
	g.jobs.WithLabelValues("running").Set(float64(s.Running))
	g.jobs.WithLabelValues("done").Set(float64(s.Done))
	g.jobs.WithLabelValues("failed").Set(float64(s.Failed))
	g.jobs.WithLabelValues("blocked").Set(float64(s.Blocked))
	g.oldestReady.Set(s.OldestReady.Seconds())
	g.blockedKeys.Set(float64(s.BlockedKeys))
	g.expiredLeases.Set(float64(s.ExpiredLeases))
	g.countedAt.Set(float64(s.CountedAt.UnixNano()) / 1e9)
	g.gapKeys.Set(float64(s.GapKeys))
	g.gapBlocked.Set(float64(s.GapBlockedKeys))
	g.oldestGap.Set(s.OldestGap.Seconds())
}
