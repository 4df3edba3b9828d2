// Package orderedtest gives tests a fresh, migrated queue of their own on a real PostgreSQL,
// and the helpers a test of a handler needs, without SQL against ordered_jobs.
//
// # A queue of its own
//
// Every call of New creates a new schema in the database named by DATABASE_URL (default: the
// server on 127.0.0.1:5432), migrates it and returns a Queue whose pool's search_path selects
// it, so tests run in parallel without seeing each other's jobs. The schema is dropped when the
// test ends, after its rows are checked against the rules the queue's functions keep (a job
// has a lease exactly when it runs, a known status, a non-empty key, ...): the test fails on a
// row that breaks one, as one written to the tables by hand may. When no database can be
// reached, the test fails: it never skips.
//
//	q := orderedtest.New(t)
//	client := q.Client(t, &ordered.Config{Policy: policy.Always(policy.Skip)})
//
// Queue.Client returns an ordered.Client on the queue (the test fails on a bad config);
// Queue.URL connects other processes to the same schema.
//
// # Waiting for the workers
//
// WaitDrained (or Queue.WaitDrained) returns once the queue is at rest: no job is running and
// none is queued that could run, now or after its retry delay. Jobs queued behind a blocked job
// of their key do not count: they wait for an operator. It reports what became of the jobs:
// how many are done, which failed for good (with their last errors), how many are held.
//
//	d, err := q.WaitDrained(ctx)
//	require.NoError(t, err)
//	require.Empty(t, d.Failed)
//
// # Checking a history
//
// Jobs (or Queue.Jobs) reads every job's state by key and seq, as package history wants it:
// with the events the test enqueued and the starts and effects its handler recorded, it makes
// a history.History for history.Check.
//
//	jobs, err := q.Jobs(ctx)
//	require.NoError(t, err)
//	report := history.Check(history.History{Enqueued: sent, Jobs: jobs, Effects: effects})
//	require.True(t, report.Clean(true), "%v", report.Problems)
//
// # Verifying a handler through faults
//
// Verify runs a workload over many keys through a handler while it kills the workers'
// connections, stalls attempts past their lease and restarts workers, then checks the history:
// the handler records each effect with RecordEffect (or RecordEffectTx), and any lost job,
// order inversion, duplicate or missing effect fails the test with the report.
//
//	orderedtest.Verify(t, handler, orderedtest.VerifyOptions{})
package orderedtest

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/testdb"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
)

// DefaultURL is used when DATABASE_URL is not set.
const DefaultURL = testdb.DefaultURL

// MaxConnsDefault is the size of the pool New returns.
const MaxConnsDefault = testdb.MaxConnsDefault

// DrainPollInterval is how often WaitDrained looks at the queue.
const DrainPollInterval = 10 * time.Millisecond

// DatabaseURL returns DATABASE_URL, or DefaultURL when it is empty.
func DatabaseURL() string { return testdb.DatabaseURL() }

// Queue is a migrated queue in a schema of its own.
type Queue struct {
	// Schema is the schema's name.
	Schema string
	// URL connects to the database with search_path set to Schema, for other processes.
	URL string
	// Pool is a pool on the schema, closed when the test ends.
	Pool *pgxpool.Pool
}

// New creates a fresh migrated queue for t and removes it when t ends.
func New(t testing.TB) *Queue {
	t.Helper()
	q := testdb.New(t)
	return &Queue{Schema: q.Schema, URL: q.URL, Pool: q.Pool}
}

// Pool is New(t).Pool.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return New(t).Pool
}

// Client returns a client on the queue with cfg (nil: the defaults); t fails if cfg is invalid.
func (q *Queue) Client(t testing.TB, cfg *ordered.Config) *ordered.Client {
	t.Helper()
	c, err := ordered.NewClient(q.Pool, cfg)
	if err != nil {
		t.Fatalf("orderedtest: %v", err)
	}
	return c
}

