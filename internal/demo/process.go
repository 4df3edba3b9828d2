package demo

import (
	"context"
	"fmt"
	"time"

	"github.com/orderedq/ordered/internal/harness"
)

// killAtPercent is how far the run is when a worker is killed.
const killAtPercent = 40

// pollInterval is how often the progress is read.
const pollInterval = 200 * time.Millisecond

// demoRun is what happened while the workers ran.
type demoRun struct {
	elapsed     time.Duration
	killedAt    time.Time // by the database clock
	killedName  string
	inFlight    []int64 // jobs running when the worker was killed
	killPercent int
}

// process runs the workers until every job that can finish has, killing one worker midway.
func (d *demo) process(ctx context.Context) (*demoRun, error) {
	run := &demoRun{}
	var procs []*workerProc
	defer func() { stopWorkers(procs) }()
	for _, name := range []string{"worker-1", "worker-2"} {
		p, err := d.startWorker(name)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	d.say("started 2 worker processes with %d handlers each (lease %s)", d.Workers, Lease)

	total := len(d.Events)
	start := time.Now()
	bar := newProgress(d.out, total)
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pollInterval):
		}
		// An interrupt reaches the workers too (they share the demo's process group): it is
		// the interrupt that ends the run then, not their exit.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := anyExited(procs); err != nil {
			return nil, err
		}
		settled, pending, err := harness.Progress(ctx, d.pool)
		if err != nil {
			return nil, err
		}
		bar.show(settled)
		if run.killedName == "" && settled*100 >= total*killAtPercent {
			if procs, err = d.killOne(ctx, procs, run, settled*100/total); err != nil {
				return nil, err
			}
			bar.note(fmt.Sprintf("SIGKILL %s at %d%% (%d jobs in flight); starting worker-3", run.killedName, run.killPercent, len(run.inFlight)))
			p, err := d.startWorker("worker-3")
			if err != nil {
				return nil, err
			}
			procs = append(procs, p)
		}
		if pending == 0 {
			bar.done(settled)
			run.elapsed = time.Since(start)
			return run, nil
		}
	}
}

// killOne kills the first worker with SIGKILL, noting in run what it was doing and when (by
// the database clock), and returns the workers left.
func (d *demo) killOne(ctx context.Context, procs []*workerProc, run *demoRun, percent int) ([]*workerProc, error) {
	victim := procs[0]
	if err := d.pool.QueryRow(ctx, inFlightSQL).Scan(&run.inFlight); err != nil {
		return procs, err
	}
	_ = victim.Process.Kill()
	<-victim.Exited()
	if err := d.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&run.killedAt); err != nil {
		return procs[1:], err
	}
	run.killedName, run.killPercent = victim.name, percent
	return procs[1:], nil
}
