package ordered_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
	"github.com/orderedq/ordered/policy"
)

// Stats counts jobs by status, blocked apart from failed, and the keys the blocked jobs hold:
// a key can hold two blocked jobs once a forced replay of an earlier job fails behind one.
func TestStatsCountBlockedApartFromFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, blockPolicyCfg())
	skipper := b.newClient(t, skipPolicyCfg())
	failHead := func(c *ordered.Client, key string, seq int64, want ordered.Outcome) *ordered.Job {
		t.Helper()
		j := b.claimOne(t, c)
		require.Equal(t, key, j.Key)
		require.Equal(t, seq, j.Seq)
		out, err := c.Fail(b.ctx, j, errors.New("no"))
		require.NoError(t, err)
		require.Equal(t, want, out)
		return j
	}

	b.enqueue(t, "b", 1, 2)
	failHead(b.client, "b", 1, ordered.OutcomeBlocked) // b/2 stays queued behind it
	b.enqueue(t, "s", 1)
	failHead(skipper, "s", 1, ordered.OutcomeSkipped)
	b.enqueue(t, "r", 1, 2)
	r1 := failHead(skipper, "r", 1, ordered.OutcomeSkipped)
	failHead(b.client, "r", 2, ordered.OutcomeBlocked)
	require.NoError(t, b.client.Replay(b.ctx, r1.ID, ordered.ReplayParams{Force: true}))
	failHead(b.client, "r", 1, ordered.OutcomeBlocked) // r holds two blocked jobs now
	b.enqueue(t, "d", 1)
	require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	b.enqueue(t, "run", 1)
	b.claimOne(t, b.client)
	x := b.enqueue(t, "x", 1)[0]
	b.claimOne(t, b.client)
	b.expireLease(t, x)

	want := ordered.Stats{Queued: 1, Running: 2, Done: 1, Failed: 1, Blocked: 3, BlockedKeys: 2, ExpiredLeases: 1}
	st, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.False(t, st.CountedAt.IsZero())
	st.CountedAt, st.OldestReady = time.Time{}, 0
	require.Equal(t, want, st)

	// The counts the workers share (ordered_stats) have the same shape.
	shared, err := store.QueueStatsShared(b.ctx, b.pool, 0)
	require.NoError(t, err)
	require.Equal(t, store.QueueStats{Queued: 1, Running: 2, Done: 1, Failed: 1, Blocked: 3, BlockedKeys: 2, ExpiredLeases: 1},
		store.QueueStats{Queued: shared.Queued, Running: shared.Running, Done: shared.Done, Failed: shared.Failed,
			Blocked: shared.Blocked, BlockedKeys: shared.BlockedKeys, ExpiredLeases: shared.ExpiredLeases})
}

// A ready job whose run_at is centuries ago has the longest age a Duration holds, not one that
// overflowed to a negative age.
func TestStatsOldestReadyOfACenturiesOldRunAt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 1, RunAt: time.Date(1700, 1, 1, 0, 0, 0, 0, time.UTC)})
	require.NoError(t, err)
	st, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, time.Duration(math.MaxInt64), st.OldestReady)
}

// The ordered_jobs gauge reports blocked jobs under a status of their own, not as failed.
func TestWorkerGaugesShowBlockedApartFromFailed(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Policy: policy.ByKeyPrefix(policy.Block, map[string]policy.Decision{"s-": policy.Skip})})
	b.enqueue(t, "b-1", 1, 2)
	b.enqueue(t, "s-1", 1)
	reg := prometheus.NewRegistry()
	startWorker(t, b, b.client, ordered.HandlerFunc(func(_ context.Context, j *ordered.Job) error {
		return ordered.Permanent(errors.New("no"))
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond, Registerer: reg})
	waitFor(t, 20*time.Second, "blocked and failed gauges", func() bool {
		return metricValue(t, reg, "ordered_jobs", "status", "blocked") == 1 &&
			metricValue(t, reg, "ordered_jobs", "status", "failed") == 1
	})
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_jobs", "status", "queued"))
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_blocked_keys"))
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_failures_total", "decision", "block"))
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_failures_total", "decision", "skip"))
}
