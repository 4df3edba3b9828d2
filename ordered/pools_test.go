package ordered_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// smallPool is a pool of maxConns connections on the test's queue, its sessions named
// appName in pg_stat_activity, closed when the test ends.
func (b *testBundle) smallPool(t *testing.T, maxConns int32, appName string) *pgxpool.Pool {
	t.Helper()
	cfg := b.pool.Config()
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	p, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// Handlers that hold every connection of the client's pool for longer than the lease do not
// starve the worker's lease renewals: each job runs once and is done. Both kinds of handler:
// a TxHandlerFunc's transaction, and a HandlerFunc that queries the same pool. Twice as many
// handlers as connections, so some wait for one while others hold theirs. The lease is long
// enough that only starved renewals lose it, not a busy machine's pauses.
func TestWorkerRenewsLeasesWhileHandlersHoldThePool(t *testing.T) {
	t.Parallel()
	const lease = 6 * time.Second
	// hold keeps one of pool's connections, or tx's, for longer than the lease: the job is
	// lost unless its lease is renewed meanwhile.
	hold := func(ctx context.Context, db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}) error {
		if _, err := db.Exec(ctx, `SELECT 1`); err != nil {
			return err
		}
		select {
		case <-time.After(lease * 3 / 2):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	for _, tc := range []struct {
		name    string
		handler func(pool *pgxpool.Pool, ran func(*ordered.Job)) ordered.Handler
	}{
		{"TxHandlerFunc", func(_ *pgxpool.Pool, ran func(*ordered.Job)) ordered.Handler {
			return ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
				ran(j)
				return hold(ctx, tx)
			})
		}},
		{"HandlerFunc on the pool", func(pool *pgxpool.Pool, ran func(*ordered.Job)) ordered.Handler {
			return ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
				ran(j)
				conn, err := pool.Acquire(ctx)
				if err != nil {
					return err
				}
				defer conn.Release()
				return hold(ctx, conn)
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			const jobs, workers = 8, 8
			logger, _ := testLogger(t)
			small := b.smallPool(t, 4, b.queue.Schema+"_small")
			c, err := ordered.NewClient(small, &ordered.Config{Lease: lease, Logger: logger})
			require.NoError(t, err)
			for i := range jobs {
				b.enqueue(t, fmt.Sprintf("k%d", i), 1)
			}
			var mu sync.Mutex
			runs := map[int64]int{}
			startWorker(t, b, c, tc.handler(small, func(j *ordered.Job) {
				mu.Lock()
				runs[j.ID]++
				mu.Unlock()
			}), &ordered.WorkerConfig{Workers: workers, PollInterval: 50 * time.Millisecond})

			waitFor(t, 3*time.Minute, "every job settled", func() bool {
				var unsettled int
				require.NoError(t, b.pool.QueryRow(b.ctx,
					`SELECT count(*) FROM ordered_jobs_now WHERE status NOT IN ('done', 'failed')`).Scan(&unsettled))
				return unsettled == 0
			})
			rows, err := b.pool.Query(b.ctx, `SELECT id, status, attempts FROM ordered_jobs_now ORDER BY id`)
			require.NoError(t, err)
			type row struct {
				ID       int64
				Status   string
				Attempts int
			}
			got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
			require.NoError(t, err)
			require.Len(t, got, jobs)
			mu.Lock()
			defer mu.Unlock()
			for _, r := range got {
				require.Equal(t, row{ID: r.ID, Status: "done", Attempts: 1}, r, "job %d", r.ID)
				require.Equal(t, 1, runs[r.ID], "handler runs of job %d", r.ID)
			}
		})
	}
}

// The worker's own pool is closed when Stop returns: once the client's pool is closed too, no
// session of that config is left.
func TestWorkerClosesItsPoolAtStop(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	appName := b.queue.Schema + "_stop"
	small := b.smallPool(t, 4, appName)
	c, err := ordered.NewClient(small, nil)
	require.NoError(t, err)
	ids := b.enqueue(t, "a", 1, 2, 3)
	w, err := c.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	waitFor(t, 30*time.Second, "all done", func() bool { return b.jobStatus(t, ids[2]) == "done" })
	sessions := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, appName).Scan(&n))
		return n
	}
	require.Positive(t, sessions())
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, w.Stop(ctx))
	small.Close()
	// A closed connection's backend leaves pg_stat_activity a moment after the client hangs up.
	waitFor(t, 30*time.Second, "no session of the worker's pool left", func() bool { return sessions() == 0 })
}

