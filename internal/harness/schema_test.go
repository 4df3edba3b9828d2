package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/pgbouncer"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// A run's schema is set per session, not by a startup parameter: its pool works through
// PgBouncer, which refuses startup parameters such as options, and its connections, new ones
// too, work in the schema.
func TestSchemaPoolWorksInItsSchemaBehindPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, baseURL := range map[string]string{
		"server":    orderedtest.DatabaseURL(),
		"pgbouncer": pgbouncer.New(t, pgbouncer.Session).URL(""),
	} {
		t.Run(name, func(t *testing.T) {
			s, err := CreateSchema(ctx, baseURL, fmt.Sprintf("harness_test_%s_%d", name, time.Now().UnixNano()))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, s.Drop(context.Background())) })
			pool, err := s.MigratedPool(ctx, 2)
			require.NoError(t, err)
			defer pool.Close()
			_, err = pool.Exec(ctx, "CREATE TABLE harness_probe (n int)")
			require.NoError(t, err)

			// Two connections at once: the second is a new session, set up the same way.
			a, err := pool.Acquire(ctx)
			require.NoError(t, err)
			defer a.Release()
			b, err := pool.Acquire(ctx)
			require.NoError(t, err)
			defer b.Release()
			var schemaA, schemaB, tableA string
			require.NoError(t, a.QueryRow(ctx, "SELECT current_schema(), to_regclass('harness_probe')::text").Scan(&schemaA, &tableA))
			require.NoError(t, b.QueryRow(ctx, "SELECT current_schema()").Scan(&schemaB))
			require.Equal(t, s.Name, schemaA)
			require.Equal(t, s.Name, schemaB)
			require.Equal(t, "harness_probe", tableA)
			require.NotContains(t, pool.Config().ConnConfig.RuntimeParams, "options")
			require.NotContains(t, pool.Config().ConnConfig.RuntimeParams, "search_path")
		})
	}
}
