package ordered_test

import (
	"context"
	"testing"

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
