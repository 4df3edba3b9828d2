package ordered_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// A handler that runs past JobTimeout has its context cancelled with a cause that wraps
// ErrJobTimeout; the error it returns then is a failed attempt, recorded with the cause, so a
// job that always hangs fails for good once its attempts are spent, and its key's next job
// waits (block policy) without ever starting.
func TestJobTimeoutFailsAnAttemptOfAHandlerThatRunsPastIt(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Backoff: policy.Exponential{Base: time.Millisecond, Max: time.Millisecond}})
	reg := prometheus.NewRegistry()
	ids := b.enqueue(t, "k", 1, 2)
	var causes sync.Map // attempt -> the handler's context's cause
	var laterRan atomic.Bool
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		if j.Seq == 2 {
			laterRan.Store(true)
			return nil
		}
		<-ctx.Done()
		causes.Store(j.Attempt, context.Cause(ctx))
		return ctx.Err()
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaxAttempts: 2, JobTimeout: 200 * time.Millisecond, Registerer: reg})

	waitFor(t, 20*time.Second, "the job blocked", func() bool { return b.jobStatus(t, ids[0]) == "blocked" })
	require.Equal(t, 2, b.job(t, ids[0]).Attempts)
	require.Equal(t, "ordered: job timed out after 200ms: context deadline exceeded", b.lastError(t, ids[0]))
	for attempt := 1; attempt <= 2; attempt++ {
		cause, ok := causes.Load(attempt)
		require.True(t, ok, "attempt %d ran", attempt)
		require.ErrorIs(t, cause.(error), ordered.ErrJobTimeout)
	}
	require.Equal(t, "queued", b.jobStatus(t, ids[1]))
	require.False(t, laterRan.Load(), "the key's next job started behind a blocked one")
	waitFor(t, 20*time.Second, "the metrics", func() bool {
		return metricValue(t, reg, "ordered_failures_total", "decision", "block") == 1
	})
	require.Equal(t, 2.0, metricValue(t, reg, "ordered_job_timeouts_total"))
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_retries_total"))
}

// What a handler returns decides: one that finishes its work after the timeout and returns
// nil completes its job, and a quick one never meets the timeout.
func TestJobTimeoutLeavesTheOutcomeToTheHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := prometheus.NewRegistry()
	ids := b.enqueue(t, "k", 1, 2)
	var quickCtxErr atomic.Pointer[error]
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		if j.Seq == 1 {
			<-ctx.Done() // the work goes on past the timeout and succeeds
			return nil
		}
		err := ctx.Err()
		quickCtxErr.Store(&err)
		return nil
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, JobTimeout: 2 * time.Second, Registerer: reg})
	waitFor(t, 20*time.Second, "both jobs done", func() bool {
		return b.jobStatus(t, ids[0]) == "done" && b.jobStatus(t, ids[1]) == "done"
	})
	require.Equal(t, 1, b.job(t, ids[0]).Attempts)
	require.Equal(t, 1, b.job(t, ids[1]).Attempts)
	require.NoError(t, *quickCtxErr.Load(), "a quick handler's context was cancelled")
	require.Equal(t, 0.0, metricValue(t, reg, "ordered_job_timeouts_total"))
}

// A batch handler's call is bounded as a whole: the jobs it reports finished are completed,
// the next one's attempt fails with the timeout, also when the handler returns no error (a
// batch that never finishes in time must spend attempts), and the rest go back unrun, their
// attempts not counted.
func TestJobTimeoutBoundsABatchHandlersCall(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Backoff: policy.Exponential{Base: time.Millisecond, Max: time.Millisecond}})
	reg := prometheus.NewRegistry()
	b.enqueue(t, "k", 1, 2, 3)
	var calls atomic.Int32
	var firstCause atomic.Pointer[error]
	startBatchWorker(t, b, b.client, func(ctx context.Context, jobs []*ordered.Job) (int, error) {
		if calls.Add(1) > 1 {
			return len(jobs), nil
		}
		<-ctx.Done()
		cause := context.Cause(ctx)
		firstCause.Store(&cause)
		return 1, nil
	}, &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, BatchSize: 3, JobTimeout: 200 * time.Millisecond, Registerer: reg})
	waitFor(t, 20*time.Second, "the key drained", func() bool {
		return !slices.ContainsFunc(b.jobsOf(t, "k"), func(j string) bool { return !strings.Contains(j, ":done:") })
	})
	require.Equal(t, []string{"1:done:1", "2:done:2", "3:done:1"}, b.jobsOf(t, "k"))
	ids := b.enqueue(t, "k", 2) // a duplicate: the existing job's id
	require.Equal(t, "ordered: job timed out after 200ms", b.lastError(t, ids[0]))
	require.True(t, errors.Is(*firstCause.Load(), ordered.ErrJobTimeout))
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_job_timeouts_total"))
}

func TestJobTimeoutMustNotBeNegative(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{JobTimeout: -time.Second})
	require.EqualError(t, err, "ordered: WorkerConfig.JobTimeout -1s must not be negative (0: none)")
}
