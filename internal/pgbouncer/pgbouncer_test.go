package pgbouncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/pgbouncer"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// TestPgBouncer checks the harness: the role's search_path selects the queue's schema through
// PgBouncer in each mode, and a restart leaves it serving on the same URL.
func TestPgBouncer(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgbouncer.Mode{pgbouncer.Session, pgbouncer.Transaction} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			q := orderedtest.New(t)
			b := pgbouncer.New(t, mode, q.Schema)
			check := func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				conn, err := pgx.Connect(ctx, b.URL(q.Schema))
				require.NoError(t, err)
				defer conn.Close(ctx)
				var schema, jobs string
				require.NoError(t, conn.QueryRow(ctx, "SELECT current_schema()", pgx.QueryExecModeSimpleProtocol).Scan(&schema))
				require.Equal(t, q.Schema, schema)
				require.NoError(t, conn.QueryRow(ctx, "SELECT count(*)::text FROM ordered_jobs_now", pgx.QueryExecModeSimpleProtocol).Scan(&jobs))
			}
			check()
			b.Restart()
			check()
		})
	}
}
