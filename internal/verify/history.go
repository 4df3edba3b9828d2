package verify

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered/history"
)

// readHistory reads what the run recorded.
func readHistory(ctx context.Context, pool *pgxpool.Pool, enqueued, expected []history.ID) (history.History, error) {
	h := history.History{Enqueued: enqueued, ExpectedFailures: expected}
	var err error
	if h.Jobs, err = collect(ctx, pool, jobsSQL, func(r pgx.CollectableRow) (history.Job, error) {
		var j history.Job
		var finished *time.Time
		err := r.Scan(&j.Key, &j.Seq, &j.Status, &finished)
		if finished != nil {
			j.FinishedAt = *finished
		}
		return j, err
	}); err != nil {
		return h, err
	}
	if h.Starts, err = collect(ctx, pool, startsSQL, func(r pgx.CollectableRow) (history.Start, error) {
		var s history.Start
		return s, r.Scan(&s.Key, &s.Seq, &s.ClaimVersion, &s.At, &s.Batch)
	}); err != nil {
		return h, err
	}
	h.Effects, err = collect(ctx, pool, effectsSQL, func(r pgx.CollectableRow) (history.Effect, error) {
		var e history.Effect
		return e, r.Scan(&e.Key, &e.Seq, &e.ClaimVersion, &e.Order, &e.Batch)
	})
	return h, err
}

// collect runs query and collects its rows with fn.
func collect[T any](ctx context.Context, pool *pgxpool.Pool, query string, fn pgx.RowToFunc[T]) ([]T, error) {
	rows, err := pool.Query(ctx, query)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, fn)
}

// maxRecovery is the longest recovery after any of the kills: from the kill to the next start
// of each job the killed process had started last and not finished by then.
func maxRecovery(ctx context.Context, pool *pgxpool.Pool, kills []kill) (time.Duration, error) {
	var longest time.Duration
	for _, k := range kills {
		var worst *time.Duration
		if err := pool.QueryRow(ctx, recoverySQL, k.pid, k.at).Scan(&worst); err != nil {
			return longest, err
		}
		if worst != nil && *worst > longest {
			longest = *worst
		}
	}
	return longest, nil
}
