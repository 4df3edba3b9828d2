package demo

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// WorkerCommand is the hidden subcommand that runs a worker process of the demo, with the flags
// --database-url, --schema (the demo's, set per session), --name, --policy, --workers and
// --lease (see Worker).
const WorkerCommand = "demo-worker"

// Lease is the lease of the demo's workers.
const Lease = 2 * time.Second

// Worker is a worker process of the demo. Its handler applies each event's effect in the same
// transaction as the completion, so an effect counts once.
type Worker struct {
	// Name is recorded with each effect.
	Name    string
	Policy  policy.Decision
	Workers int
	Lease   time.Duration
}

// Config is the worker's client configuration; logger takes its logs.
func (w Worker) Config(logger *slog.Logger) ordered.Config {
	return ordered.Config{
		Lease:   w.Lease,
		Policy:  policy.Always(w.Policy),
		Backoff: policy.Exponential{Base: 100 * time.Millisecond, Max: 2 * time.Second},
		Logger:  logger,
	}
}

// WorkerConfig is the configuration of the worker's runtime.
func (w Worker) WorkerConfig() ordered.WorkerConfig {
	return ordered.WorkerConfig{Workers: w.Workers, PollInterval: 200 * time.Millisecond, MaintenanceInterval: time.Second}
}

// Handler is the demo's business logic: the event's script, then one effect row.
func (w Worker) Handler() ordered.Handler {
	return ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
		if err := harness.Play(ctx, job, 5*time.Millisecond); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, effectSQL, job.Key, job.Seq, job.Attempt, w.Name)
		return err
	})
}
