package ordered_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/schema"
)

// emptySchemaPool is a pool on a new schema without migrations, dropped when the test ends.
func emptySchemaPool(t *testing.T, b *testBundle) *pgxpool.Pool {
	t.Helper()
	name := pgx.Identifier{b.queue.Schema + "_empty"}.Sanitize()
	_, err := b.pool.Exec(b.ctx, "CREATE SCHEMA "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := b.pool.Exec(context.Background(), "DROP SCHEMA "+name+" CASCADE")
		require.NoError(t, err)
	})
	cfg, err := pgxpool.ParseConfig(orderedtest.DatabaseURL())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = b.queue.Schema + "_empty"
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// A worker on an unmigrated database fails to start with an error that says to migrate, not
// with the first claim's missing function; on a database a newer version migrated, with one
// that says so.
func TestWorkerStartChecksTheSchema(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	noop := ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil })

	c, err := ordered.NewClient(emptySchemaPool(t, b), nil)
	require.NoError(t, err)
	w, err := c.NewWorker(noop, nil)
	require.NoError(t, err)
	err = w.Start(b.ctx)
	require.ErrorIs(t, err, schema.ErrNotMigrated)
	require.Regexp(t, "^ordered: schema not migrated: run schema.Migrate or `ordered migrate`", err.Error())
	<-w.Stopped()

	ms, err := schema.Migrations()
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, "INSERT INTO ordered_migrations (version, name) VALUES ($1, 'newer')", ms[len(ms)-1].Version+1)
	require.NoError(t, err)
	w, err = b.client.NewWorker(noop, nil)
	require.NoError(t, err)
	err = w.Start(b.ctx)
	require.ErrorIs(t, err, schema.ErrSchemaNewer)
	require.Regexp(t, "^ordered: schema is newer than this binary", err.Error())
	<-w.Stopped()
}

// A producer on an unmigrated database gets an error that says to migrate too, whichever
// path its events take (a single append, a batch), not the missing table's.
func TestEnqueueOnAnUnmigratedSchemaSaysToMigrate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c, err := ordered.NewClient(emptySchemaPool(t, b), nil)
	require.NoError(t, err)
	_, err = c.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 1})
	require.ErrorIs(t, err, schema.ErrNotMigrated)
	require.Regexp(t, "^ordered: schema not migrated: run schema.Migrate or `ordered migrate`: .*ordered_", err.Error())
	_, err = c.EnqueueMany(b.ctx, []ordered.Event{{Key: "k", Seq: 1}, {Key: "k", Seq: 2}})
	require.ErrorIs(t, err, schema.ErrNotMigrated)
}

// A worker whose queue another version migrates while it runs stops itself at its next
// maintenance pass, as Stop would (no new claims; the running job finishes and is settled),
// and Err says why: its statements are no longer the ones the functions answer. A change of
// the functions alone (a newer version's migrate rewrote one) stops it too.
func TestWorkerStopsWhenTheSchemaChangesUnderIt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ms, err := schema.Migrations()
	require.NoError(t, err)
	newer := ms[len(ms)-1].Version + 1
	for _, c := range []struct {
		change, undo string
		args         []any
		want         error
	}{
		{"INSERT INTO ordered_migrations (version, name) VALUES ($1, 'newer')",
			"DELETE FROM ordered_migrations WHERE version = $1", []any{newer}, schema.ErrSchemaNewer},
		{"UPDATE ordered_functions SET checksum = 'newer' WHERE name = $1",
			"UPDATE ordered_functions SET checksum = (SELECT checksum FROM old) WHERE name = $1", []any{"ordered_job_skip"}, schema.ErrNotMigrated},
	} {
		_, err := b.pool.Exec(b.ctx, "DROP TABLE IF EXISTS old; CREATE TABLE old AS SELECT checksum FROM ordered_functions WHERE name = 'ordered_job_skip'")
		require.NoError(t, err)
		key := fmt.Sprintf("k-%v", c.want)
		started, release := make(chan struct{}, 1), make(chan struct{})
		w := startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
			started <- struct{}{}
			<-release
			return nil
		}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 20 * time.Millisecond})
		ids := b.enqueue(t, key, 1)
		<-started
		require.NoError(t, w.Err())

		_, err = b.pool.Exec(b.ctx, c.change, c.args...)
		require.NoError(t, err)
		waitFor(t, 20*time.Second, "the worker to stop itself", func() bool { return w.Err() != nil })
		require.ErrorIs(t, w.Err(), c.want)
		require.Regexp(t, `^ordered: worker stopped: another version migrated the queue under it; run that version's workers \((the database has migrations|functions ordered_job_skip)`, w.Err().Error())
		_, err = b.pool.Exec(b.ctx, c.undo, c.args...) // the same binary's functions answer the rest
		require.NoError(t, err)
		more := b.enqueue(t, "other-"+key, 1)
		close(release)
		select {
		case <-w.Stopped():
		case <-time.After(30 * time.Second):
			t.Fatal("the worker did not finish its stop")
		}
		require.Equal(t, "done", b.jobStatus(t, ids[0]), "the running job was settled")
		require.Equal(t, []string{"1:queued:0"}, b.jobsOf(t, "other-"+key), "nothing ran after the stop")
		// The job goes with its key: its head row and its key row.
		_, err = b.pool.Exec(b.ctx, `
			WITH head AS (DELETE FROM ordered_heads WHERE key = $2),
			     k AS (DELETE FROM ordered_keys WHERE key = $2)
			DELETE FROM ordered_jobs WHERE id = $1`, more[0], "other-"+key)
		require.NoError(t, err)
	}
}

// A server that refuses the start-up's sessions for a moment, as one starting up does
// (SQLSTATE 57P03), or cuts one as it starts, is asked again: the worker starts once it answers, and runs jobs. One
// that keeps refusing fails the start with the server's error.
func TestWorkerStartWaitsOutAServerStartingUp(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pool, proxy := b.partitionedPool(t)
	c, err := ordered.NewClient(pool, nil)
	require.NoError(t, err)
	id := b.enqueue(t, "k", 1)[0]

	proxy.RefuseNext(3, "57P03", "the database system is starting up")
	proxy.CutNext(1)
	w, err := c.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }), nil)
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	_, err = orderedtest.WaitDrained(b.ctx, b.pool)
	require.NoError(t, err)
	require.NoError(t, w.Stop(b.ctx))
	require.Equal(t, "done", b.jobStatus(t, id))

	proxy.RefuseNext(1000, "57P03", "the database system is starting up")
	defer proxy.RefuseNext(0, "", "")
	w, err = c.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }), nil)
	require.NoError(t, err)
	require.ErrorContains(t, w.Start(b.ctx), "the database system is starting up (SQLSTATE 57P03)")
}
