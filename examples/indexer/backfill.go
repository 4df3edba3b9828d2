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
	client, err := ordered.NewClient(pool, nil)
	if err != nil {
		return err
	}
	if err := enqueueFresh(ctx, pool, client, o.plan); err != nil {
		return err
	}
	fmt.Fprintf(out, "enqueued %d ranges of %d blocks\n", o.plan.ranges, o.plan.size)

	progressCtx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() { defer close(progressDone); showProgress(progressCtx, pool, o.plan, out) }()
	defer func() { stopProgress(); <-progressDone }()

	f := fleet{out: out, args: []string{"--database-url", o.databaseURL, "--ranges", itoa(o.plan.ranges),
		"--range-size", itoa(o.plan.size), "--lease", o.lease.String(), "--fetch-time", fetch.String()}}
	defer f.killAll() // on an early return, leave no worker behind
	s, err := f.run(ctx, pool, strconv.Itoa(*workers), itoa(*crashAt))
	if err != nil {
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

// enqueueFresh enqueues the plan into a database that holds no index yet: the run's
// scenario needs every range still to do.
func enqueueFresh(ctx context.Context, db querier, client *ordered.Client, p plan) error {
	indexed, _, err := progress(ctx, db, p)
	if err != nil {
		return err
	}
	if indexed > 0 {
		return errors.New("the database already holds an index: run in a fresh database or schema (`indexer check` checks this one)")
	}
	return enqueue(ctx, client, p)
}

// fleet is the worker processes of a backfill, each this program's `work` command with args.
type fleet struct {
	out                  io.Writer
	args                 []string
	stale, crash, worker *child
}

// run starts a worker that stalls in its first range, then one that it kills with SIGKILL
// in its range number crashAt, then the worker that finishes the job. Once the stalled range
// is indexed it resumes the stale worker, and it waits for both to finish.
func (f *fleet) run(ctx context.Context, db querier, workers, crashAt string) (s scenario, err error) {
	if f.stale, err = f.start("stale", "--workers", "1", "--stall-at", "1"); err != nil {
		return s, err
	}
	if err := f.stale.await(ctx, "stalled in range %d", &s.staleRange); err != nil {
		return s, err
	}
	if f.crash, err = f.start("crash", "--workers", workers, "--crash-at", crashAt); err != nil {
		return s, err
	}
	if err := f.crash.await(ctx, "crash point in range %d", &s.crashRange); err != nil {
		return s, err
	}
	if err := f.crash.cmd.Process.Kill(); err != nil {
		return s, err
	}
	fmt.Fprintf(f.out, "killed worker crash with SIGKILL in the middle of range %d: %v\n", s.crashRange, f.crash.wait())
	if f.worker, err = f.start("worker", "--workers", workers); err != nil {
		return s, err
	}

	if err := waitIndexed(ctx, db, s.staleRange); err != nil {
		return s, err
	}
	fmt.Fprintf(f.out, "range %d is indexed by another worker: resuming the stale worker\n", s.staleRange)
	if err := f.stale.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return s, err
	}
	var completed, recovered int64
	if err := f.stale.await(ctx, summaryFormat, &completed, &recovered, &s.staleLost); err != nil {
		return s, err
	}
	return s, errors.Join(f.stale.wait(), f.worker.wait())
}

func (f *fleet) start(name string, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startChild(self, name, slices.Concat(f.args, args), f.out)
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
