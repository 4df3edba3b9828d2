package schema_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
	admin, err := pgx.Connect(ctx, orderedtest.DatabaseURL())
	require.NoError(t, err)
	defer admin.Close(ctx)
	const name = "ordered_migrate_concurrently"
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
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+ident+".ordered_migrations").Scan(&recorded))
	require.Equal(t, len(migrations), recorded)
}
