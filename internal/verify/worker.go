package verify

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// WorkerCommand is the hidden subcommand that runs a worker process of the chaos run, with the
// flags --database-url, --schema (the run's, set per session), --policy, --workers, --lease,
// --work and --transactional (see Worker).
const WorkerCommand = "verify-worker"

// Worker is a worker process of the chaos run: it records each attempt's start and applies
// each effect, transactionally (committed with the completion) or at least once (before it,
// fenced by the claim).
type Worker struct {
	Policy        policy.Decision
	Workers       int
	Lease         time.Duration
	Transactional bool
	// Work is the mean time spent on a job.
	Work time.Duration
	// Batch, if positive, makes the process a batch worker of this BatchSize (BatchHandler):
	// the at-least-once runs mix such processes with the others.
	Batch int
}

// Config is the worker's client configuration; logger takes its logs.
func (w Worker) Config(logger *slog.Logger) ordered.Config {
	return ordered.Config{
		Lease:   w.Lease,
		Policy:  policy.Always(w.Policy),
		Backoff: policy.Exponential{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:  logger,
	}
}

// WorkerConfig is the configuration of the worker's runtime.
func (w Worker) WorkerConfig() ordered.WorkerConfig {
	return ordered.WorkerConfig{
		Workers: w.Workers, PollInterval: 100 * time.Millisecond, MaintenanceInterval: 300 * time.Millisecond,
		BatchSize: w.Batch,
	}
}

// Handler is the worker's handler; it records the starts through pool.
func (w Worker) Handler(pool *pgxpool.Pool) ordered.Handler {
	pid := os.Getpid()
	if w.Transactional {
		return ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
			if err := w.attempt(ctx, pool, job, pid, ""); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, effectSQL, job.Key, job.Seq, job.ClaimVersion)
			return err
		})
	}
	return ordered.HandlerFunc(func(ctx context.Context, job *ordered.Job) error {
		if err := w.attempt(ctx, pool, job, pid, ""); err != nil {
			return err
		}
		_, err := pool.Exec(ctx, fencedEffectSQL, job.Key, job.Seq, job.ClaimVersion, job.ID, "")
		return err
	})
}

// BatchHandler is the batch worker's handler: each job of the batch in order as Handler runs
// it at least once; the first that fails stops the batch.
func (w Worker) BatchHandler(pool *pgxpool.Pool) ordered.BatchHandlerFunc {
	pid := os.Getpid()
	return func(ctx context.Context, jobs []*ordered.Job) (int, error) {
		batch := fmt.Sprintf("%d/%d", jobs[0].ID, jobs[0].ClaimVersion)
		for i, job := range jobs {
			if err := w.attempt(ctx, pool, job, pid, batch); err != nil {
				return i, err
			}
			if _, err := pool.Exec(ctx, fencedEffectSQL, job.Key, job.Seq, job.ClaimVersion, job.ID, batch); err != nil {
				return i, err
			}
		}
		return len(jobs), nil
	}
}

// attempt records the attempt's start (under batch, if a batch worker's), then plays the
// event's script.
func (w Worker) attempt(ctx context.Context, pool *pgxpool.Pool, job *ordered.Job, pid int, batch string) error {
	if _, err := pool.Exec(ctx, startSQL, job.Key, job.Seq, job.ClaimVersion, pid, batch); err != nil {
		return err
	}
	return harness.Play(ctx, job, w.Work)
}
