package cli

import (
	"fmt"

	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/internal/verify"
	"github.com/orderedq/ordered/ordered"
)

const verifyLong = `Verify starts a private PostgreSQL cluster, and for each failure policy (block, skip) and
each kind of handler (transactional: effect committed with the completion; at-least-once:
effect applied before it, by a receiver that checks the claim like a fencing token, so it may
land twice but never out of order) enqueues events over many keys (some flaky, one poison),
and over a few contiguous keys half of whose events arrive shuffled while the workers run (the
keys wait on the gaps), runs several worker processes over them and injects faults while they run: SIGKILL of a worker
(restarted), SIGSTOP past its lease then SIGCONT, pg_terminate_backend of the workers'
connections, and a restart of PostgreSQL. Every attempt and effect is recorded on the
database clock and the history is checked: lost jobs, duplicated effects, re-executions,
order inversions, failures beyond the poison events, and the longest recovery after a kill.
In the at-least-once runs every other worker process is a batch worker (batches of 8
consecutive jobs of a key, Client.NewBatchWorker), beside the plain ones, under the same faults.
The last line says whether the run is clean; a run that is not exits non-zero.

Full form: 4 runs of 200 keys x 25 events, about 4 minutes. --short: 4 runs of 40 x 15,
under 2 minutes.

--hosts N (needs root and iproute2): each worker process runs on a host of its own, a network
namespace reaching the cluster over a veth link; the faults are a host's link slowed to 1
Mbit/s under load, and two hosts partitioned from the database (every packet silently
dropped) for 3 leases, then healed, plus dropped connections. Two runs (block with
transactional effects, skip with at-least-once ones); besides the history check, each
partitioned host's jobs must be taken over by another host and the host must claim again
after the heal. The time from the cut to the takeover is reported. --hosts-bench: jobs/s
with the same worker processes on 1, 2 and 4 hosts.`

func (a *app) verifyCmd() *cobra.Command {
	var (
		short, hostsBench bool
		o                 verify.Options
		command           string
	)
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "The chaos run: a workload through crashes, stalls, dropped connections and a PostgreSQL restart, with its history checked",
		Long:  verifyLong + "\n\n" + verifyExecLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Hosts < 0 {
				return fmt.Errorf("--hosts %d must not be negative (0: one host)", o.Hosts)
			}
			if short {
				o.Keys, o.PerKey = 40, 15
				if o.Hosts > 0 {
					// A partition lasts 3 leases: enough work to outlast two of them.
					o.PerKey = 40
				}
			}
			if hostsBench {
				return verify.RunHostsBench(cmd.Context(), o, a.stdout)
			}
			if cmd.Flags().Changed("exec") {
				return a.verifyExec(cmd.Context(), command, o)
			}
			return verify.Run(cmd.Context(), o, a.stdout)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&short, "short", false, "the short form (CI)")
	f.IntVar(&o.Keys, "keys", 200, "keys per run")
	f.IntVar(&o.PerKey, "per-key", 25, "events per key")
	f.IntVar(&o.Processes, "processes", 3, "worker processes")
	f.IntVar(&o.Workers, "workers", 4, "handlers per worker process")
	f.DurationVar(&o.Lease, "lease", time.Second, "lease of the workers")
	f.DurationVar(&o.Work, "work", 20*time.Millisecond, "mean time a handler works on a job")
	f.DurationVar(&o.Timeout, "timeout", 3*time.Minute, "give up a run that has not drained after this long")
	f.StringVar(&command, "exec", "", "run the workload through this shell command, as ordered work --exec runs it (see above)")
	f.BoolVar(&hostsBench, "hosts-bench", false, "instead of the chaos run (root): jobs/s of 4 worker processes on 1, 2 and 4 hosts, no faults")
	f.IntVar(&o.Hosts, "hosts", 0, "the hosts mode (root): worker processes on this many hosts (network namespaces), partitioned and slowed; 2 runs")
	return cmd
}

// verifyWorkerCmd is a worker process of the chaos run (see verify.Worker).
func (a *app) verifyWorkerCmd() *cobra.Command {
	var (
		w                verify.Worker
		policyName       string
		command, effects string
	)
	cmd := &cobra.Command{
		Use:    verify.WorkerCommand,
		Short:  "A worker process of the chaos run",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if w.Policy, err = policyFlag(policyName); err != nil {
				return err
			}
			if command != "" {
				return a.runWorker(cmd.Context(), a.announceReady(a.verifyExecWorker(w, command, effects)))
			}
			setup := workerSetup{
				client:  w.Config(quietLogger(a.stderr)),
				worker:  w.WorkerConfig(),
				handler: func(pool *pgxpool.Pool) ordered.Handler { return w.Handler(pool) },
			}
			if w.Batch > 0 {
				setup.batchFor = w.BatchHandler
			}
			return a.runWorker(cmd.Context(), a.announceReady(setup))
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.schema, "schema", "", "the run's schema")
	f.StringVar(&policyName, "policy", "block", "block or skip")
	f.IntVar(&w.Workers, "workers", 6, "handlers")
	f.DurationVar(&w.Lease, "lease", time.Second, "lease")
	f.BoolVar(&w.Transactional, "transactional", false, "commit each effect with its completion")
	f.DurationVar(&w.Work, "work", 20*time.Millisecond, "mean time spent on a job")
	f.IntVar(&w.Batch, "batch", 0, "run as a batch worker of this batch size (at-least-once)")
	f.StringVar(&command, "exec", "", "run this command per job (see verify --exec)")
	f.StringVar(&effects, "effects", "", "the file the command records its effects in")
	return cmd
}

// announceReady makes the worker of s write verify.ReadyLine on standard output once it has
// started: the chaos run injects its faults into running workers.
func (a *app) announceReady(s workerSetup) workerSetup {
	s.started = func(r workerRun) (func(), error) {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			select {
			case <-r.running:
				fmt.Fprintln(a.stdout, verify.ReadyLine)
			case <-stop: // it did not start
			}
		}()
		return func() { close(stop); <-done }, nil
	}
	return s
}
