package ordered_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// Archive deletes done jobs in bounded batches, keeps failed ones, and a re-sent archived
// event is late, not run again.
func TestArchiveDeletesDoneJobsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for k := range 5 {
		b.enqueue(t, fmt.Sprintf("k%d", k), 1, 2)
	}
	for range 5 {
		j := b.claimOne(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	failed := b.claimOne(t, b.client)
	_, err := b.client.Fail(b.ctx, failed, errors.New("poison"))
	require.NoError(t, err)

	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 0, b.countStatus(t, "done"))
	require.Equal(t, 1, b.countStatus(t, "blocked"))

	// Nothing recent is archived while a retention applies.
	j := b.claimOne(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{OlderThan: 1e12})
	require.NoError(t, err)
	require.Zero(t, n)

	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k0", Seq: 1})
	var late *ordered.LateEventError
	require.ErrorAs(t, err, &late)
	require.Equal(t, int64(-1), late.LaterSeq)
}

// An event at or below a key's archived history is late because of the archive, also while a
// later job of the key waits unstarted: the error names the archive, not that job.
func TestEnqueueAtOrBelowArchivedHistoryNamesTheArchive(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2)
	j := b.claimOne(t, b.client)
	require.EqualValues(t, 1, j.Seq)
	require.NoError(t, b.client.Complete(b.ctx, j))
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	for _, seq := range []int64{1, 0} {
		_, err = b.client.Enqueue(b.ctx, validEvent("k", seq))
		requireLateEvent(t, err, "k", seq, -1)
		require.Contains(t, err.Error(), "archived history")
	}
	require.EqualValues(t, 1, b.jobRowCount(t), "k/2 alone is left, queued")
}

// Beyond MaxBacklog queued jobs, enqueue fails with ErrBacklogFull and writes nothing.
func TestAdmissionLimitRefusesBeyondMaxBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.newClient(t, &ordered.Config{MaxBacklog: 5})
	_, err := c.EnqueueMany(b.ctx, []ordered.Event{{Key: "a", Seq: 1}, {Key: "a", Seq: 2}, {Key: "b", Seq: 1}})
	require.NoError(t, err)
	_, err = c.EnqueueMany(b.ctx, []ordered.Event{{Key: "c", Seq: 1}, {Key: "c", Seq: 2}, {Key: "c", Seq: 3}})
	require.ErrorIs(t, err, ordered.ErrBacklogFull)
	require.Equal(t, 3, b.countStatus(t, "queued"))
	_, err = c.EnqueueMany(b.ctx, []ordered.Event{{Key: "c", Seq: 1}, {Key: "c", Seq: 2}})
	require.NoError(t, err)
	_, err = c.Enqueue(b.ctx, ordered.Event{Key: "d", Seq: 1})
	require.ErrorIs(t, err, ordered.ErrBacklogFull)

	// Draining makes room again.
	j := b.claimOne(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))
	_, err = c.Enqueue(b.ctx, ordered.Event{Key: "d", Seq: 1})
	require.NoError(t, err)
}

// The gauges' counts read the whole table, so the workers of a queue share one count per
// interval: younger counts are returned as they are, and a caller that finds another one
// counting takes the last counts instead of waiting or counting again.
func TestSharedStatsCountOncePerInterval(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	shared := func(ctx context.Context, maxAge string) (queued int64, at time.Time) {
		t.Helper()
		require.NoError(t, b.pool.QueryRow(ctx,
			`SELECT queued, counted_at FROM ordered_stats_shared($1::interval)`, maxAge).Scan(&queued, &at))
		return queued, at
	}

	// Never counted, and another caller is at it: no counts yet, and no error.
	locker := b.beginTx(t)
	_, err := locker.Exec(b.ctx, `SELECT 1 FROM ordered_stats FOR UPDATE`)
	require.NoError(t, err)
	stats, err := store.QueueStatsShared(b.ctx, b.pool, 0)
	require.NoError(t, err)
	require.Nil(t, stats.CountedAt)
	require.NoError(t, locker.Rollback(b.ctx))

	b.enqueue(t, "a", 1, 2, 3)
	queued, first := shared(b.ctx, "1 hour")
	require.EqualValues(t, 3, queued, "never counted: counts now")

	b.enqueue(t, "b", 1, 2)
	queued, at := shared(b.ctx, "1 hour")
	require.EqualValues(t, 3, queued, "counts younger than the max age are shared")
	require.Equal(t, first, at)
	queued, at = shared(b.ctx, "0")
	require.EqualValues(t, 5, queued, "older ones are counted anew")
	require.True(t, at.After(first))

	// Another caller is counting: the last counts come back at once.
	tx := b.beginTx(t)
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM ordered_stats FOR UPDATE`)
	require.NoError(t, err)
	b.enqueue(t, "c", 1)
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	queued, _ = shared(ctx, "0")
	require.EqualValues(t, 5, queued)
	require.NoError(t, tx.Rollback(b.ctx))

	// A caller that cannot write (a read-only transaction) gets the last counts too.
	ro, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	var roQueued int64
	require.NoError(t, ro.QueryRow(b.ctx, `SELECT queued FROM ordered_stats_shared('0')`).Scan(&roQueued))
	require.EqualValues(t, 5, roQueued)
	require.NoError(t, ro.Rollback(b.ctx))

	queued, _ = shared(b.ctx, "0")
	require.EqualValues(t, 6, queued)

	// Client.Stats (ordered status) always counts now.
	now, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 6, now.Queued)
}

// A worker's gauges show the shared counts, not a count of its own.
func TestWorkerGaugesShowSharedStats(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1)
	// Counts that stay young for an hour, and that no real count could give.
	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_stats SET queued = 777, blocked_keys = 5,
		counted_at = now() + interval '1 hour'`)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	startWorker(t, b, b.client, ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond, Registerer: reg})
	waitFor(t, 10*time.Second, "queued gauge", func() bool {
		return metricValue(t, reg, "ordered_jobs", "status", "queued") == 777
	})
	require.Equal(t, 5.0, metricValue(t, reg, "ordered_blocked_keys"))
	var countedAt float64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT extract(epoch FROM counted_at)::float8 FROM ordered_stats`).Scan(&countedAt))
	require.InDelta(t, countedAt, metricValue(t, reg, "ordered_jobs_counted_timestamp_seconds"), 0.001)
}
