package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// backfill enqueues the plan, runs worker processes through a stale worker and a crash while
// showing progress, and runs the checks.
func backfill(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("indexer", flag.ContinueOnError)
	o.register(fs)
	workers := fs.Int("workers", 10, "ranges each worker process indexes at once")
	fetch := fs.Duration("fetch-time", 20*time.Millisecond, "how long fetching a range's blocks takes")
	crashAt := fs.Int64("crash-at", 20, "the crashing worker dies in the middle of its range number crash-at")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *crashAt < 1 || *crashAt >= o.plan.ranges {
		return fmt.Errorf("--crash-at %d: want 1 to %d (one range less than --ranges)", *crashAt, o.plan.ranges-1)
	}
	out = &lockedWriter{w: out}
	pool, err := connect(ctx, o.databaseURL, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	if indexed, _, err := progress(ctx, pool, o.plan); err != nil || indexed > 0 {
		return errors.Join(err, fmt.Errorf("the database already holds an index: run in a fresh database or schema (`indexer check` checks this one)"))
	}
	client, err := ordered.NewClient(pool, nil)
	if err != nil {
		return err
	}
	if err := enqueue(ctx, client, o.plan); err != nil {
		return err
	}
	fmt.Fprintf(out, "enqueued %d ranges of %d blocks\n", o.plan.ranges, o.plan.size)

	progressCtx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); showProgress(progressCtx, pool, o.plan, out) }()
	defer func() { stopProgress(); <-progressDone }()

	var f fleet
	defer f.killAll() // on an early return, leave no worker behind
	common := []string{"--database-url", o.databaseURL, "--ranges", itoa(o.plan.ranges),
		"--range-size", itoa(o.plan.size), "--lease", o.lease.String(), "--fetch-time", fetch.String()}
	var s scenario
	if s.staleRange, s.crashRange, err = f.run(ctx, out, common, *workers, *crashAt); err != nil {
		return err
	}
	if err := waitIndexed(ctx, pool, s.staleRange); err != nil {
		return err
	}
	fmt.Fprintf(out, "range %d is indexed by another worker: resuming the stale worker\n", s.staleRange)
	if err := f.stale.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	var completed, recovered int64
	if err := f.stale.await(ctx, summaryFormat, &completed, &recovered, &s.staleLost); err != nil {
		return err
	}
	if err := errors.Join(f.stale.wait(), f.worker.wait()); err != nil {
		return err
	}
	stopProgress()
	<-progressDone
	indexed, watermark, err := progress(ctx, pool, o.plan)
	if err != nil {
		return err
	}
	printProgress(out, o.plan, indexed, watermark)
	return runChecks(ctx, pool, client, o.plan, &s, out)
}

// fleet is the worker processes of a backfill.
type fleet struct{ stale, crash, worker *child }

// run starts a worker that stalls in its first range, then one that crashes in its range
// number crashAt, which it kills with SIGKILL, and then the worker that finishes the job.
func (f *fleet) run(ctx context.Context, out io.Writer, common []string, workers int, crashAt int64) (staleRange, crashRange int64, err error) {
	self, err := os.Executable() // the workers are this program's `work` command
	if err != nil {
		return 0, 0, err
	}
	if f.stale, err = startChild(self, "stale", slices.Concat(common, []string{"--workers", "1", "--stall-at", "1"}), out); err != nil {
		return 0, 0, err
	}
	if err := f.stale.await(ctx, "stalled in range %d", &staleRange); err != nil {
		return 0, 0, err
	}
	crashArgs := slices.Concat(common, []string{"--workers", strconv.Itoa(workers), "--crash-at", itoa(crashAt)})
	if f.crash, err = startChild(self, "crash", crashArgs, out); err != nil {
		return 0, 0, err
	}
	if err := f.crash.await(ctx, "crash point in range %d", &crashRange); err != nil {
		return 0, 0, err
	}
	if err := f.crash.cmd.Process.Kill(); err != nil {
		return 0, 0, err
	}
	fmt.Fprintf(out, "killed worker crash with SIGKILL in the middle of range %d: %v\n", crashRange, f.crash.wait())
	f.worker, err = startChild(self, "worker", slices.Concat(common, []string{"--workers", strconv.Itoa(workers)}), out)
	return staleRange, crashRange, err
}

func (f *fleet) killAll() {
	for _, c := range []*child{f.stale, f.crash, f.worker} {
		if c != nil && c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill() // SIGKILL ends a stopped process too
			_ = c.wait()
		}
	}
}

// waitIndexed waits until the range has been indexed.
func waitIndexed(ctx context.Context, db querier, rangeFrom int64) error {
	for {
		runs, err := rangeRuns(ctx, db, rangeFrom)
		if err != nil || len(runs) > 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// child is a worker process; its output goes to the backfill's, prefixed with its name.
type child struct {
	name  string
	cmd   *exec.Cmd
	lines chan string
}

func startChild(bin, name string, args []string, out io.Writer) (*child, error) {
	cmd := exec.Command(bin, append([]string{"work", "--name", name}, args...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{name: name, cmd: cmd, lines: make(chan string, 64)} // a worker prints a few lines
	go func() {
		defer close(c.lines)
		for s := bufio.NewScanner(stdout); s.Scan(); {
			fmt.Fprintf(out, "[%s] %s\n", name, s.Text())
			c.lines <- s.Text()
		}
	}()
	return c, nil
}

// await reads the child's output until a line matches format, scanning it into args.
func (c *child) await(ctx context.Context, format string, args ...any) error {
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				return fmt.Errorf("worker %s ended before %q: %v", c.name, format, c.cmd.Wait())
			}
			if n, err := fmt.Sscanf(line, format, args...); err == nil && n == len(args) {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// wait reads the rest of the child's output and waits for it to exit.
func (c *child) wait() error {
	for range c.lines {
	}
	if err := c.cmd.Wait(); err != nil {
		return fmt.Errorf("worker %s: %w", c.name, err)
	}
	return nil
}

// lockedWriter serialises the lines of the backfill and its workers.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
