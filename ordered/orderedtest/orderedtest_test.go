package orderedtest_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/policy"
)

// shortly is ctx for a WaitDrained that must not succeed: long enough for a few looks at the
// queue on a busy machine, so that its error says what it saw.
func shortly(t *testing.T, ctx context.Context) context.Context {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Two queues are two schemas: one's jobs are invisible to the other.
func TestNewQueuesAreSeparate(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	a, b := orderedtest.New(t), orderedtest.New(t)
	require.NotEqual(t, a.Schema, b.Schema)
	_, err := a.Client(t, nil).Enqueue(ctx, ordered.Event{Key: "k", Seq: 1})
	require.NoError(t, err)
	jobs, err := b.Jobs(ctx)
	require.NoError(t, err)
	require.Empty(t, jobs)

	// URL selects the same schema, for another process.
	conn, err := pgx.Connect(ctx, a.URL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	jobs, err = orderedtest.Jobs(ctx, conn)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
}

// Client takes the config given.
func TestClientUsesConfig(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	c := q.Client(t, &ordered.Config{MaxAttempts: 3})
	require.Equal(t, 3, c.Config().MaxAttempts)
}

// WaitDrained returns only once the worker has run every job it can, and reports the jobs
// failed for good and those held behind a blocked key.
func TestWaitDrainedWaitsForTheWorker(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	q := orderedtest.New(t)
	c := q.Client(t, &ordered.Config{Policy: policy.ByKeyPrefix(policy.Skip, map[string]policy.Decision{"pay-": policy.Block})})

	var events []ordered.Event
	for s := range 5 {
		events = append(events,
			ordered.Event{Key: "ok", Seq: int64(s)},
			ordered.Event{Key: "pay-1", Seq: int64(s)},
			ordered.Event{Key: "note-1", Seq: int64(s)})
	}
	_, err := c.EnqueueMany(ctx, events)
	require.NoError(t, err)

	// Not drained while nothing works the queue.
	_, err = q.WaitDrained(shortly(t, ctx))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "15 queued")

	started := make(chan struct{})
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	w, err := c.NewWorker(ordered.HandlerFunc(func(ctx context.Context, job *ordered.Job) error {
		if job.Key == "ok" && job.Seq == 4 {
			close(started)
			<-release // the queue is not drained while this runs
		}
		if job.Seq == 2 && job.Key != "ok" {
			return ordered.Permanent(errors.New("poison"))
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 4, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { require.NoError(t, w.Stop(context.Background())) })
	t.Cleanup(unblock) // first: a failed assertion must not leave the handler, and Stop, waiting

	<-started
	_, err = q.WaitDrained(shortly(t, ctx))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "1 jobs running")
	unblock()

	d, err := q.WaitDrained(ctx)
	require.NoError(t, err)
	// ok: 5 done; note-1: 4 done, seq 2 failed (skip); pay-1: seqs 0 and 1 done, 2 blocks, 3 and 4 held.
	require.Equal(t, 11, d.Done)
	require.Equal(t, 2, d.Held)
	require.Len(t, d.Failed, 2)
	require.Equal(t, "note-1", d.Failed[0].Key)
	require.False(t, d.Failed[0].Blocking)
	require.Equal(t, "pay-1", d.Failed[1].Key)
	require.True(t, d.Failed[1].Blocking)
	require.EqualValues(t, 2, d.Failed[1].Seq)
	require.Equal(t, "poison", d.Failed[1].LastError)
}

// A job waiting out its retry delay keeps the queue from being drained.
func TestWaitDrainedWaitsForRetries(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	q := orderedtest.New(t)
	c := q.Client(t, nil)
	_, err := c.Enqueue(ctx, ordered.Event{Key: "k", Seq: 1})
	require.NoError(t, err)
	jobs, err := c.Claim(ctx, 1)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	_, err = c.RetryAfter(ctx, jobs[0], time.Hour, errors.New("later"))
	require.NoError(t, err)

	_, err = q.WaitDrained(shortly(t, ctx))
	require.ErrorContains(t, err, "0 jobs running and 1 queued")
}

// Jobs gives every job's final state by key and seq, and with them history.Check finds a run
// clean, or the job a test lost.
func TestJobsMakeAHistory(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	q := orderedtest.New(t)
	c := q.Client(t, &ordered.Config{Policy: policy.Always(policy.Skip)})

	var sent []history.ID
	var events []ordered.Event
	for _, key := range []string{"b", "a"} {
		for s := 3; s >= 1; s-- {
			events = append(events, ordered.Event{Key: key, Seq: int64(s)})
			sent = append(sent, history.ID{Key: key, Seq: int64(s)})
		}
	}
	_, err := c.EnqueueMany(ctx, events)
	require.NoError(t, err)

	var effects []history.Effect
	for n := int64(0); ; n++ {
		jobs, err := c.Claim(ctx, 1)
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		j := jobs[0]
		if j.Key == "b" && j.Seq == 2 {
			_, err := c.Fail(ctx, j, errors.New("poison"))
			require.NoError(t, err)
			continue
		}
		require.NoError(t, c.Complete(ctx, j))
		effects = append(effects, history.Effect{ID: history.ID{Key: j.Key, Seq: j.Seq}, ClaimVersion: j.ClaimVersion, Order: n})
	}

	jobs, err := q.Jobs(ctx)
	require.NoError(t, err)
	var got []string
	for _, j := range jobs {
		got = append(got, j.ID.String()+" "+j.Status)
		require.False(t, j.FinishedAt.IsZero(), "%s has no finish time", j.ID)
	}
	require.Equal(t, []string{"a/1 done", "a/2 done", "a/3 done", "b/1 done", "b/2 failed", "b/3 done"}, got)

	h := history.History{Enqueued: sent, Jobs: jobs, Effects: effects, ExpectedFailures: []history.ID{{Key: "b", Seq: 2}}}
	r := history.Check(h)
	require.True(t, r.Clean(true), "%v", r.Problems)
	require.Equal(t, 5, r.Completed)

	// An event the test sent but the queue never had is lost.
	h.Enqueued = append(h.Enqueued, history.ID{Key: "c", Seq: 1})
	r = history.Check(h)
	require.Equal(t, 1, r.Lost)
}
