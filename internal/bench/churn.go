package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderedq/ordered/ordered"
)

// benchChurn enqueues at a steady rate while a worker drains and archives, and samples the
// claim latency and the table's dead tuples and size.
func (b *bench) benchChurn(ctx context.Context) error {
	q, err := b.queue(ctx, 24, nil)
	if err != nil {
		return err
	}
	defer q.drop()
	reg := prometheus.NewRegistry()
	w, err := q.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{Workers: 8, PollInterval: 50 * time.Millisecond, Registerer: reg,
			Retention: 2 * time.Second, MaintenanceInterval: time.Second})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.StopAndCancel(context.WithoutCancel(ctx)) //nolint:errcheck

	run, cancel := context.WithTimeout(ctx, b.Sizes.Churn)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { produce(run, q.client, b.Sizes.ChurnRate) })
	vacuumNote, err := b.standInIfAutovacuumOff(run, q.pool, &wg)
	if err != nil {
		return err
	}
	return b.sampleChurn(ctx, q, reg, vacuumNote)
}

// produce enqueues rate events/s over 1,000 keys until ctx is done: every 10 ms, the events
// due by then.
func produce(ctx context.Context, c *ordered.Client, rate int) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var sent int64
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due := int64(time.Since(start).Seconds() * float64(rate))
		if due <= sent {
			continue
		}
		batch := make([]ordered.Event, due-sent)
		for j := range batch {
			batch[j] = ordered.Event{Key: keyName(rand.IntN(1_000)), Seq: sent + int64(j)}
		}
		sent = due
		_, _ = c.EnqueueMany(ctx, batch)
	}
}

// standInIfAutovacuumOff starts, in wg, a stand-in for autovacuum until ctx is done when the
// server runs none, and returns the note that says so, for the figures.
func (b *bench) standInIfAutovacuumOff(ctx context.Context, pool *pgxpool.Pool, wg *sync.WaitGroup) (string, error) {
	var autovacuum string
	var naptime time.Duration
	if err := pool.QueryRow(ctx, autovacuumSettingsSQL).Scan(&autovacuum, &naptime); err != nil {
		return "", err
	}
	if autovacuum == "on" {
		return "", nil
	}
	note := fmt.Sprintf("; autovacuum is off on this server: the bench vacuums as it would, every %s", naptime)
	if b.Sizes.Churn <= naptime {
		note += ", so not within a run this short"
	}
	wg.Go(func() { standInForAutovacuum(ctx, pool, naptime) })
	return note, nil
}

// churnWindows is the number of samples of a churn run.
const churnWindows = 5

// sampleChurn adds a figure at the end of each window of the churn run: the claim latency p99
// in the window, with the job and head tables' tuples and sizes then.
func (b *bench) sampleChurn(ctx context.Context, q *benchQueue, reg *prometheus.Registry, vacuumNote string) error {
	window := b.Sizes.Churn / churnWindows
	prev := histogramOf(reg, "ordered_claim_duration_seconds")
	for i := 1; i <= churnWindows; i++ {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		cur := histogramOf(reg, "ordered_claim_duration_seconds")
		var dead, live, size, headsDead, headsSize int64
		if err := q.pool.QueryRow(ctx, tableStatsSQL).Scan(&dead, &live, &size, &headsDead, &headsSize); err != nil {
			return err
		}
		at := time.Duration(i) * window
		b.add(fmt.Sprintf("churn %s at %d/s: claim p99 (bucket bound)", at.Round(time.Second), b.Sizes.ChurnRate),
			bucketQuantile(prev, cur, 0.99)*1000, "ms", false,
			fmt.Sprintf("jobs: dead tuples %d, live %d, table+indexes %.1f MB; heads: dead tuples %d, table+indexes %.1f MB%s",
				dead, live, float64(size)/(1<<20), headsDead, float64(headsSize)/(1<<20), vacuumNote))
		prev = cur
	}
	return nil
}

// vacuumStatements are the only statements standInForAutovacuum runs, by table.
var vacuumStatements = map[string]string{
	"ordered_jobs":  "VACUUM (ANALYZE) ordered_jobs",
	"ordered_keys":  "VACUUM (ANALYZE) ordered_keys",
	"ordered_heads": "VACUUM (ANALYZE) ordered_heads",
}

// standInForAutovacuum does, on a server with autovacuum off, what autovacuum would do with the
// queue's shipped settings: every naptime, vacuum (throttled as autovacuum is) the queue tables
// past their thresholds. A pass that fails is skipped, as autovacuum would retry next time.
func standInForAutovacuum(ctx context.Context, pool *pgxpool.Pool, naptime time.Duration) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(naptime):
		}
		_ = vacuumDue(ctx, pool)
	}
}

// vacuumDue runs one pass of standInForAutovacuum on a connection of its own.
func vacuumDue(ctx context.Context, pool *pgxpool.Pool) error {
	pooled, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// The cost settings stay with the session, so it is taken from the pool and closed after.
	conn := pooled.Hijack()
	defer conn.Close(context.WithoutCancel(ctx)) //nolint:errcheck
	if _, err := conn.Exec(ctx, autovacuumCostSQL); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, autovacuumDueSQL)
	if err != nil {
		return err
	}
	due, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, table := range due {
		if _, err := conn.Exec(ctx, vacuumStatements[table]); err != nil {
			return err
		}
	}
	return nil
}
