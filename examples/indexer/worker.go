package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderedq/ordered/ordered"
)

// summaryFormat is a worker's last line: its completions, the expired leases it recovered,
// and the attempts whose claim it lost (their completions refused).
const summaryFormat = "summary: completed %d, recovered %d, lost %d"

// work runs one worker process until every range of the plan is indexed, or a signal.
func work(ctx context.Context, args []string, out io.Writer) error {
	var o options
	var ix indexer
	fs := flag.NewFlagSet("indexer work", flag.ContinueOnError)
	o.register(fs)
	workers := fs.Int("workers", 10, "ranges indexed at once")
	fs.StringVar(&ix.name, "name", "worker", "the worker's name in the index's records")
	fs.DurationVar(&ix.fetch, "fetch-time", 20*time.Millisecond, "how long fetching a range's blocks takes")
	fs.Int64Var(&ix.crashAt, "crash-at", 0, "hang in the middle of this worker's range number crash-at, to be killed (0: never)")
	fs.Int64Var(&ix.stallAt, "stall-at", 0, "stop this process (SIGSTOP) in its range number stall-at, until SIGCONT (0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ix.out = out
	pool, err := connect(ctx, o.databaseURL, *workers+2) // a TxHandlerFunc holds a connection
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := ordered.NewClient(pool, &ordered.Config{Lease: o.lease})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	w, err := client.NewWorker(ordered.TxHandlerFunc(ix.index), &ordered.WorkerConfig{Workers: *workers, Registerer: reg})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	err = waitAllIndexed(ctx, pool, o.plan)
	stopWorker(w)
	fmt.Fprintf(out, summaryFormat+"\n", counter(reg, "ordered_completions_total"),
		counter(reg, "ordered_expired_leases_recovered_total"), counter(reg, "ordered_lost_ownership_total"))
	if ctx.Err() != nil {
		return nil // a signal: drained
	}
	return err
}

// indexer is the handler of one worker process.
type indexer struct {
	name             string
	fetch            time.Duration
	crashAt, stallAt int64
	started          atomic.Int64
	out              io.Writer
}

// index indexes one range in the job's transaction: its events and the record of this run
// commit with the completion, or not at all.
func (ix *indexer) index(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
	var r blockRange
	if err := json.Unmarshal(job.Payload, &r); err != nil {
		return ordered.Permanent(err) // retrying cannot fix the payload
	}
	n := ix.started.Add(1)
	if n == ix.stallAt { // as a long GC pause or a frozen VM: heartbeats stop too
		fmt.Fprintf(ix.out, "stalled in range %d\n", r.From)
		if err := syscall.Kill(os.Getpid(), syscall.SIGSTOP); err != nil {
			return err
		}
	}
	select { // stands in for fetching the blocks from a node
	case <-time.After(ix.fetch):
	case <-ctx.Done():
		return context.Cause(ctx) // ErrLeaseLost: the range is someone else's now
	}
	if _, err := tx.Exec(ctx, indexEventsSQL, r.From, r.To); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, recordRunSQL, r.From, r.To, ix.name, job.Attempt, job.ClaimVersion); err != nil {
		return err
	}
	if n == ix.crashAt { // the effect is written, not committed: wait here to be killed
		fmt.Fprintf(ix.out, "crash point in range %d\n", r.From)
		<-ctx.Done()
		return context.Cause(ctx)
	}
	return nil
}

// waitAllIndexed waits until every range of the plan is indexed.
func waitAllIndexed(ctx context.Context, db querier, p plan) error {
	for {
		indexed, _, err := progress(ctx, db, p)
		if err != nil || indexed >= p.ranges {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopWorker drains the worker for up to 30 s, then cancels what still runs.
func stopWorker(w *ordered.Worker) {
	drainCtx, cancelDrain := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelDrain()
	if err := w.Stop(drainCtx); err != nil {
		cancelCtx, cancelStop := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelStop()
		_ = w.StopAndCancel(cancelCtx)
	}
}

// counter reads a counter of the worker's metrics.
func counter(reg *prometheus.Registry, name string) int64 {
	families, err := reg.Gather()
	if err != nil {
		return -1
	}
	for _, f := range families {
		if f.GetName() == name {
			var sum float64
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
			return int64(sum)
		}
	}
	return 0
}
