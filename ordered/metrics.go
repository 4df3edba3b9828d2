package ordered

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a worker's Prometheus collectors. Keys are never labels: their number is
// unbounded.
type metrics struct {
	claims             prometheus.Counter
	completions        prometheus.Counter
	retries            prometheus.Counter
	failures           *prometheus.CounterVec
	expiredRecovered   prometheus.Counter
	lostOwnership      prometheus.Counter
	givenBack          prometheus.Counter
	jobDuration        prometheus.Histogram
	claimDuration      prometheus.Histogram
	completionDuration prometheus.Histogram
	enqueueToStart     prometheus.Histogram

	jobs          *prometheus.GaugeVec
	oldestReady   prometheus.Gauge
	blockedKeys   prometheus.Gauge
	expiredLeases prometheus.Gauge
	countedAt     prometheus.Gauge
}

var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// newMetrics creates the collectors and registers them on reg (nil: not registered). Several
// workers may share one registry: they then share the collectors.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		claims: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordered_claims_total", Help: "Jobs claimed, recovered leases included.",
		}),
		completions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordered_completions_total", Help: "Jobs completed.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordered_retries_total", Help: "Failed attempts released for a retry.",
		}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ordered_failures_total", Help: "Jobs failed for good, by the policy's decision (block or skip).",
		}, []string{"decision"}),
		expiredRecovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordered_expired_leases_recovered_total", Help: "Jobs claimed again after their previous claim's lease expired.",
		}),
		lostOwnership: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordered_lost_ownership_total", Help: "Attempts whose claim was lost (lease expired or job reclaimed); their outcome was not acknowledged.",
		}),
		givenBack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ordered_claimed_ahead_given_back_total", Help: "Jobs claimed ahead of the handler slots that waited too long for one and went back to the queue unrun (attempt not counted).",
		}),
		jobDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordered_job_duration_seconds", Help: "Handler run time.", Buckets: latencyBuckets,
		}),
		claimDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordered_claim_duration_seconds", Help: "Claim statement round trip.", Buckets: latencyBuckets,
		}),
		completionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordered_completion_duration_seconds", Help: "From a handler's return to its job's completion committed (batched completions wait for the batch in flight).", Buckets: latencyBuckets,
		}),
		enqueueToStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "ordered_enqueue_to_start_seconds", Help: "From enqueue to the first attempt's claim, by the database clock.", Buckets: latencyBuckets,
		}),
		jobs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ordered_jobs", Help: "Jobs by status (queued, running, done, failed; blocked: failed and holding its key), as of the last maintenance pass.",
		}, []string{"status"}),
		oldestReady: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordered_oldest_ready_job_age_seconds", Help: "How long the oldest claimable job has waited, as of the last maintenance pass.",
		}),
		blockedKeys: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordered_blocked_keys", Help: "Keys held by a blocked job, as of the last maintenance pass.",
		}),
		expiredLeases: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordered_expired_leases", Help: "Running jobs whose lease has expired, as of the last maintenance pass.",
		}),
		countedAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ordered_jobs_counted_timestamp_seconds", Help: "When the counts behind the job gauges were taken (Unix time); the workers of a queue share them.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.claims = register(reg, m.claims, &err)
	m.completions = register(reg, m.completions, &err)
	m.retries = register(reg, m.retries, &err)
	m.failures = register(reg, m.failures, &err)
	m.expiredRecovered = register(reg, m.expiredRecovered, &err)
	m.lostOwnership = register(reg, m.lostOwnership, &err)
	m.givenBack = register(reg, m.givenBack, &err)
	m.jobDuration = register(reg, m.jobDuration, &err)
	m.claimDuration = register(reg, m.claimDuration, &err)
	m.completionDuration = register(reg, m.completionDuration, &err)
	m.enqueueToStart = register(reg, m.enqueueToStart, &err)
	m.jobs = register(reg, m.jobs, &err)
	m.oldestReady = register(reg, m.oldestReady, &err)
	m.blockedKeys = register(reg, m.blockedKeys, &err)
	m.expiredLeases = register(reg, m.expiredLeases, &err)
	m.countedAt = register(reg, m.countedAt, &err)
	return m, err
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

func (m *metrics) observeStats(s Stats) {
	m.jobs.WithLabelValues("queued").Set(float64(s.Queued))
	m.jobs.WithLabelValues("running").Set(float64(s.Running))
	m.jobs.WithLabelValues("done").Set(float64(s.Done))
	m.jobs.WithLabelValues("failed").Set(float64(s.Failed))
	m.jobs.WithLabelValues("blocked").Set(float64(s.Blocked))
	m.oldestReady.Set(s.OldestReady.Seconds())
	m.blockedKeys.Set(float64(s.BlockedKeys))
	m.expiredLeases.Set(float64(s.ExpiredLeases))
	m.countedAt.Set(float64(s.CountedAt.UnixNano()) / 1e9)
}

func seconds(d time.Duration) float64 { return d.Seconds() }
