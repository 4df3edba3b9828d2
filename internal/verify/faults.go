package verify

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/internal/invariant"
)

// faults are injected at fixed points of progress (percent of the jobs settled), so that every
// run meets each of them.
var faults = []struct {
	at   int
	kind string
}{{10, "kill"}, {20, "stall"}, {30, "terminate"}, {45, "restart"}, {60, "kill"}, {70, "terminate"}, {80, "stall"}}

// progressPoll is how often the progress of a run is read.
const progressPoll = 20 * time.Millisecond

// kill is a worker killed by a fault: its pid, and when, by the database clock.
type kill struct {
	pid int
	at  time.Time
}

// injectFaults injects the faults, each when the run reaches its point, until the run drains
// (and, in the hosts mode, each healed host has claimed again: see topUp). Faults whose point
// the run did not reach before it drained (held jobs are not settled; a fast drain outruns the
// injector) are injected then, so that every run meets each of them.
func (r *run) injectFaults(ctx context.Context) error {
	plan := faults
	if r.o.hosts != nil {
		plan = hostFaults
	}
	total := len(r.enqueued)
	deadline := time.Now().Add(r.o.Timeout)
	for next := 0; ; {
		settled, pending, err := harness.Progress(ctx, r.pool)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err := r.anyExited(); err != nil {
			return err
		}
		drained := err == nil && pending == 0
		if drained && next == len(plan) {
			return r.topUp(ctx)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not drain within %s (%d jobs pending)", r.o.Timeout, pending)
		}
		if err != nil || next == len(plan) || !drained && settled*100 < plan[next].at*total {
			time.Sleep(progressPoll)
			continue
		}
		r.checkInvariants(ctx, fmt.Sprintf("before the %s at %d%%", plan[next].kind, plan[next].at))
		if err := r.inject(ctx, plan[next].kind, r.rng.IntN(len(r.procs))); err != nil {
			return err
		}
		next++
	}
}

// checkInvariants checks the queue's invariants while the run is under way (at is when), so
// that a row broken and then written again before the end is caught too. A check that fails
// (the server restarting, the session cut by a fault) is skipped: the next one, or the one at
// the end, is taken.
func (r *run) checkInvariants(ctx context.Context, at string) {
	broken, err := invariant.Violations(ctx, r.pool)
	if err != nil {
		return
	}
	for _, b := range broken {
		r.brokenMidway = append(r.brokenMidway, at+": "+b)
	}
}

// brokenInvariants is what the run's rows broke: at a check under way, then at the end.
func (r *run) brokenInvariants(ctx context.Context) ([]string, error) {
	broken, err := invariant.Violations(ctx, r.pool)
	if err != nil {
		return nil, err
	}
	return append(slices.Clip(r.brokenMidway), broken...), nil
}

// inject injects one fault; victim is the worker process a kill or a stall hits.
func (r *run) inject(ctx context.Context, fault string, victim int) error {
	switch fault {
	case "kill":
		return r.kill(ctx, victim)
	case "stall":
		// Stopped past its lease, the worker wakes up as a stale owner; the run goes on.
		p := r.procs[victim].Process
		_ = p.Signal(syscall.SIGSTOP)
		time.AfterFunc(r.o.Lease*5/2, func() { _ = p.Signal(syscall.SIGCONT) })
		r.res.stalls++
	case "terminate":
		var n int
		if err := r.pool.QueryRow(ctx, terminateSQL, appName).Scan(&n); err == nil {
			r.res.terminations += n
		}
	case "restart":
		if err := r.cluster.Restart(ctx); err != nil {
			return fmt.Errorf("restart PostgreSQL: %w", err)
		}
		r.res.restarts++
	default:
		return r.injectHostFault(ctx, fault)
	}
	return nil
}

// kill kills a worker with SIGKILL, noting when, and starts another in its place; it returns
// once that one has started its worker, so that the next fault meets a running worker.
func (r *run) kill(ctx context.Context, victim int) error {
	pid := r.procs[victim].Process.Pid
	_ = r.procs[victim].Process.Kill()
	<-r.procs[victim].Exited()
	var at time.Time
	if err := r.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&at); err == nil {
		r.kills = append(r.kills, kill{pid: pid, at: at})
	}
	p, err := r.spawn()
	if err != nil {
		return err
	}
	r.procs[victim] = p
	r.res.kills++
	return r.waitReady(ctx, p)
}
