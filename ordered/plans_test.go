package ordered_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// A connection keeps the plans of the queue's functions for its whole life, and PostgreSQL
// replans them only when the tables' statistics change. A service that starts on an empty
// queue makes them there; if nothing analyses the tables as they grow (autovacuum off, or
// before its next round), a plan that read the tiny table whole must not stay: every
// operation below, planned on an empty queue and run again after 100,000 jobs arrived,
// reaches ordered_jobs and ordered_keys through their indexes only.
func TestPlansMadeOnAnEmptyQueueDoNotScanItLater(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.pool.Exec(b.ctx, `ALTER TABLE ordered_jobs SET (autovacuum_enabled = off);
		ALTER TABLE ordered_keys SET (autovacuum_enabled = off)`)
	require.NoError(t, err)

	// One connection, its statements' plans written to it by auto_explain.
	cfg, err := pgxpool.ParseConfig(b.queue.URL)
	require.NoError(t, err)
	cfg.MaxConns = 1
	var mu sync.Mutex
	var scans []string
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		for _, table := range []string{"ordered_jobs", "ordered_keys"} {
			if strings.Contains(n.Message, "Seq Scan on "+table+" ") {
				mu.Lock()
				scans = append(scans, n.Message)
				mu.Unlock()
			}
		}
	}
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `LOAD 'auto_explain';
			SET auto_explain.log_min_duration = 0;
			SET auto_explain.log_nested_statements = on;
			SET client_min_messages = log`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := ordered.NewClient(pool, nil)
	require.NoError(t, err)

	// PostgreSQL plans a statement afresh for its first five runs unless the function asks
	// for a generic plan; six rounds leave every statement on its lasting plan.
	const planningRounds = 6
	for round := range planningRounds {
		b.everyOperation(t, c, pool, fmt.Sprintf("plan%d", round))
	}
	mu.Lock()
	scans = nil
	mu.Unlock()

	// Not due for a day, so the claims below take the test's own keys.
	_, err = b.pool.Exec(b.ctx, `SELECT count(*) FROM ordered_enqueue((
		SELECT jsonb_agg(jsonb_build_object('key', 'bulk' || (i % 10000), 'seq', i / 10000,
		                                    'max_attempts', 3, 'run_at', now() + interval '1 day'))
		FROM generate_series(0, 99999) AS i))`)
	require.NoError(t, err)
	var reltuples float64
	require.NoError(t, b.pool.QueryRow(b.ctx,
		`SELECT reltuples FROM pg_class WHERE oid = 'ordered_jobs'::regclass`).Scan(&reltuples))
	require.Negative(t, reltuples, "ordered_jobs was analysed: the test needs it never analysed")

	b.everyOperation(t, c, pool, "grown")
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, scans, "plans made on the empty queue read the grown one whole")
}

// everyOperation runs each operation of the queue once, through c on pool, on fresh keys named
// after prefix: enqueue (appending and below a queued head), claim, renew, give-back,
// complete (one and a batch), retry, fail (blocking), skip, replay, archive and the expiry of
// exhausted jobs.
func (b *testBundle) everyOperation(t *testing.T, c *ordered.Client, pool *pgxpool.Pool, prefix string) {
	t.Helper()
	ctx := b.ctx
	key := func(name string) string { return prefix + "-" + name }
	enqueue := func(name string, seqs ...int64) {
		t.Helper()
		evs := make([]ordered.Event, len(seqs))
		for i, s := range seqs {
			evs[i] = ordered.Event{Key: key(name), Seq: s}
		}
		_, err := c.EnqueueMany(ctx, evs)
		require.NoError(t, err)
	}
	// Only the key at hand has a ready job (the bulk load is not due), so claims are exact.
	claim := func(name string, seq int64) *ordered.Job {
		t.Helper()
		jobs, err := c.Claim(ctx, 1)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
		require.Equal(t, fmt.Sprintf("%s/%d", key(name), seq), jobs[0].IdempotencyKey())
		return jobs[0]
	}
	boom := errors.New("boom")

	enqueue("a", 2, 3)
	enqueue("a", 1) // below the queued head a/2
	a1 := claim("a", 1)
	_, err := c.Renew(ctx, a1)
	require.NoError(t, err)
	given, err := store.JobReleaseUnrun(ctx, pool, a1.ID, a1.ClaimVersion)
	require.NoError(t, err)
	require.True(t, given)
	require.NoError(t, c.Complete(ctx, claim("a", 1)))
	require.NoError(t, c.Complete(ctx, claim("a", 2)))
	lost, err := c.CompleteMany(ctx, []*ordered.Job{claim("a", 3)})
	require.NoError(t, err)
	require.Empty(t, lost)

	enqueue("b", 1)
	out, err := c.RetryAfter(ctx, claim("b", 1), 0, boom)
	require.NoError(t, err)
	require.Equal(t, ordered.Retried, out)
	require.NoError(t, c.Complete(ctx, claim("b", 1)))

	enqueue("c", 1)
	c1 := claim("c", 1)
	out, err = c.Fail(ctx, c1, boom)
	require.NoError(t, err)
	require.Equal(t, ordered.Blocked, out)
	require.NoError(t, c.Skip(ctx, c1.ID))
	require.NoError(t, c.Replay(ctx, c1.ID, ordered.ReplayParams{}))
	require.NoError(t, c.Complete(ctx, claim("c", 1)))

	enqueue("d", 1, 2) // d/1 exhausts its attempts and blocks d/2 for good
	d1 := claim("d", 1)
	_, err = b.pool.Exec(ctx, `UPDATE ordered_jobs
		SET attempts = max_attempts, lease_until = now() - interval '1 second' WHERE id = $1`, d1.ID)
	require.NoError(t, err)
	n, err := c.FailExhausted(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	_, err = c.Archive(ctx, ordered.ArchiveParams{OlderThan: time.Nanosecond})
	require.NoError(t, err)
}
