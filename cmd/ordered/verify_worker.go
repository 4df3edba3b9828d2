package main

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

const (
	verifyStartSQL  = `INSERT INTO verify_starts (key, seq, claim_version, pid) VALUES ($1, $2, $3, $4)`
	verifyEffectSQL = `INSERT INTO verify_effects (key, seq, claim_version) VALUES ($1, $2, $3)`
	// verifyFencedEffectSQL applies an effect only while the claim is current: a receiver that
	// honours fencing tokens.
	verifyFencedEffectSQL = `INSERT INTO verify_effects (key, seq, claim_version)
SELECT $1, $2, $3 WHERE EXISTS (
    SELECT 1 FROM ordered_jobs WHERE id = $4 AND claim_version = $3 AND status = 'running'
      AND lease_until > clock_timestamp())`
)

// verifyWorkerCmd is a worker process of `ordered verify`: it records each attempt's start
// and applies each effect, transactionally or at least once.
func (a *app) verifyWorkerCmd() *cobra.Command {
	var (
		policyName    string
		workers       int
		lease         time.Duration
		transactional bool
		work          time.Duration
	)
	cmd := &cobra.Command{
		Use:    "verify-worker",
		Short:  "A worker process of the chaos run",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			decision, err := policy.ParseDecision(policyName)
			if err != nil {
				return err
			}
			pid := os.Getpid()
			return a.runWorker(cmd.Context(), workerSetup{
				client: ordered.Config{
					Lease:   lease,
					Policy:  policy.Always(decision),
					Backoff: policy.Exponential{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
					Logger:  quietLogger(a.stderr),
				},
				worker: ordered.WorkerConfig{
					Workers: workers, PollInterval: 100 * time.Millisecond, MaintenanceInterval: 300 * time.Millisecond,
				},
				handler: func(pool *pgxpool.Pool) ordered.Handler {
					if transactional {
						return ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
							if err := verifyAttempt(ctx, pool, job, pid, work); err != nil {
								return err
							}
							_, err := tx.Exec(ctx, verifyEffectSQL, job.Key, job.Seq, job.ClaimVersion)
							return err
						})
					}
					return ordered.HandlerFunc(func(ctx context.Context, job *ordered.Job) error {
						if err := verifyAttempt(ctx, pool, job, pid, work); err != nil {
							return err
						}
						_, err := pool.Exec(ctx, verifyFencedEffectSQL, job.Key, job.Seq, job.ClaimVersion, job.ID)
						return err
					})
				},
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&policyName, "policy", "block", "block or skip")
	f.IntVar(&workers, "workers", 6, "handlers")
	f.DurationVar(&lease, "lease", time.Second, "lease")
	f.BoolVar(&transactional, "transactional", false, "commit each effect with its completion")
	f.DurationVar(&work, "work", 20*time.Millisecond, "mean time spent on a job")
	return cmd
}

// verifyAttempt records the attempt's start, then plays the event's script.
func verifyAttempt(ctx context.Context, pool *pgxpool.Pool, job *ordered.Job, pid int, work time.Duration) error {
	if _, err := pool.Exec(ctx, verifyStartSQL, job.Key, job.Seq, job.ClaimVersion, pid); err != nil {
		return err
	}
	return playScript(ctx, job, work)
}
