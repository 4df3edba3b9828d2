package ordered_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
)

// Both decisions of ordered_failures_total are exported from the start, at 0, so that a rate
// or an alert over either is defined before the first failure.
func TestMetricFailuresStartAtZero(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := prometheus.NewRegistry()
	_, err := b.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{Registerer: reg})
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ordered_failures_total Jobs failed for good, by the policy's decision (block or skip).
# TYPE ordered_failures_total counter
ordered_failures_total{decision="block"} 0
ordered_failures_total{decision="skip"} 0
`), "ordered_failures_total"))
}

// A TxHandlerFunc's completion is timed: its CompleteTx and commit, after the handler's code
// returned. A deferred trigger makes the commit take commitTakes.
func TestMetricTxHandlerCompletionIsTimed(t *testing.T) {
	t.Parallel()
	const commitTakes = 300 * time.Millisecond
	b := setup(t, nil)
	_, err := b.pool.Exec(b.ctx, `
		CREATE TABLE slow_commit (key text);
		CREATE FUNCTION slow_commit_sleep() RETURNS trigger LANGUAGE plpgsql
			AS $$ BEGIN PERFORM pg_sleep(0.3); RETURN NULL; END $$;
		CREATE CONSTRAINT TRIGGER slow_commit_at_commit AFTER INSERT ON slow_commit
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit_sleep();`)
	require.NoError(t, err)
	id := b.enqueue(t, "k", 1)[0]
	reg := prometheus.NewRegistry()
	startWorker(t, b, b.client, ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
		_, err := tx.Exec(ctx, `INSERT INTO slow_commit VALUES ($1)`, j.IdempotencyKey())
		return err
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, Registerer: reg})
	waitFor(t, 20*time.Second, "job done", func() bool { return b.jobStatus(t, id) == "done" })
	waitFor(t, 10*time.Second, "completion counted", func() bool {
		return metricValue(t, reg, "ordered_completions_total") == 1
	})
	completion := histogramOf(t, reg, "ordered_completion_duration_seconds")
	require.EqualValues(t, 1, completion.GetSampleCount())
	require.GreaterOrEqual(t, completion.GetSampleSum(), commitTakes.Seconds(), "the commit is part of the completion")
	require.EqualValues(t, 1, histogramOf(t, reg, "ordered_job_duration_seconds").GetSampleCount())
}

// Two queues (two schemas) on one Registerer, told apart by MetricsLabels: each queue's
// counters and queue-wide gauges are its own. Workers with the same labels share them; labels
// that cannot live beside the others are refused with an error that says what to do.
func TestMetricsLabelsTellTwoQueuesApartOnOneRegisterer(t *testing.T) {
	t.Parallel()
	a, c := setup(t, nil), setup(t, nil)
	reg := prometheus.NewRegistry()
	ok := ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil })
	cfg := func(queue string) *ordered.WorkerConfig {
		return &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond,
			Registerer: reg, MetricsLabels: prometheus.Labels{"queue": queue}}
	}
	a.enqueue(t, "k", 1, 2, 3)
	c.enqueue(t, "k", 1)
	startWorker(t, a, a.client, ok, cfg("a"))
	startWorker(t, a, a.newClient(t, nil), ok, cfg("a")) // a second worker of queue a shares its metrics
	startWorker(t, c, c.client, ok, cfg("c"))
	waitFor(t, 20*time.Second, "each queue's done gauge", func() bool {
		return metricValue(t, reg, "ordered_jobs", "queue", "a", "status", "done") == 3 &&
			metricValue(t, reg, "ordered_jobs", "queue", "c", "status", "done") == 1 &&
			metricValue(t, reg, "ordered_completions_total", "queue", "a") == 3 &&
			metricValue(t, reg, "ordered_completions_total", "queue", "c") == 1
	})
	require.Equal(t, 3.0, metricValue(t, reg, "ordered_completions_total", "queue", "a"))
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_completions_total", "queue", "c"))
	n, err := testutil.GatherAndCount(reg, "ordered_completions_total")
	require.NoError(t, err)
	require.Equal(t, 2, n)

	_, err = c.client.NewWorker(ok, &ordered.WorkerConfig{Registerer: reg})
	require.ErrorContains(t, err, "ordered: register metrics: WorkerConfig.MetricsLabels must be valid and have the same names in every worker on one Registerer: ")
	_, err = c.client.NewWorker(ok, &ordered.WorkerConfig{Registerer: reg, MetricsLabels: prometheus.Labels{"status": "x"}})
	require.EqualError(t, err, `ordered: register metrics: WorkerConfig.MetricsLabels: "status" is a label of ordered's own metrics`)
}

// Two queues' workers that share a Registerer without labels of their own would show each
// other's counts in the same gauges: the worker says so in its log.
func TestMetricsOfTwoQueuesWithoutLabelsWarn(t *testing.T) {
	t.Parallel()
	logger, logs := testLogger(t)
	a, c := setup(t, &ordered.Config{Logger: logger}), setup(t, &ordered.Config{Logger: logger})
	reg := prometheus.NewRegistry()
	ok := ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil })
	cfg := &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond, Registerer: reg}
	startWorker(t, a, a.client, ok, cfg)
	startWorker(t, c, c.client, ok, cfg)
	waitFor(t, 20*time.Second, "the warning", func() bool {
		return strings.Contains(logs.String(), "the metrics of two queues overwrite each other")
	})
	require.Equal(t, 1, strings.Count(logs.String(), "overwrite each other"), "one worker warns, once:\n%s", logs)
}

// The histograms of waits and handler runs reach an hour; the queue-wide gauges say that every
// worker reports the same value.
func TestMetricsDescribeThemselves(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := prometheus.NewRegistry()
	startWorker(t, b, b.client, ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond, Registerer: reg})
	waitFor(t, 20*time.Second, "the first counts", func() bool {
		n, err := testutil.GatherAndCount(reg, "ordered_jobs")
		require.NoError(t, err)
		return n == 5
	})
	for _, name := range []string{"ordered_enqueue_to_start_seconds", "ordered_job_duration_seconds"} {
		buckets := histogramOf(t, reg, name).GetBucket()
		require.GreaterOrEqual(t, buckets[len(buckets)-1].GetUpperBound(), time.Hour.Seconds(), name)
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	help := map[string]string{}
	for _, f := range families {
		help[f.GetName()] = f.GetHelp()
	}
	for _, name := range []string{"ordered_jobs", "ordered_oldest_ready_job_age_seconds", "ordered_blocked_keys",
		"ordered_expired_leases", "ordered_jobs_counted_timestamp_seconds"} {
		require.Contains(t, help[name], "Queue-wide", name)
		require.Contains(t, help[name], "aggregate with max, not sum", name)
	}
}

// histogramOf returns the histogram named name in reg (the first, if labels tell several apart).
func histogramOf(t *testing.T, reg *prometheus.Registry, name string) *dto.Histogram {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) > 0 {
			return f.GetMetric()[0].GetHistogram()
		}
	}
	t.Fatalf("no histogram %s", name)
	return nil
}
