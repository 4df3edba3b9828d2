package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/ordered"
)

// querier is what the read-only queries need: a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// scenario is what a backfill did to its workers: the ranges the stale and the crashed worker
// were in, and the attempts the stale one lost.
type scenario struct {
	staleRange, crashRange int64
	staleLost              int64
}

// check is one line of the report.
type check struct {
	ok           bool
	name, detail string
}

// checkOnly runs the checks on an index without running the backfill's scenario.
func checkOnly(ctx context.Context, args []string, out io.Writer) error {
	var o options
	fs := flag.NewFlagSet("indexer check", flag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	pool, err := connect(ctx, o.databaseURL, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := ordered.NewClient(pool, nil)
	if err != nil {
		return err
	}
	return runChecks(ctx, pool, client, o.plan, nil, out)
}

// runChecks prints the checks and returns errChecksFailed unless all pass; s adds the checks
// of the backfill's scenario.
func runChecks(ctx context.Context, db querier, client *ordered.Client, p plan, s *scenario, out io.Writer) error {
	checks, err := indexChecks(ctx, db, client, p)
	if err != nil {
		return err
	}
	if s != nil {
		crash, err := takenOver(ctx, db, s.crashRange, "crash")
		if err != nil {
			return err
		}
		stale, err := takenOver(ctx, db, s.staleRange, "stale")
		if err != nil {
			return err
		}
		checks = append(checks, crash, stale, check{s.staleLost >= 1, "the stale worker's completion was refused",
			fmt.Sprintf("lost ownership %d", s.staleLost)})
	}
	failed := 0
	for _, c := range checks {
		mark := "ok  "
		if !c.ok {
			mark, failed = "FAIL", failed+1
		}
		fmt.Fprintf(out, "check %s %s (%s)\n", mark, c.name, c.detail)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d", errChecksFailed, failed, len(checks))
	}
	fmt.Fprintf(out, "all %d checks passed\n", len(checks))
	return nil
}

// indexChecks checks the index against the plan, and the queue.
func indexChecks(ctx context.Context, db querier, client *ordered.Client, p plan) ([]check, error) {
	var missing, twice, unplanned, counted, stored int64
	if err := db.QueryRow(ctx, checksSQL, p.ranges, p.size).Scan(&missing, &twice, &unplanned, &counted, &stored); err != nil {
		return nil, err
	}
	_, watermark, err := progress(ctx, db, p)
	if err != nil {
		return nil, err
	}
	st, err := client.Stats(ctx)
	if err != nil {
		return nil, err
	}
	blocks := p.ranges * p.size
	events := blocks / 1000 // an event in every block whose number ends in 007
	if blocks%1000 > 7 {
		events++
	}
	return []check{
		{missing == 0, "every range indexed", fmt.Sprintf("%d of %d missing", missing, p.ranges)},
		{twice == 0, "no range indexed twice", fmt.Sprintf("%d indexed more than once", twice)},
		{unplanned == 0, "nothing indexed outside the plan", fmt.Sprintf("%d ranges outside it", unplanned)},
		{stored == events && counted == events, "every event stored and counted once",
			fmt.Sprintf("%d stored, %d counted, want %d", stored, counted, events)},
		{watermark == blocks, "watermark at the end", fmt.Sprintf("block %d of %d", watermark, blocks)},
		{st.Done == p.ranges && st.Queued+st.Running+st.Failed+st.Blocked == 0, "every job done, none failed",
			fmt.Sprintf("%d done, %d queued, %d running, %d failed", st.Done, st.Queued, st.Running, st.Failed+st.Blocked)},
	}, nil
}

// takenOver checks that the range a worker was in when it was stopped or killed was indexed
// once, by another worker, on a later attempt.
func takenOver(ctx context.Context, db querier, rangeFrom int64, worker string) (check, error) {
	runs, err := rangeRuns(ctx, db, rangeFrom)
	if err != nil {
		return check{}, err
	}
	ok := len(runs) == 1 && runs[0].worker != worker && runs[0].attempt > 1
	return check{ok, fmt.Sprintf("range %d of the %s worker taken over", rangeFrom, worker), fmt.Sprintf("runs %v", runs)}, nil
}

// run is one committed indexing of a range.
type run struct {
	worker  string
	attempt int
}

func (r run) String() string { return fmt.Sprintf("%s on attempt %d", r.worker, r.attempt) }

func rangeRuns(ctx context.Context, db querier, rangeFrom int64) ([]run, error) {
	rows, err := db.Query(ctx, rangeRunsSQL, rangeFrom)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (run, error) {
		var x run
		err := r.Scan(&x.worker, &x.attempt)
		return x, err
	})
}
