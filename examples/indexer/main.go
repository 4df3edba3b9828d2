// Command indexer backfills a block index with ordered: 200 ranges of 10,000 blocks, indexed
// by 10 concurrent workers in worker processes, through a crash and a stale worker, then
// checked.
//
// The ranges are independent of each other, so each range is a key of its own (seq 0) and any
// of them may run at once; what must hold is that no range runs on two workers at once and
// that none is indexed twice or missed. (A range indexed again later, after a reorganisation,
// would be seq 1 of the same key, so it could never overtake the first indexing.)
//
// The run:
//   - a stale worker: a worker process stops itself (SIGSTOP, as a long GC pause or a frozen
//     VM would) inside its first range; its lease expires, another worker indexes the range,
//     and when the stale one is resumed its completion is refused (lost ownership) and its
//     transaction, effect included, rolls back;
//   - a crash: a worker process is killed with SIGKILL in the middle of a range; another
//     worker process takes its ranges over once their leases expire;
//   - progress while it runs: ranges indexed and the watermark (every block below it is
//     indexed);
//   - the checks at the end: every range indexed, none twice, nothing outside the plan,
//     every event counted once, the watermark at the end, the queue settled, the crashed
//     and the stale ranges indexed once by another worker, the stale completion refused.
//     The command exits 1 if any check fails.
//
// Run it with `go run ./examples/indexer --database-url postgres://…` (else DATABASE_URL), in
// a database or schema of its own. `indexer work` is one worker process; `indexer check`
// runs the checks alone.
package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/schema"
)

var (
	//go:embed sql/tables.sql
	tablesSQL string
	//go:embed sql/index_events.sql
	indexEventsSQL string
	//go:embed sql/record_run.sql
	recordRunSQL string
	//go:embed sql/progress.sql
	progressSQL string
	//go:embed sql/checks.sql
	checksSQL string
	//go:embed sql/range_runs.sql
	rangeRunsSQL string
)

// errChecksFailed is returned when the run's checks do not all pass.
var errChecksFailed = errors.New("checks failed")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd, args := "backfill", os.Args[1:]
	if len(args) > 0 && (args[0] == "work" || args[0] == "check") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "work":
		err = work(ctx, args, os.Stdout)
	case "check":
		err = checkOnly(ctx, args, os.Stdout)
	default:
		err = backfill(ctx, args, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "indexer:", err)
		os.Exit(1)
	}
}

// plan is the backfill: ranges of size blocks from block 0.
type plan struct{ ranges, size int64 }

// blockRange is a job's payload: the blocks From..To, both included.
type blockRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// options are the flags every subcommand shares.
type options struct {
	databaseURL string
	plan        plan
	lease       time.Duration
}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default DATABASE_URL)")
	fs.Int64Var(&o.plan.ranges, "ranges", 200, "ranges to index")
	fs.Int64Var(&o.plan.size, "range-size", 10_000, "blocks a range")
	fs.DurationVar(&o.lease, "lease", 5*time.Second, "how long a claim owns its range; a crashed worker's ranges wait this long")
}

// connect opens a pool and migrates the queue and the indexer's tables.
func connect(ctx context.Context, url string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := schema.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := pool.Exec(ctx, tablesSQL); err != nil {
		pool.Close()
		return nil, fmt.Errorf("create tables: %w", err)
	}
	return pool, nil
}

// enqueue enqueues every range of the plan in one batch; enqueuing them again is a no-op.
func enqueue(ctx context.Context, client *ordered.Client, p plan) error {
	events := make([]ordered.Event, p.ranges)
	for i := range events {
		r := blockRange{From: int64(i) * p.size, To: int64(i+1)*p.size - 1}
		payload, err := json.Marshal(r)
		if err != nil {
			return err
		}
		events[i] = ordered.Event{Key: fmt.Sprintf("blocks-%010d", r.From), Kind: "index_blocks", Payload: payload}
	}
	_, err := client.EnqueueMany(ctx, events)
	return err
}

// progress reports how many ranges are indexed and the watermark.
func progress(ctx context.Context, db querier, p plan) (indexed, watermark int64, err error) {
	err = db.QueryRow(ctx, progressSQL, p.ranges, p.size).Scan(&indexed, &watermark)
	return indexed, watermark, err
}

// showProgress prints the progress whenever it changes, until ctx ends.
func showProgress(ctx context.Context, db querier, p plan, out io.Writer) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	last := int64(-1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if indexed, watermark, err := progress(ctx, db, p); err == nil && indexed != last {
			printProgress(out, p, indexed, watermark)
			last = indexed
		}
	}
}

func printProgress(out io.Writer, p plan, indexed, watermark int64) {
	fmt.Fprintf(out, "progress: %d/%d ranges indexed, watermark block %d\n", indexed, p.ranges, watermark)
}
