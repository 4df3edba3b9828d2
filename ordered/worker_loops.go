package ordered

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/ordered/internal/maintenance"
	"github.com/orderedq/ordered/ordered/internal/notifier"
	"github.com/orderedq/ordered/ordered/internal/store"
	"github.com/orderedq/ordered/policy"
	"github.com/orderedq/ordered/schema"
)

// The worker's loops that live in internal packages, built on the worker's pool: the LISTEN
// connection (internal/notifier) and maintenance (internal/maintenance).

// notifier returns the worker's LISTEN loop, or nil when it polls only: with PollOnly, or
// behind a transaction pooler, where a LISTEN lasts one transaction and its notifications go
// to no one.
func (w *Worker) notifier() *notifier.Notifier {
	if w.cfg.PollOnly {
		return nil
	}
	if w.client.cfg.Pooler == PoolerTransaction {
		w.log.Info("ordered: behind a transaction pooler: polling for jobs, not listening for notifications",
			"poll_interval", w.cfg.PollInterval)
		return nil
	}
	return &notifier.Notifier{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			return pgx.ConnectConfig(ctx, w.client.pool.Config().ConnConfig.Copy())
		},
		Notify:       func(ctx context.Context, payload string) error { return store.ListenProbe(ctx, w.db.db, payload) },
		Topic:        w.schema,
		Wake:         w.signal,
		Logger:       w.log,
		PollInterval: w.cfg.PollInterval,
	}
}

// maintainer returns the worker's maintenance loop on the worker's pool.
func (w *Worker) maintainer() *maintenance.Maintainer {
	m := &maintenance.Maintainer{
		Interval: w.cfg.MaintenanceInterval,
		Current:  w.schemaCurrent,
		FailExhausted: func(ctx context.Context) (int, error) {
			return w.db.failExhausted(ctx, ExhaustedBatchDefault, func(d policy.Decision) {
				w.metrics.failures.WithLabelValues(d.String()).Inc()
			})
		},
		ExpireGaps: func(ctx context.Context) (int, error) {
			return w.db.ExpireGaps(ctx, GapExpireBatchDefault)
		},
		ArchiveBatch: ArchiveBatchDefault,
		RefreshStats: w.refreshStats,
		Wake:         w.signal,
		Logger:       w.log,
	}
	if w.cfg.Retention >= 0 {
		m.Archive = func(ctx context.Context) (int, error) {
			return w.db.Archive(ctx, ArchiveParams{OlderThan: w.cfg.Retention})
		}
	}
	return m
}

// schemaCurrent checks that the queue's schema is still this binary's. One that another
// version migrated (or whose functions changed) since the worker started, as two passes in a
// row find it, stops the worker as Stop does, with the reason in Err: its statements are no
// longer the ones the functions answer. A check that fails otherwise (the database
// unreachable), or that reads another schema than the worker's (a session whose search_path
// was changed), counts for nothing.
func (w *Worker) schemaCurrent(ctx context.Context) bool {
	current, err := schema.CurrentSchema(ctx, w.db.db)
	if current != w.schema || !errors.Is(err, schema.ErrNotMigrated) && !errors.Is(err, schema.ErrSchemaNewer) {
		w.schemaStale = 0
		return true
	}
	if w.schemaStale++; w.schemaStale < schemaStalePasses {
		w.log.Warn("ordered: the queue's schema is not this version's; the worker stops if the next check agrees", "error", err)
		return false
	}
	err = schemaChangedError{err}
	w.lifecycle.Lock()
	defer w.lifecycle.Unlock()
	if !w.stopping { // not stopped already by its owner
		w.stopLocked() // no job starts from now on; the stopper does the rest
		w.stopErr.Store(&err)
		w.log.Error(err.Error())
	}
	return false
}

// schemaStalePasses is how many maintenance passes in a row must find the queue's schema
// migrated by another version before the worker stops itself.
const schemaStalePasses = 2

// schemaChangedError is why a worker stopped itself: the schema check's error, which it wraps
// (schema.ErrSchemaNewer or schema.ErrNotMigrated), told without that error's advice to
// migrate: a migrate by this older binary would put its functions back under the newer
// version's workers.
type schemaChangedError struct{ err error }

func (e schemaChangedError) Error() string {
	detail := e.err.Error()
	for _, sentinel := range []error{schema.ErrSchemaNewer, schema.ErrNotMigrated} {
		detail = strings.TrimPrefix(detail, sentinel.Error())
	}
	return "ordered: worker stopped: another version migrated the queue under it; run that version's workers" + detail
}

func (e schemaChangedError) Unwrap() error { return e.err }

// refreshStats sets the gauges from the queue's shared counts. Passes are jittered down to
// 0.8 intervals apart: counts of that age are recounted.
func (w *Worker) refreshStats(ctx context.Context) error {
	stats, err := w.db.sharedStats(ctx, w.cfg.MaintenanceInterval*4/5)
	if err != nil {
		return err
	}
	if !stats.CountedAt.IsZero() { // zero: another worker is taking the first counts
		w.metrics.observeStats(w.log, w.schema, stats)
	}
	return nil
}
