package ordered

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/testdb"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// The question a worker asks after a batch's answer was lost locks the batch's keys as a
// completion does, so a transaction that enqueues to them out of key order can deadlock with
// it. It is asked again, as a completion is tried again, and the next jobs the batch claimed
// are still taken over (here, on their last attempt, they would fail unrun at lease expiry).
func TestBatchOutcomeIsAskedAgainAfterADeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := testdb.New(t)
	// The outcome, waiting first, is the one the deadlock check picks: PostgreSQL checks a
	// wait once, deadlock_timeout after it began, so the outcome's check must come after the
	// transaction's wait has closed the cycle (5 s: the test's next statement may be late on
	// a busy machine), and the transaction's after the outcome's.
	cfg := q.Pool.Config()
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "5s"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	c, err := NewClient(pool, nil)
	require.NoError(t, err)
	for _, key := range []string{"a", "b"} {
		_, err := c.EnqueueMany(ctx, []Event{{Key: key, Seq: 1}, {Key: key, Seq: 2, MaxAttempts: 1}})
		require.NoError(t, err)
	}
	jobs, err := c.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	ids, versions := claimsOf(jobs)
	_, next, err := store.JobCompleteMany(ctx, q.Pool, ids, versions, len(jobs), time.Minute)
	require.NoError(t, err)
	require.Len(t, next, 2) // a/2 and b/2; suppose the batch's answer was lost

	tx, err := q.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, "SET LOCAL deadlock_timeout = '60s'")
	require.NoError(t, err)
	_, err = c.EnqueueTx(ctx, tx, Event{Key: "b", Seq: 3}) // holds key b
	require.NoError(t, err)
	var holder int
	require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&holder))

	type answer struct {
		next []*Job
		ok   bool
	}
	answered := make(chan answer, 1)
	go func() {
		_, next, ok := c.batchOutcome(ctx, jobs, true)
		answered <- answer{next, ok}
	}()
	require.Eventually(t, func() bool { // it holds key a and waits for key b
		var n int
		require.NoError(t, q.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE $1 = ANY (pg_blocking_pids(pid))`, holder).Scan(&n))
		return n > 0
	}, 10*time.Second, 10*time.Millisecond)
	_, err = c.EnqueueTx(ctx, tx, Event{Key: "a", Seq: 3}) // waits for key a: a deadlock
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	a := <-answered
	require.True(t, a.ok, "the outcome was given up after a deadlock")
	require.Len(t, a.next, 2)
}
