package schema_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/schema"
)

// Several processes migrating one fresh database at once: every one succeeds, and each
// migration is applied exactly once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "ordered_migrate_concurrently"
	admin := newSchema(ctx, t, name)

	migrations, err := schema.Migrations()
	require.NoError(t, err)
	const migrators = 6
	applied := make([][]int, migrators)
	errs := make([]error, migrators)
	var wg sync.WaitGroup
	for i := range migrators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg, err := pgxpool.ParseConfig(orderedtest.DatabaseURL())
			if err != nil {
				errs[i] = err
				return
			}
			cfg.ConnConfig.RuntimeParams["search_path"] = name
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			applied[i], errs[i] = schema.Migrate(ctx, pool)
		}()
	}
	wg.Wait()
	total := 0
	for i := range migrators {
		require.NoError(t, errs[i])
		total += len(applied[i])
	}
	require.Equal(t, len(migrations), total, "each migration applied exactly once")

	var recorded int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name}.Sanitize()+".ordered_migrations").Scan(&recorded))
	require.Equal(t, len(migrations), recorded)
}

// newSchema creates an empty schema, dropped when the test ends, and returns a connection to
// its database (search_path not set).
func newSchema(ctx context.Context, t *testing.T, name string) *pgx.Conn {
	t.Helper()
	admin, err := pgx.Connect(ctx, orderedtest.DatabaseURL())
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	ident := pgx.Identifier{name}.Sanitize()
	_, err = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+ident)
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), orderedtest.DatabaseURL())
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+ident+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return admin
}

// A queue made before 006 holds jobs in every state; after the upgrade, (key, seq) is unique
// through the open and finished indexes alone, and re-sent events find the old jobs.
func TestUpgradeTo006FindsEarlierJobsAsDuplicates(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "ordered_upgrade_006"
	newSchema(ctx, t, name)
	cfg, err := pgxpool.ParseConfig(orderedtest.DatabaseURL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()

	applied, err := schema.MigrateTo(ctx, pool, 5)
	require.NoError(t, err)
	require.Equal(t, []int{1, 2, 3, 4, 5}, applied)
	enqueue := func(events string) map[string][2]any { // key/seq -> id, duplicate
		rows, err := pool.Query(ctx, `SELECT (e.v->>'key') || '/' || (e.v->>'seq'), r.id, r.duplicate
			FROM ordered_enqueue($1::jsonb) AS r
			JOIN jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(v, ord) ON e.ord = r.ord`, events)
		require.NoError(t, err)
		out := map[string][2]any{}
		for rows.Next() {
			var event string
			var id int64
			var duplicate bool
			require.NoError(t, rows.Scan(&event, &id, &duplicate))
			out[event] = [2]any{id, duplicate}
		}
		require.NoError(t, rows.Err())
		return out
	}
	before := enqueue(`[{"key":"a","seq":1,"max_attempts":3},{"key":"a","seq":2,"max_attempts":3},
		{"key":"b","seq":1,"max_attempts":3}]`)
	// a/1 is claimed (as the claim does it) and completed.
	var id, version int64
	require.NoError(t, pool.QueryRow(ctx, `UPDATE ordered_jobs
		SET status = 'running', claim_version = claim_version + 1, attempts = 1,
		    attempted_at = now(), lease_until = now() + interval '1 hour'
		WHERE key = 'a' AND seq = 1 RETURNING id, claim_version`).Scan(&id, &version))
	_, err = pool.Exec(ctx, `SELECT ordered_jobs_complete(ARRAY[$1::bigint], ARRAY[$2::bigint])`, id, version)
	require.NoError(t, err)

	applied, err = schema.MigrateTo(ctx, pool, 6)
	require.NoError(t, err)
	require.Equal(t, []int{6}, applied)

	var uniqueIndexes, seqKey int
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_index WHERE indisunique AND indexrelid IN
			(to_regclass('ordered_jobs_open'), to_regclass('ordered_jobs_closed'))),
		(SELECT count(*) FROM pg_constraint WHERE conname = 'ordered_jobs_seq_key'
			AND connamespace = current_schema()::regnamespace)`).Scan(&uniqueIndexes, &seqKey))
	require.Equal(t, 2, uniqueIndexes)
	require.Zero(t, seqKey)

	after := enqueue(`[{"key":"a","seq":3,"max_attempts":3},{"key":"a","seq":1,"max_attempts":3},
		{"key":"b","seq":1,"max_attempts":3},{"key":"a","seq":2,"max_attempts":3}]`)
	require.Equal(t, [2]any{before["a/1"][0], true}, after["a/1"], "a done job")
	require.Equal(t, [2]any{before["a/2"][0], true}, after["a/2"], "a queued job")
	require.Equal(t, [2]any{before["b/1"][0], true}, after["b/1"], "a queued head")
	require.Equal(t, false, after["a/3"][1])
	var jobs, status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*)::text,
		(SELECT status FROM ordered_jobs WHERE key = 'a' AND seq = 1) FROM ordered_jobs`).Scan(&jobs, &status))
	require.Equal(t, "4", jobs)
	require.Equal(t, "done", status)
}