// A TxHandlerFunc worker with more handlers than its client's pool has connections is
// warned about, once; a HandlerFunc worker is not (it may not use the pool at all).
func TestNewWorkerWarnsOfAPoolSmallerThanItsTxHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	logger, out := testLogger(t)
	c, err := ordered.NewClient(b.smallPool(t, 4, b.queue.Schema+"_warn"), &ordered.Config{Logger: logger})
	require.NoError(t, err)
	tx := ordered.TxHandlerFunc(func(context.Context, pgx.Tx, *ordered.Job) error { return nil })
	plain := ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil })
	const warning = "MaxConns is below WorkerConfig.Workers"

	_, err = c.NewWorker(plain, &ordered.WorkerConfig{Workers: 16})
	require.NoError(t, err)
	_, err = c.NewWorker(tx, &ordered.WorkerConfig{Workers: 4})
	require.NoError(t, err)
	require.NotContains(t, out.String(), warning)

	_, err = c.NewWorker(tx, &ordered.WorkerConfig{Workers: 16})
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(out.String(), warning), out.String())
	require.Contains(t, out.String(), "max_conns=4 workers=16")
}

// Failures that wait for their keys' rows, which a producer's open transaction holds, take
// no more than their place in the worker's pool: the worker's other jobs keep their leases
// (renewed while the failures wait), and once the producer commits the waiting jobs settle.
// Without it, eight failures waiting on the producer took every connection of the worker's
// pool, and the running jobs lost their leases.
func TestWorkerRenewsLeasesWhileFailuresWaitForAProducer(t *testing.T) {
	t.Parallel()
	// Renewals every 3.3s; a starved worker cancels its handlers 7.3s after the claim.
	const lease = 10 * time.Second
	b := setup(t, &ordered.Config{Lease: lease, Policy: policy.Always(policy.Skip)})
	const slow, failing = 2, 8
	for i := range slow {
		b.enqueue(t, fmt.Sprintf("slow%d", i), 1)
	}
	producer, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer func() { _ = producer.Rollback(b.ctx) }()
	for i := range failing {
		b.enqueue(t, fmt.Sprintf("fail%d", i), 1)
		_, err := b.client.EnqueueTx(b.ctx, producer, ordered.Event{Key: fmt.Sprintf("fail%d", i), Seq: 2})
		require.NoError(t, err)
	}

	release := make(chan struct{})
	var cancelled sync.Map
	reg := prometheus.NewRegistry()
	w := startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		if strings.HasPrefix(j.Key, "fail") {
			return ordered.Permanent(fmt.Errorf("poison"))
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			cancelled.Store(j.Key, context.Cause(ctx))
			return ctx.Err()
		}
	}), &ordered.WorkerConfig{Workers: 16, PollInterval: 50 * time.Millisecond, Registerer: reg})

	waitFor(t, time.Minute, "the failures wait for the producer's key rows", func() bool {
		return b.countRows(t, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%ordered_job_fail%'`) > 0
	})
	// A renewal after the failures began to wait, which a starved worker never gets through.
	waitFor(t, time.Minute, "the slow jobs' leases renewed while the failures wait", func() bool {
		return b.countRows(t, `SELECT count(*) FROM ordered_heads WHERE key LIKE 'slow%'
			AND state = 'running' AND lease_until > attempted_at + $1::interval`, (lease+3*time.Second).String()) == slow
	})
	require.Positive(t, b.countRows(t, `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND query LIKE '%ordered_job_fail%'`), "the failures still wait")
	cancelled.Range(func(k, v any) bool {
		t.Errorf("the handler of %v was cancelled: %v", k, v)
		return true
	})

	require.NoError(t, producer.Commit(b.ctx))
	close(release)
	waitFor(t, time.Minute, "every first job settled", func() bool {
		return b.countRows(t, `SELECT count(*) FROM ordered_jobs WHERE seq = 1 AND status IN ('done', 'failed')`) == slow+failing
	})
	require.NoError(t, w.Stop(b.ctx))
	require.Zero(t, metricValue(t, reg, "ordered_lost_ownership_total"))
}
