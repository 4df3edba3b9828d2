package ordered_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/testdb"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/schema"
)

// A connection keeps the plans of the queue's functions for its whole life, and PostgreSQL
// replans them only when the tables' statistics change (or the database's schemas do). A
// service that starts on an empty queue makes them there; if nothing analyses the tables as
// they grow (autovacuum off, or before its next round), a plan that read the tiny table whole
// must not stay: every operation below, planned on an empty queue and run again after 100,000
// jobs arrived, reads no more than a few rows of ordered_jobs and ordered_keys at each step
// (auto_explain's ANALYZE figures of every statement, nested ones included).
func TestPlansMadeOnAnEmptyQueueDoNotScanItLater(t *testing.T) {
	t.Parallel()
	// A database of its own: other tests create and drop schemas, which resets the plans of
	// every session of their database, this test's too.
	url := testdb.NewDatabase(t, "ordered_test_plans", "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	admin, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	_, err = schema.Migrate(ctx, admin)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, `ALTER TABLE ordered_jobs SET (autovacuum_enabled = off);
		ALTER TABLE ordered_keys SET (autovacuum_enabled = off)`)
	require.NoError(t, err)

	// One connection, its statements' plans and row counts written to it by auto_explain.
	var mu sync.Mutex
	var wide []string
	pool := explainedPool(ctx, t, url, "SET auto_explain.log_analyze = on; SET auto_explain.log_timing = off",
		func(plan string) {
			if w := wideSteps(plan); len(w) > 0 {
				mu.Lock()
				wide = append(wide, w...)
				mu.Unlock()
			}
		})
	c, err := ordered.NewClient(pool, nil)
	require.NoError(t, err)
	b := &testBundle{ctx: ctx, queue: &orderedtest.Queue{URL: url, Pool: admin}, pool: admin, client: c}

	// PostgreSQL plans a statement afresh for its first five runs unless the function asks
	// for a generic plan; six rounds leave every statement on its lasting plan.
	const planningRounds = 6
	for round := range planningRounds {
		b.everyOperation(t, c, pool, fmt.Sprintf("plan%d", round))
	}
	mu.Lock()
	wide = nil
	mu.Unlock()

	// Not due for a day, so the claims below take the test's own keys.
	_, err = admin.Exec(ctx, `SELECT count(*) FROM ordered_enqueue((
		SELECT jsonb_agg(jsonb_build_object('key', 'bulk' || (i % 10000), 'seq', i / 10000,
		                                    'max_attempts', 3, 'run_at', now() + interval '1 day'))
		FROM generate_series(0, 99999) AS i))`)
	require.NoError(t, err)
	var reltuples float64
	require.NoError(t, admin.QueryRow(ctx,
		`SELECT reltuples FROM pg_class WHERE oid = 'ordered_jobs'::regclass`).Scan(&reltuples))
	require.Negative(t, reltuples, "ordered_jobs was analysed: the test needs it never analysed")

	b.everyOperation(t, c, pool, "grown")
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, wide, "plans made on the empty queue read the grown one whole")
}

// A claim runs on a generic plan, made once a session, not on a plan made for each call's
// values: planning the claim's statement costs more than running it. A plan made for a call
// holds the lease as a constant; the generic plan holds it as the function's parameter ($2),
// from the first call.
func TestClaimRunsOnAGenericPlan(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const claims = 8
	for k := range claims {
		b.enqueue(t, fmt.Sprintf("k%d", k), 1)
	}

	var mu sync.Mutex
	var plans []string
	pool := explainedPool(b.ctx, t, b.queue.URL, "SET auto_explain.log_verbose = on", func(plan string) {
		if strings.Contains(plan, "Query Text: WITH recovered AS") {
			mu.Lock()
			plans = append(plans, plan)
			mu.Unlock()
		}
	})
	c, err := ordered.NewClient(pool, &ordered.Config{Lease: 37 * time.Second})
	require.NoError(t, err)

	for range claims {
		jobs, err := c.Claim(b.ctx, 1)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, plans, claims, "one plan of the claim's statement a call")
	for i, plan := range plans {
		require.Regexp(t, `statement_timestamp\(\)[^\n]*\$2\b`, plan, "claim %d: the lease is not the plan's parameter", i+1)
		require.NotContains(t, plan, "00:00:37", "claim %d: a plan made for the call's lease", i+1)
	}
}

// explainedPool returns a pool of one connection to url on which auto_explain hands the plan
// of every statement, nested ones included, to onPlan; settings are auto_explain's others
// (SET statements, the test's own constant).
func explainedPool(ctx context.Context, t *testing.T, url, settings string, onPlan func(plan string)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 1
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { onPlan(n.Message) }
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `LOAD 'auto_explain';
			SET auto_explain.log_min_duration = 0;
			SET auto_explain.log_nested_statements = on;
			SET client_min_messages = log; `+settings)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// wideStepMax is how many rows one step of a plan may read from the queue tables: the
// test's own keys hold a handful of jobs, the bulk load 100,000.
const wideStepMax = 1_000

var (
	scanStep    = regexp.MustCompile(`(?m)^.*Scan.* on (ordered_jobs|ordered_keys)\w*.*rows=(\d+) loops=(\d+)\).*$`)
	removedRows = regexp.MustCompile(`Rows Removed by (?:Filter|Index Recheck|Join Filter): (\d+)`)
)

// wideSteps returns the steps of an auto_explain plan that read more than wideStepMax rows of
// the queue tables, each with the statement's first line.
func wideSteps(plan string) []string {
	query := plan
	if i := strings.Index(query, "Query Text: "); i >= 0 {
		query = query[i+len("Query Text: "):]
	}
	query, _, _ = strings.Cut(query, "\n")
	var wide []string
	for _, m := range scanStep.FindAllStringSubmatch(plan, -1) {
		rows, _ := strconv.Atoi(m[2])
		loops, _ := strconv.Atoi(m[3])
		if rows*loops > wideStepMax {
			wide = append(wide, strings.TrimSpace(m[0])+" in: "+query)
		}
	}
	for _, m := range removedRows.FindAllStringSubmatch(plan, -1) {
		if n, _ := strconv.Atoi(m[1]); n > wideStepMax {
			wide = append(wide, m[0]+" in: "+query)
		}
	}
	return wide
}

// everyOperation runs each operation of the queue once, through c on pool, on fresh keys named
// after prefix: enqueue (appending and below a queued head, in READ COMMITTED and REPEATABLE
// READ), claim, renew, give-back, complete (one and a batch), retry, fail (blocking), skip,
// replay, archive and the expiry of exhausted jobs.
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
	given, err := store.JobReleaseUnrun(ctx, pool, a1.ID, a1.ClaimVersion, nil)
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
	require.Equal(t, ordered.OutcomeRetried, out)
	require.NoError(t, c.Complete(ctx, claim("b", 1)))

	enqueue("c", 1)
	c1 := claim("c", 1)
	out, err = c.Fail(ctx, c1, boom)
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeBlocked, out)
	released, err := c.Skip(ctx, c1.ID)
	require.NoError(t, err)
	require.True(t, released)
	require.NoError(t, c.Replay(ctx, c1.ID, ordered.ReplayParams{}))
	require.NoError(t, c.Complete(ctx, claim("c", 1)))

	enqueue("d", 1, 2) // d/1 exhausts its attempts and blocks d/2 for good
	d1 := claim("d", 1)
	_, err = b.pool.Exec(ctx, `UPDATE ordered_heads
		SET attempts = max_attempts, lease_until = now() - interval '1 second' WHERE job_id = $1`, d1.ID)
	require.NoError(t, err)
	n, err := c.FailExhausted(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	// A REPEATABLE READ enqueue locks the heads its snapshot sees; not due, so never claimed.
	later := time.Now().Add(24 * time.Hour)
	for _, seq := range []int64{2, 1} {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		_, err = c.EnqueueTx(ctx, tx, ordered.Event{Key: key("e"), Seq: seq, RunAt: later})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}

	_, err = c.Archive(ctx, ordered.ArchiveParams{OlderThan: time.Nanosecond})
	require.NoError(t, err)
}
