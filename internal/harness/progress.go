package harness

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Progress counts the settled jobs of a run's queue (done or failed) and those still pending:
// queued or running, not held behind a blocked key. A run is over when none is pending.
func Progress(ctx context.Context, pool *pgxpool.Pool) (settled, pending int, err error) {
	err = pool.QueryRow(ctx, progressSQL).Scan(&settled, &pending)
	return settled, pending, err
}
