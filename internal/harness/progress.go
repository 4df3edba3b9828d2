package harness

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// progressSQL counts settled jobs (done or failed) and those still to run: queued or running
// jobs, except those waiting behind a blocked key.
const progressSQL = `SELECT
    count(*) FILTER (WHERE status IN ('done', 'failed', 'blocked')),
    count(*) FILTER (WHERE status IN ('queued', 'running') AND NOT EXISTS (
        SELECT 1 FROM ordered_jobs AS b WHERE b.key = j.key AND b.status = 'blocked'))
FROM ordered_jobs AS j`

// Progress counts the settled jobs of a run's queue (done or failed) and those still pending:
// queued or running, not held behind a blocked key. A run is over when none is pending.
func Progress(ctx context.Context, pool *pgxpool.Pool) (settled, pending int, err error) {
	err = pool.QueryRow(ctx, progressSQL).Scan(&settled, &pending)
	return settled, pending, err
}