// Querier is what the helpers read through: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx whose
// search_path selects the queue.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Drained is a queue at rest, as WaitDrained found it.
type Drained struct {
	// Done counts the jobs completed (and not yet archived).
	Done int
	// Failed are the jobs failed for good, by key and seq; Blocking marks those that hold
	// their key (block policy).
	Failed []ordered.FailedJob
	// Held counts the jobs queued behind a blocked job of their key: they run only after a
	// replay or a skip.
	Held int
}

var (
	//go:embed queries/drained.sql
	drainedSQL string
	//go:embed queries/failed.sql
	failedSQL string
	//go:embed queries/jobs.sql
	jobsSQL string
)

// WaitDrained is WaitDrained on the queue's pool.
func (q *Queue) WaitDrained(ctx context.Context) (Drained, error) { return WaitDrained(ctx, q.Pool) }

// WaitDrained waits until no job is running and none is queued that could run (a job held
// behind a blocked job of its key does not count), then reports the queue's state. It looks
// every DrainPollInterval; if ctx ends first, its error says what still ran. A job delayed far
// into the future (Event.RunAt, a long backoff) keeps it waiting until the job has run.
func WaitDrained(ctx context.Context, db Querier) (Drained, error) {
	tick := time.NewTicker(DrainPollInterval)
	defer tick.Stop()
	notDrained := "not drained"
	for {
		var d Drained
		var running, queued int
		if err := db.QueryRow(ctx, drainedSQL).Scan(&d.Done, &d.Held, &running, &queued); err != nil {
			if ctx.Err() != nil {
				return Drained{}, fmt.Errorf("orderedtest: %s: %w", notDrained, context.Cause(ctx))
			}
			return Drained{}, fmt.Errorf("orderedtest: wait drained: %w", err)
		}
		if running == 0 && queued == 0 {
			failed, err := failedJobs(ctx, db)
			if err != nil {
				return Drained{}, err
			}
			d.Failed = failed
			return d, nil
		}
		notDrained = fmt.Sprintf("not drained, %d jobs running and %d queued", running, queued)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return Drained{}, fmt.Errorf("orderedtest: %s: %w", notDrained, context.Cause(ctx))
		}
	}
}

func failedJobs(ctx context.Context, db Querier) ([]ordered.FailedJob, error) {
	rows, err := db.Query(ctx, failedSQL)
	if err != nil {
		return nil, fmt.Errorf("orderedtest: failed jobs: %w", err)
	}
	failed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ordered.FailedJob, error) {
		var j ordered.FailedJob
		var payload []byte
		var finished *time.Time
		err := r.Scan(&j.ID, &j.Key, &j.Seq, &j.Kind, &payload, &j.Blocking, &j.Attempts,
			&j.MaxAttempts, &j.LastError, &j.CreatedAt, &finished)
		j.Payload = json.RawMessage(payload)
		if finished != nil {
			j.FinishedAt = *finished
		}
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("orderedtest: failed jobs: %w", err)
	}
	return failed, nil
}

// Jobs is Jobs on the queue's pool.
func (q *Queue) Jobs(ctx context.Context) ([]history.Job, error) { return Jobs(ctx, q.Pool) }

// Jobs reads every job's state (queued, running, done, failed or blocked) and, for a finished
// job, when it finished, by key and then seq: the Jobs of a history.History. Archived jobs are
// gone from the queue: check a history before they are archived (WorkerConfig.Retention).
func Jobs(ctx context.Context, db Querier) ([]history.Job, error) {
	rows, err := db.Query(ctx, jobsSQL)
	if err != nil {
		return nil, fmt.Errorf("orderedtest: jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Job, error) {
		var j history.Job
		var finished *time.Time
		err := r.Scan(&j.Key, &j.Seq, &j.Status, &finished)
		if finished != nil {
			j.FinishedAt = *finished
		}
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("orderedtest: jobs: %w", err)
	}
	return jobs, nil
}
