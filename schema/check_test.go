package schema_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/schema"
)

// schemaPool returns a pool whose search_path is the schema name, as user (empty: the URL's).
func schemaPool(ctx context.Context, t *testing.T, name, user string) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(orderedtest.DatabaseURL())
	require.NoError(t, err)
	if user != "" {
		u.User = url.User(user)
	}
	cfg, err := pgxpool.ParseConfig(u.String())
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// Check tells an empty schema, one behind the embedded migrations, a current one and one that
// a newer binary migrated apart; the latest version comes from the embedded files.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := uniqueName("ordered_check")
	newSchema(ctx, t, name)
	pool := schemaPool(ctx, t, name, "")
	ms, err := schema.Migrations()
	require.NoError(t, err)
	latest := ms[len(ms)-1].Version

	err = schema.Check(ctx, pool)
	require.ErrorIs(t, err, schema.ErrNotMigrated)
	require.Contains(t, err.Error(), "ordered: schema not migrated: run schema.Migrate or `ordered migrate`")

	_, err = schema.Migrate(ctx, pool)
	require.NoError(t, err)
	require.NoError(t, schema.Check(ctx, pool))

	_, err = pool.Exec(ctx, "DELETE FROM ordered_migrations WHERE version = $1", latest)
	require.NoError(t, err)
	err = schema.Check(ctx, pool)
	require.ErrorIs(t, err, schema.ErrNotMigrated, "the latest migration missing")
	_, err = pool.Exec(ctx, "INSERT INTO ordered_migrations (version, name) VALUES ($1, $2)", latest, ms[len(ms)-1].Name)
	require.NoError(t, err)

	_, err = pool.Exec(ctx, "UPDATE ordered_functions SET checksum = 'other' WHERE name = 'ordered_job_skip'")
	require.NoError(t, err)
	err = schema.Check(ctx, pool)
	require.ErrorIs(t, err, schema.ErrNotMigrated, "a function of another text")
	require.ErrorContains(t, err, "ordered_job_skip")
	applied, err := schema.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, []string{"ordered_job_skip"}, applied.Functions)
	require.NoError(t, schema.Check(ctx, pool))
	current, err := schema.CurrentSchema(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, name, current)

	_, err = pool.Exec(ctx, "INSERT INTO ordered_migrations (version, name) VALUES ($1, 'from_the_future')", latest+1)
	require.NoError(t, err)
	err = schema.Check(ctx, pool)
	require.ErrorIs(t, err, schema.ErrSchemaNewer)
	require.NotErrorIs(t, err, schema.ErrNotMigrated)
	applied, err = schema.Migrate(ctx, pool)
	require.ErrorIs(t, err, schema.ErrSchemaNewer, "Migrate does not call a newer schema up to date")
	require.Empty(t, applied)
}

// A role that may use the schema but not create in it migrates a current schema: nothing to
// do, and no error.
func TestMigrateCurrentWithoutCreatePrivilege(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := uniqueName("ordered_migrate_no_create")
	admin := newSchema(ctx, t, name)
	_, err := schema.Migrate(ctx, schemaPool(ctx, t, name, ""))
	require.NoError(t, err)

	roleName := uniqueName("ordered_no_create_role")
	role := newRole(ctx, t, admin, roleName)
	ident := pgx.Identifier{name}.Sanitize()
	_, err = admin.Exec(ctx, "GRANT USAGE ON SCHEMA "+ident+" TO "+role)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "GRANT SELECT ON "+ident+".ordered_migrations, "+ident+".ordered_functions TO "+role)
	require.NoError(t, err)

	pool := schemaPool(ctx, t, name, roleName)
	var canCreate bool
	require.NoError(t, pool.QueryRow(ctx, "SELECT has_schema_privilege(current_schema(), 'CREATE')").Scan(&canCreate))
	require.False(t, canCreate)
	applied, err := schema.Migrate(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, applied.Migrations)
	require.Empty(t, applied.Functions)
	require.NoError(t, schema.Check(ctx, pool))
}

// newRole creates a login role, dropped (with its privileges) when the test ends, and returns
// its quoted name.
func newRole(ctx context.Context, t *testing.T, admin *pgx.Conn, name string) string {
	t.Helper()
	ident := pgx.Identifier{name}.Sanitize()
	_, err := admin.Exec(ctx, "DROP ROLE IF EXISTS "+ident)
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE ROLE "+ident+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), orderedtest.DatabaseURL())
		if err != nil {
			t.Errorf("drop role %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		for _, sql := range []string{"DROP OWNED BY " + ident, "DROP ROLE " + ident} {
			if _, err := conn.Exec(context.Background(), sql); err != nil {
				t.Errorf("drop role %s: %v", name, err)
			}
		}
	})
	return ident
}
