package cli

import (
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/internal/bench"
)

const benchLong = `Bench measures, in one run on this machine, against --database-url or DATABASE_URL (else the
server on 127.0.0.1:5432, else a private cluster), each scenario in a fresh schema:

  ceiling      single-row UPDATE commits/s at each concurrency (the yardstick for the ratios)
  throughput   enqueue then drain with a no-op handler: (a) 50,000 jobs over 10,000 keys,
               (b) 1,000 keys x 50, (c) one key x 5,000, with 8, 64 and 1,000 handlers
  hot key      other keys' drain rate with one key holding 1,000 vs 1,000,000 queued jobs
               behind a running head (flat means ratio >= 0.9)
  deep         claim latency p50/p99 and jobs/s with 1,000,000 jobs queued over 100,000 keys
  enqueue      bulk (batches of 10,000) and single-event (8 producers) enqueue rates, the
               single one beside a plain one-row INSERT; one producer's p50/p99 of each
  wake-up      enqueue -> handler start, p50/p99, with LISTEN/NOTIFY and poll-only
  churn        --duration of steady enqueue+drain: claim latency, dead tuples and table size
               over time, with archival and the shipped autovacuum settings

Every size is a flag (--many-jobs, --per-key, --hot-big, --handlers 8,64,1000, ...); the
defaults shown are the full run's, and a size flag given with --quick overrides that one size
of the quick set.
--quick shrinks every size to finish in about a minute (a smoke test, not a measurement).
The full run takes 10 to 15 minutes, most of it loading the million-job backlogs.`

func (a *app) benchCmd() *cobra.Command {
	var (
		quick   bool
		o       = bench.Options{Log: a.stderr}
		profile string
		sizes   = bench.Full // the size flags write here; see bench.ApplyFlags
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "The benchmark suite: throughput, hot-key flatness, deep backlog, enqueue, wake-up and churn, against this machine's commit ceiling",
		Long:  benchLong,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Sizes = bench.Full
			if quick {
				o.Sizes = bench.Quick
			}
			if err := bench.ApplyFlags(&o.Sizes, &sizes, cmd.Flags().Changed); err != nil {
				return err
			}
			if profile != "" {
				stop, err := startCPUProfile(profile)
				if err != nil {
					return err
				}
				defer stop()
			}
			o.DatabaseURL = a.url()
			return bench.Run(cmd.Context(), o, a.stdout)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&quick, "quick", false, "small sizes, about a minute (smoke test)")
	f.BoolVar(&o.JSON, "json", false, "print JSON")
	registerSizeFlags(cmd, &sizes)
	f.StringVar(&profile, "cpuprofile", "", "write a CPU profile of the bench process to this file")
	f.StringSliceVar(&o.Only, "only", nil, "run only these scenarios (the ceiling always runs): "+strings.Join(bench.ScenarioNames, ","))
	return cmd
}

// registerSizeFlags gives cmd a flag for each size, writing into sizes, with sizes' values as
// the defaults.
func registerSizeFlags(cmd *cobra.Command, sizes *bench.Sizes) {
	f := cmd.Flags()
	for _, fl := range sizes.Flags() {
		switch v := fl.Value.(type) {
		case *int:
			f.IntVar(v, fl.Name, *v, fl.Usage)
		case *time.Duration:
			f.DurationVar(v, fl.Name, *v, fl.Usage)
		case *[]int:
			f.IntSliceVar(v, fl.Name, *v, fl.Usage)
		}
	}
}

// startCPUProfile writes a CPU profile of this process to the file name until stop.
func startCPUProfile(name string) (stop func(), err error) {
	f, err := os.Create(name)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
