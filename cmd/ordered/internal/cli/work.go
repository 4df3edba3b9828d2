package cli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

const workLong = `Work runs workers that execute COMMAND through /bin/sh once per job, with the job's JSON
payload on standard input and in its environment ORDERED_JOB_ID, ORDERED_KEY, ORDERED_SEQ,
ORDERED_ATTEMPT, ORDERED_KIND, ORDERED_CLAIM_VERSION (the claim's fencing token: it grows with
every claim of the job) and ORDERED_IDEMPOTENCY_KEY ("key/seq", the same on every attempt). A
system that COMMAND changes can refuse a stale effect: keep per key the highest (seq, claim
version) accepted and refuse a lower one; and drop a retry whose idempotency key it has seen.
COMMAND does not get DATABASE_URL or the PG* variables unless --exec-database-env is given.

Exit 0 completes the job; exit 65 (EX_DATAERR) fails it for good and the --policy decides for
its key; any other exit retries it with backoff. The lease is renewed while COMMAND runs; with
--job-timeout, a COMMAND that runs that long is ended as below and its job retried, the
attempt counted, so a job whose command always hangs fails for good after its attempts.

COMMAND and every process it starts (in its process group or not, in the background or not)
never outlive its claim: when the claim is lost or its renewals fail, when the worker stops at
once, when the worker dies (even by SIGKILL), and when the guard process that runs COMMAND is
killed, they get SIGTERM, then SIGKILL after --kill-grace (the shell of a killed guard gets
SIGKILL at once). A COMMAND ended so never completes its job, whatever its exit status. When
COMMAND exits, what it left running is ended the same way before the job counts as done.

With --batch N, COMMAND runs once per batch: up to N consecutive ready jobs of one key, in
seq order, under one claim. Its standard input is the batch as JSON Lines, one job a line:
{"id", "key", "seq", "kind", "attempt", "claim_version", "idempotency_key", "payload"}; its
environment has ORDERED_KEY, ORDERED_BATCH_SIZE (the jobs in this batch), ORDERED_FIRST_SEQ,
ORDERED_LAST_SEQ and ORDERED_PROGRESS_FILE. Exit 0 completes the whole batch. Otherwise the
jobs COMMAND finished are those whose seqs it appended to ORDERED_PROGRESS_FILE, one a line,
in the batch's order from its first job (echo "$seq" >> "$ORDERED_PROGRESS_FILE"): they are
completed, the exit status applies to the next job (65 fails it for good, any other retries
it), and the jobs after it go back to the queue unrun, their attempts not counted.

SIGINT or SIGTERM drains: no new jobs, running ones finish. A second signal stops at once
(running jobs go back to the queue, their attempts not counted). Under systemd, set
KillMode=mixed, so that a stop signals the worker alone and its commands finish.`

// workFlags are the flags of work.
type workFlags struct {
	command     string
	workers     int
	lease       time.Duration
	maxAttempts int
	policyName  string
	poll        time.Duration
	pollOnly    bool
	metricsAddr string
	killGrace   time.Duration
	databaseEnv bool
	name        string
	batch       int
	jobTimeout  time.Duration
}

func (a *app) workCmd() *cobra.Command {
	var w workFlags
	cmd := &cobra.Command{
		Use:   "work --exec COMMAND",
		Short: "Run workers that execute COMMAND once per job",
		Long:  workLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("kill-grace") {
				w.killGrace = min(killGraceDefault, w.lease/6)
			}
			return a.work(cmd.Context(), w)
		},
	}
	f := cmd.Flags()
	f.StringVar(&w.command, "exec", "", "shell command to run once per job (required)")
	f.IntVar(&w.workers, "workers", ordered.WorkersDefault, "jobs run at once")
	f.DurationVar(&w.lease, "lease", ordered.LeaseDefault, "how long a claim owns its job; renewed while the command runs")
	f.IntVar(&w.maxAttempts, "max-attempts", ordered.MaxAttemptsDefault, "a job fails for good after this many attempts (or fewer, if it was enqueued with fewer)")
	f.DurationVar(&w.jobTimeout, "job-timeout", 0, "end COMMAND once it has run this long (per job, or per batch with --batch; then --kill-grace applies) and retry the job; 0: no limit")
	f.StringVar(&w.policyName, "policy", "block", "when a key's job fails for good: block the key, or skip to its next job")
	f.DurationVar(&w.poll, "poll", ordered.PollIntervalDefault, "poll interval when no notification arrives")
	f.BoolVar(&w.pollOnly, "poll-only", false, "do not LISTEN; poll every --poll (implied by --pooler transaction)")
	f.StringVar(&w.metricsAddr, "metrics-addr", "", metricsAddrUsage)
	f.DurationVar(&w.killGrace, "kill-grace", 0, "how long COMMAND's processes get between SIGTERM and SIGKILL (at most --lease/2; default 5s or --lease/6, whichever is shorter)")
	f.StringVar(&w.name, "name", "", "this worker's name, recorded with each job it claims and shown by ordered ui (default: ordered work HOST:PID)")
	f.IntVar(&w.batch, "batch", 0, "run COMMAND once per batch of up to N consecutive jobs of one key (JSON Lines on stdin; see above); 0: once per job")
	f.BoolVar(&w.databaseEnv, "exec-database-env", false, "give COMMAND the worker's DATABASE_URL (--database-url when set) and PG* variables")
	return cmd
}

