package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/testdb"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// The churn run's stand-in for autovacuum vacuums the queue tables that passed their shipped
// thresholds, the head table among them (every claim and completion rewrites it), and none
// while none has.
func TestVacuumDueVacuumsTheTablesPastTheirThresholds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q := testdb.New(t)
	// The server's own autovacuum, if it runs, must not vacuum them first. The key rows' insert
	// threshold is the server's (none is shipped): fixed here to its default.
	_, err := q.Pool.Exec(ctx, `ALTER TABLE ordered_jobs SET (autovacuum_enabled = off);
		ALTER TABLE ordered_keys SET (autovacuum_enabled = off, autovacuum_vacuum_insert_threshold = 1000);
		ALTER TABLE ordered_heads SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	client, err := ordered.NewClient(q.Pool, nil)
	require.NoError(t, err)

	require.NoError(t, vacuumDue(ctx, q.Pool))
	require.Equal(t, map[string]int64{"ordered_jobs": 0, "ordered_keys": 0, "ordered_heads": 0},
		vacuumCounts(ctx, t, q), "a fresh queue has no table past its threshold")

	// 3,000 keys, one job each, drained: 3,000 key rows inserted, 3,000 job rows updated, 3,000
	// head rows inserted, updated and deleted. The thresholds are 1,000 dead tuples, and 1,000
	// inserts for the key rows.
	const keys = 3000
	events := make([]ordered.Event, keys)
	for i := range events {
		events[i] = ordered.Event{Key: fmt.Sprintf("churn-%04d", i), Seq: 1}
	}
	_, err = client.EnqueueMany(ctx, events)
	require.NoError(t, err)
	w, err := client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{Workers: 8, Retention: -1})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	_, err = orderedtest.WaitDrained(ctx, q.Pool)
	require.NoError(t, w.Stop(ctx))
	require.NoError(t, err)
	// Sessions report their writes to the statistics a while after their transactions; the
	// writes' counters only grow, where pruning a page takes dead tuples off the count.
	for s := tableStats(ctx, t, q); s.keysInserted < keys || s.jobsUpdated < keys || s.headsDeleted < keys; s = tableStats(ctx, t, q) {
		select {
		case <-ctx.Done():
			t.Fatalf("the statistics never showed the drain's writes: %+v", s)
		case <-time.After(20 * time.Millisecond):
		}
	}
	s := tableStats(ctx, t, q)
	require.Greater(t, s.jobsDead, int64(1000), "the drain left too few dead job rows to test with")
	require.Greater(t, s.headsDead, int64(1000), "the drain left too few dead head rows to test with")

	require.NoError(t, vacuumDue(ctx, q.Pool))
	require.Equal(t, map[string]int64{"ordered_jobs": 1, "ordered_keys": 1, "ordered_heads": 1},
		vacuumCounts(ctx, t, q))
}

// vacuumCounts reads how many times each queue table of q was vacuumed by hand.
func vacuumCounts(ctx context.Context, t *testing.T, q *testdb.Queue) map[string]int64 {
	t.Helper()
	counts := map[string]int64{}
	rows, err := q.Pool.Query(ctx, `SELECT relname::text, vacuum_count FROM pg_stat_user_tables
		WHERE relid IN ('ordered_jobs'::regclass, 'ordered_keys'::regclass, 'ordered_heads'::regclass)`)
	require.NoError(t, err)
	for rows.Next() {
		var name string
		var n int64
		require.NoError(t, rows.Scan(&name, &n))
		counts[name] = n
	}
	require.NoError(t, rows.Err())
	return counts
}

// stats are what the statistics show of the queue tables' writes.
type stats struct {
	keysInserted, jobsUpdated, jobsDead, headsDeleted, headsDead int64
}

// tableStats reads the statistics of q's queue tables.
func tableStats(ctx context.Context, t *testing.T, q *testdb.Queue) stats {
	t.Helper()
	var s stats
	require.NoError(t, q.Pool.QueryRow(ctx, `SELECT k.n_tup_ins, j.n_tup_upd, j.n_dead_tup, h.n_tup_del, h.n_dead_tup
		FROM pg_stat_user_tables AS k, pg_stat_user_tables AS j, pg_stat_user_tables AS h
		WHERE k.relid = 'ordered_keys'::regclass AND j.relid = 'ordered_jobs'::regclass
		  AND h.relid = 'ordered_heads'::regclass`).Scan(
		&s.keysInserted, &s.jobsUpdated, &s.jobsDead, &s.headsDeleted, &s.headsDead))
	return s
}
