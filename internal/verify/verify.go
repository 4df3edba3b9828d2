// Package verify is `ordered verify`, the chaos run: on a private PostgreSQL cluster, for each
// failure policy (block, skip) and each kind of handler (transactional, at-least-once), it
// enqueues events over many keys (some flaky, one poison), runs several worker processes over
// them and injects faults while they run: SIGKILL of a worker (restarted), SIGSTOP past its
// lease then SIGCONT, pg_terminate_backend of the workers' connections, and a restart of
// PostgreSQL. Every attempt and effect is recorded on the database clock and the history is
// checked (package history). The last line of the report says whether the run is clean.
//
// The worker processes are this binary run with WorkerCommand, which the binary must dispatch
// to a worker built from a Worker.
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered/history"
)

// Options are the sizes of a chaos run.
type Options struct {
	// Keys and PerKey are the keys of each run and the events of each key.
	Keys, PerKey int
	// Processes is the number of worker processes, Workers the handlers of each.
	Processes, Workers int
	// Lease is the workers' lease, Work the mean time a handler works on a job.
	Lease, Work time.Duration
	// Timeout gives up a run that has not drained after this long.
	Timeout time.Duration
	// Hosts, when not zero, runs the hosts mode: the worker processes spread over this many
	// hosts (network namespaces), with partitions and a slow link for faults (see hosts.go).
	Hosts int

	hosts *hostsEnv // set by the hosts mode for its runs
}

// result is one run's figures.
type result struct {
	name          string
	transactional bool
	report        history.Report
	// broken names the queue's invariants that its rows broke, under way or at the end
	// (package invariant).
	broken                                []string
	kills, stalls, terminations, restarts int
	maxRecovery                           time.Duration
	elapsed                               time.Duration
	// partitions and topUps are the hosts mode's: its partitions, and the batches enqueued
	// after the drain for a healed host to claim.
	partitions []partition
	topUps     int
}

// Run runs the four runs, each in a fresh schema, and prints their figures on out. It fails
// when a run is not clean.
func Run(ctx context.Context, o Options, out io.Writer) error {
	if o.Hosts > 0 {
		return runHosts(ctx, o, out)
	}
	fmt.Fprintf(out, "starting a private PostgreSQL cluster (it is restarted during each run)\n")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return fmt.Errorf("verify needs a private PostgreSQL cluster: %w", err)
	}
	defer cluster.Close()

	var results []result
	for _, pol := range []string{"block", "skip"} {
		for _, tx := range []bool{true, false} {
			r, err := runOne(ctx, cluster, o, pol, tx)
			if err != nil {
				return fmt.Errorf("run %s: %w", r.name, err)
			}
			fmt.Fprintf(out, "run %-24s done in %s\n", r.name, r.elapsed.Round(100*time.Millisecond))
			results = append(results, r)
		}
	}
	fmt.Fprintln(out)
	return printResults(out, results)
}

// printResults prints the table of the runs, their problems and the last line.
func printResults(out io.Writer, results []result) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tenqueued\tcompleted\tfailed\theld\tlost\tdup effects\tre-executions\tinversions\tkills\tstalls\tconn kills\trestarts\tmax recovery\t")
	events := 0
	var problems []string
	for _, r := range results {
		rep := r.report
		events += rep.Enqueued
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t\n", r.name, rep.Enqueued,
			rep.Completed, rep.Failed, rep.Held, rep.Lost, rep.DuplicateEffects, rep.ReExecutions,
			rep.OrderInversions, r.kills, r.stalls, r.terminations, r.restarts, r.maxRecovery.Round(10*time.Millisecond))
		if !r.clean() {
			for _, p := range rep.Problems {
				problems = append(problems, r.name+": "+p)
			}
			for _, b := range r.broken {
				problems = append(problems, r.name+": invariant "+b)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range problems {
		fmt.Fprintln(out, "  "+p)
	}
	if !allClean(results) {
		fmt.Fprintf(out, "verify: NOT CLEAN: %d runs, %d events; see the problems above\n", len(results), events)
		return errors.New("verify: the run is not clean")
	}
	fmt.Fprintf(out, "verify: clean: %d runs, %d events, no lost job, no duplicate transactional effect, no order inversion\n", len(results), events)
	return nil
}

// allClean reports whether every run is clean.
func allClean(results []result) bool {
	for _, r := range results {
		if !r.clean() {
			return false
		}
	}
	return true
}

// clean reports whether the run kept every guarantee and left the queue's rows keeping its
// invariants.
func (r result) clean() bool {
	return r.report.Clean(r.transactional) && len(r.broken) == 0
}