// A queue made before 015 keeps its jobs comparable: their run_at was not kept, so it is not
// compared (an identical re-send stays a duplicate), while payload, kind and max_attempts are.
// The enqueue functions keep the settings they had.
func TestUpgradeTo015ComparesEarlierJobsExceptTheirRunAt(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const name = "ordered_upgrade_015"
	newSchema(ctx, t, name)
	cfg, err := pgxpool.ParseConfig(orderedtest.DatabaseURL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()

	settings := func() map[string][]string {
		rows, err := pool.Query(ctx, `SELECT p.oid::regprocedure::text, coalesce(p.proconfig, '{}')
			FROM pg_proc AS p WHERE p.pronamespace = current_schema()::regnamespace
			AND p.proname IN ('ordered_enqueue_events', 'ordered_enqueue')`)
		require.NoError(t, err)
		out := map[string][]string{}
		for rows.Next() {
			var fn string
			var config []string
			require.NoError(t, rows.Scan(&fn, &config))
			out[fn] = config
		}
		require.NoError(t, rows.Err())
		return out
	}
	enqueue := func(event string) (bool, error) {
		var duplicate bool
		err := pool.QueryRow(ctx, `SELECT duplicate FROM ordered_enqueue(jsonb_build_array($1::jsonb))`, event).Scan(&duplicate)
		return duplicate, err
	}
	requireConflict := func(err error, field string) {
		t.Helper()
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "ORD05", pgErr.Code)
		var detail struct{ Field string }
		require.NoError(t, json.Unmarshal([]byte(pgErr.Detail), &detail))
		require.Equal(t, field, detail.Field)
	}

	_, err = schema.MigrateTo(ctx, pool, 14)
	require.NoError(t, err)
	before := settings()
	require.Equal(t, []string{"plan_cache_mode=force_generic_plan", "enable_seqscan=off", "jit=off", "enable_bitmapscan=off"},
		before["ordered_enqueue_events(ordered_event[])"])
	require.Empty(t, before["ordered_enqueue(jsonb)"])
	const old = `{"key":"a","seq":1,"kind":"k","payload":{"n":1},"run_at":"2030-01-01T00:00:00Z","max_attempts":3}`
	_, err = enqueue(old)
	require.NoError(t, err)

	applied, err := schema.MigrateTo(ctx, pool, 15)
	require.NoError(t, err)
	require.Equal(t, []int{15}, applied)
	require.Equal(t, before, settings())

	duplicate, err := enqueue(old)
	require.NoError(t, err)
	require.True(t, duplicate)
	duplicate, err = enqueue(`{"key":"a","seq":1,"kind":"k","payload":{"n":1},"max_attempts":3}`)
	require.NoError(t, err)
	require.True(t, duplicate, "the run_at of a job enqueued before 015 is not compared")
	_, err = enqueue(`{"key":"a","seq":1,"kind":"k","payload":{"n":2},"run_at":"2030-01-01T00:00:00Z","max_attempts":3}`)
	requireConflict(err, "payload")

	const later = `{"key":"b","seq":1,"kind":"k","payload":{"n":1},"run_at":"2030-01-01T00:00:00Z","max_attempts":3}`
	duplicate, err = enqueue(later)
	require.NoError(t, err)
	require.False(t, duplicate)
	_, err = enqueue(`{"key":"b","seq":1,"kind":"k","payload":{"n":1},"max_attempts":3}`)
	requireConflict(err, "run_at")
}