// work runs the workers until a signal stops them (see runWorker).
func (a *app) work(ctx context.Context, w workFlags) error {
	if err := validateWorkFlags(w.command, w.workers, w.lease, w.maxAttempts, w.poll, w.killGrace); err != nil {
		return err
	}
	if w.batch < 0 || w.batch > ordered.BatchSizeMax {
		return fmt.Errorf("--batch must be between 0 and %d", ordered.BatchSizeMax)
	}
	if w.jobTimeout < 0 {
		return errors.New("--job-timeout must not be negative (0: no limit)")
	}
	execCfg := execConfig{
		command: w.command,
		grace:   w.killGrace,
		env:     commandEnv(os.Environ(), a.databaseURL, w.databaseEnv),
	}
	decision, err := policyFlag(w.policyName)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	logger := slog.New(slog.NewTextHandler(a.stderr, nil))
	return a.runWorker(ctx, workerSetup{
		client: ordered.Config{Lease: w.lease, Policy: policy.Always(decision), Logger: logger},
		worker: ordered.WorkerConfig{
			Workers: w.workers, PollInterval: w.poll, PollOnly: w.pollOnly, Registerer: reg, MaxAttempts: w.maxAttempts,
			StopGrace: w.killGrace, Name: cmp.Or(w.name, defaultWorkerName()), BatchSize: w.batch,
			JobTimeout: w.jobTimeout,
		},
		handler:  func(*pgxpool.Pool) ordered.Handler { return execHandler(execCfg, a) },
		batchFor: batchHandlerIf(w.batch > 0, execCfg, a),
		started: func(r workerRun) (func(), error) {
			if w.metricsAddr == "" {
				return func() {}, nil
			}
			srv, addr, err := serveMetrics(w.metricsAddr, reg, r)
			if err != nil {
				return nil, err
			}
			logger.Info("ordered: serving /metrics, /healthz and /readyz", "addr", addr)
			return func() { srv.Close() }, nil
		},
	})
}

// validateWorkFlags refuses values out of range, by the flag's name.
func validateWorkFlags(command string, workers int, lease time.Duration, maxAttempts int, poll, killGrace time.Duration) error {
	switch {
	case command == "":
		return errors.New("--exec is required")
	case workers < 1:
		return errors.New("--workers must be at least 1")
	case lease < ordered.LeaseMin:
		return fmt.Errorf("--lease must be at least %v", ordered.LeaseMin)
	case maxAttempts < 1 || maxAttempts > math.MaxInt32:
		return fmt.Errorf("--max-attempts must be between 1 and %d", math.MaxInt32)
	case poll < ordered.PollIntervalMin:
		return fmt.Errorf("--poll must be at least %v", ordered.PollIntervalMin)
	case killGrace <= 0:
		return errors.New("--kill-grace must be positive")
	case killGrace > lease/2:
		// Within the bound of WorkerConfig.StopGrace, so the library never refuses it.
		return fmt.Errorf("--kill-grace %v is too long for --lease %v: it must be at most half of it", killGrace, lease)
	}
	return nil
}

// defaultWorkerName is "ordered work HOST:PID".
func defaultWorkerName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("ordered work %s:%d", host, os.Getpid())
}
