package main

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// demoWorkerCmd is the worker process the demo starts (and kills). Its handler applies each
// event's effect in the same transaction as the completion, so an effect counts once.
func (a *app) demoWorkerCmd() *cobra.Command {
	var (
		name       string
		policyName string
		workers    int
		lease      time.Duration
	)
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Short:  "A worker process of the demo",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			decision, err := policy.ParseDecision(policyName)
			if err != nil {
				return err
			}
			return a.runWorker(cmd.Context(), workerSetup{
				client: ordered.Config{
					Lease:   lease,
					Policy:  policy.Always(decision),
					Backoff: policy.Exponential{Base: 100 * time.Millisecond, Max: 2 * time.Second},
					Logger:  quietLogger(a.stderr),
				},
				worker: ordered.WorkerConfig{Workers: workers, PollInterval: 200 * time.Millisecond, MaintenanceInterval: time.Second},
				handler: func(*pgxpool.Pool) ordered.Handler {
					return ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
						return demoHandle(ctx, tx, job, name)
					})
				},
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&name, "name", "worker", "name recorded with each effect")
	f.StringVar(&policyName, "policy", "block", "block or skip")
	f.IntVar(&workers, "workers", 8, "handlers")
	f.DurationVar(&lease, "lease", demoLease, "lease")
	return cmd
}

// demoHandle is the demo's business logic: the event's script, then one effect row.
func demoHandle(ctx context.Context, tx pgx.Tx, job *ordered.Job, worker string) error {
	if err := playScript(ctx, job, 5*time.Millisecond); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO demo_effects (key, seq, attempt, worker) VALUES ($1, $2, $3, $4)`,
		job.Key, job.Seq, job.Attempt, worker)
	return err
}
