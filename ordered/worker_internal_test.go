package ordered

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/testdb"
)

func TestPrefetchIsWhatTheSlotsFinishDuringAClaim(t *testing.T) {
	for _, tc := range []struct {
		name        string
		workers     int
		claim, slot time.Duration
		want        int
	}{
		{"nothing measured", 8, 0, 0, 0},
		{"no claim measured", 8, 0, time.Millisecond, 0},
		{"no slot measured", 8, time.Millisecond, 0, 0},
		{"handlers much slower than a claim", 64, time.Millisecond, 100 * time.Millisecond, 0},
		{"handlers a little slower than a claim", 8, 1300 * time.Microsecond, 5 * time.Millisecond, 0},
		{"handlers as slow as a claim", 8, time.Millisecond, time.Millisecond, 0},
		{"handlers a little quicker than a claim: two a slot", 8, 1300 * time.Microsecond, time.Millisecond, 16},
		{"handlers a quarter of a claim", 8, 2 * time.Millisecond, 500 * time.Microsecond, 32},
		{"no-op handlers: a claim's worth", 8, 1700 * time.Microsecond, 20 * time.Microsecond, ClaimBatchMax},
		{"one slot", 1, time.Millisecond, 300 * time.Microsecond, 4},
		{"more slots than a claim: one a slot at most", 1000, time.Millisecond, time.Microsecond, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, prefetchFor(tc.workers, tc.claim, tc.slot))
		})
	}
}

func TestSlotWaitMaxIsFourClaimsOrTheMinimum(t *testing.T) {
	require.Equal(t, slotWaitMin, slotWaitMax(0), "no claim measured")
	require.Equal(t, slotWaitMin, slotWaitMax(2*time.Millisecond))
	require.Equal(t, 80*time.Millisecond, slotWaitMax(20*time.Millisecond))
}

func TestRaiseOnlyRaises(t *testing.T) {
	var avg atomic.Int64
	observe(&avg, time.Millisecond)
	raise(&avg, 500*time.Microsecond)
	require.Equal(t, int64(time.Millisecond), avg.Load())
	raise(&avg, 60*time.Millisecond)
	require.Equal(t, int64(60*time.Millisecond), avg.Load())
}

func TestObserveMovesOneEighthTowardTheSample(t *testing.T) {
	var avg atomic.Int64
	observe(&avg, 800*time.Microsecond)
	require.Equal(t, int64(800*time.Microsecond), avg.Load(), "the first sample sets the average")
	observe(&avg, 400*time.Microsecond)
	require.Equal(t, int64(750*time.Microsecond), avg.Load())
	observe(&avg, 8750*time.Microsecond)
	require.Equal(t, int64(1750*time.Microsecond), avg.Load())
}

// A completion batch that fails falls back to completing its jobs one at a time, all within
// one settleTimeout: while the database does not answer (here an open enqueue transaction
// holds the keys), Stop waits for each batch and one settleTimeout more, not one a job.
func TestFailedBatchFallsBackWithinOneSettleTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := testdb.New(t)
	c, err := NewClient(q.Pool, nil)
	require.NoError(t, err)
	const jobs = 20
	var first, held []Event
	for i := range jobs {
		key := fmt.Sprintf("k%d", i)
		first = append(first, Event{Key: key, Seq: 1})
		held = append(held, Event{Key: key, Seq: 2})
	}
	_, err = c.EnqueueMany(ctx, first)
	require.NoError(t, err)
	tx, err := q.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = c.EnqueueManyTx(ctx, tx, held)
	require.NoError(t, err)

	var ran atomic.Int64
	w, err := c.NewWorker(HandlerFunc(func(context.Context, *Job) error {
		ran.Add(1)
		return nil
	}), &WorkerConfig{Workers: jobs, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	const settle = time.Second
	w.settleTimeout = settle
	require.NoError(t, w.Start(ctx))
	require.Eventually(t, func() bool { return ran.Load() == jobs }, 10*time.Second, 10*time.Millisecond)
	start := time.Now()
	require.NoError(t, w.Stop(ctx))
	// Two batches in flight time out, then fall back, then the next batch (the rest of the
	// jobs) does the same: four settleTimeouts, against one a job without the one deadline.
	require.Less(t, time.Since(start), 7*settle, "Stop waited one settleTimeout a job of a failed batch")
}

// A batch handler that runs longer than settleTimeout and fails has its failure recorded:
// the settling's deadline runs from when it begins, not from the claim.
func TestLongBatchHandlerFailureIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := testdb.New(t)
	c, err := NewClient(q.Pool, &Config{Lease: time.Minute})
	require.NoError(t, err)
	res, err := c.EnqueueMany(ctx, []Event{{Key: "k", Seq: 1}, {Key: "k", Seq: 2}})
	require.NoError(t, err)
	const settle = 2 * time.Second // room for the settling's statements on a busy machine
	var runs atomic.Int64
	w, err := c.NewBatchWorker(func(ctx context.Context, jobs []*Job) (int, error) {
		if runs.Add(1) > 1 {
			return len(jobs), nil
		}
		<-time.After(3 * settle) // longer than settleTimeout
		return 0, fmt.Errorf("boom")
	}, &WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond, BatchSize: 2})
	require.NoError(t, err)
	w.settleTimeout = settle
	require.NoError(t, w.Start(ctx))
	defer func() { require.NoError(t, w.Stop(ctx)) }()
	require.Eventually(t, func() bool {
		var status string
		var attempts int
		err := q.Pool.QueryRow(ctx, `SELECT status, attempts FROM ordered_jobs_now WHERE id = $1`, res[0].ID).Scan(&status, &attempts)
		return err == nil && status == "done" && attempts == 2
	}, 30*time.Second, 20*time.Millisecond, "the failed first attempt was recorded as a retry, and the job ran again")
}

// A handler that JobTimeout cut short has used its attempt, even when StopAndCancel comes
// while it winds down (an exec command's kill grace): the job is retried with the attempt
// counted, not given back as a stop's, or a job that always hangs would never run out of
// attempts through restarts.
func TestJobTimeoutThenStopAndCancelCountsTheAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := testdb.New(t)
	c, err := NewClient(q.Pool, &Config{Lease: time.Minute})
	require.NoError(t, err)
	res, err := c.EnqueueMany(ctx, []Event{{Key: "k", Seq: 1}})
	require.NoError(t, err)
	timedOut, release := make(chan struct{}), make(chan struct{})
	w, err := c.NewWorker(HandlerFunc(func(ctx context.Context, _ *Job) error {
		<-ctx.Done()
		close(timedOut)
		<-release
		return ctx.Err()
	}), &WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond, JobTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	<-timedOut
	stopped := make(chan error, 1)
	go func() { stopped <- w.StopAndCancel(ctx) }()
	<-w.workCtx.Done() // StopAndCancel has cancelled the jobs
	close(release)
	require.NoError(t, <-stopped)
	var status, lastError string
	var attempts int
	require.NoError(t, q.Pool.QueryRow(ctx, `SELECT status, attempts, last_error FROM ordered_jobs_now WHERE id = $1`,
		res[0].ID).Scan(&status, &attempts, &lastError))
	require.Equal(t, "queued", status)
	require.Equal(t, 1, attempts, "the timed-out attempt was given back as a stop's, not counted")
	require.Equal(t, "ordered: job timed out after 100ms: context deadline exceeded", lastError)
}
