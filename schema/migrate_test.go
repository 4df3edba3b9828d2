package schema_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/testdb"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/schema"
)

// Several processes migrating one fresh database at once: every one succeeds, and each
// migration is applied exactly once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := uniqueName("ordered_migrate_concurrently")
	admin := newSchema(ctx, t, name)

	migrations, err := schema.Migrations()
	require.NoError(t, err)
	functions, err := schema.Functions()
	require.NoError(t, err)
	const migrators = 6
	applied := make([]*schema.Applied, migrators)
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
	versions, fns := 0, 0
	for i := range migrators {
		require.NoError(t, errs[i])
		versions += len(applied[i].Migrations)
		fns += len(applied[i].Functions)
	}
	require.Equal(t, len(migrations), versions, "each migration applied exactly once")
	require.Equal(t, len(functions), fns, "each function applied exactly once")

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

// uniqueName is base made this test process's own, so two suites on one server do not share
// a schema or a role.
func uniqueName(base string) string { return fmt.Sprintf("%s_%d", base, os.Getpid()) }

// A queue that the search_path finds past its first schema is refused: by Migrate, which would
// create its new objects apart from it (and creates nothing), and by Check, since a queue
// created in the first schema would take its place. With the queue's schema first, both
// accept it.
func TestQueuePastTheFirstSchemaIsRefused(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	queue, first := uniqueName("ordered_migrate_queue"), uniqueName("ordered_migrate_first")
	newSchema(ctx, t, queue)
	admin := newSchema(ctx, t, first)
	_, err := schema.Migrate(ctx, schemaPool(ctx, t, queue, ""))
	require.NoError(t, err)

	past := schemaPool(ctx, t, first+","+queue, "")
	_, err = schema.Migrate(ctx, past)
	require.ErrorContains(t, err, fmt.Sprintf(`the search_path finds the queue in schema %q, but its first schema is %q`, queue, first))
	err = schema.Check(ctx, past)
	require.ErrorContains(t, err, fmt.Sprintf(`the search_path finds the queue in schema %q, past its first schema %q`, queue, first))
	require.NotErrorIs(t, err, schema.ErrNotMigrated, "migrating does not help")
	var objects int
	require.NoError(t, admin.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class WHERE relnamespace = $1::regnamespace)
		+ (SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace)`, first).Scan(&objects))
	require.Zero(t, objects, "nothing is created in the first schema")

	queueFirst := schemaPool(ctx, t, queue+","+first, "")
	applied, err := schema.Migrate(ctx, queueFirst)
	require.NoError(t, err)
	require.Empty(t, applied.Migrations)
	require.Empty(t, applied.Functions)
	require.NoError(t, schema.Check(ctx, queueFirst))
}

// A database in another encoding than UTF8 is refused, naming its encoding, and nothing is
// created in it: LATIN1 would refuse some valid keys and payloads with its own errors, and
// SQL_ASCII would store whatever bytes it is sent.
func TestMigrateRefusesADatabaseThatIsNotUTF8(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, encoding := range []string{"LATIN1", "SQL_ASCII"} {
		t.Run(encoding, func(t *testing.T) {
			// The encoding is one of the test's own constants: CREATE DATABASE takes no parameters.
			url := testdb.NewDatabase(t, "ordered_encoding_"+strings.ToLower(encoding),
				"TEMPLATE template0 ENCODING '"+encoding+"' LC_COLLATE 'C' LC_CTYPE 'C'")
			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			defer conn.Close(ctx)

			_, err = schema.Migrate(ctx, conn)
			require.EqualError(t, err, "ordered: migrate: the database's encoding is "+encoding+
				", and a queue needs UTF8: keys and payloads are Unicode; create the database with ENCODING 'UTF8'")
			var tables int
			require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'ordered%'`).Scan(&tables))
			require.Zero(t, tables, "nothing is created")
		})
	}
}
