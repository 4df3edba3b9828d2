package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/ordered"
)

// benchQueue is a fresh migrated schema for one scenario.
type benchQueue struct {
	pool   *pgxpool.Pool
	client *ordered.Client
	schema *harness.Schema
}

// queue makes a queue in a fresh schema, with at most maxConns connections and a client with
// cfg; drop it when done.
func (b *bench) queue(ctx context.Context, maxConns int32, cfg *ordered.Config) (*benchQueue, error) {
	s, err := harness.CreateSchema(ctx, b.baseURL, fmt.Sprintf("ordered_bench_%d", time.Now().UnixNano()))
	if err != nil {
		return nil, err
	}
	q := &benchQueue{schema: s}
	if q.pool, err = s.MigratedPool(ctx, maxConns); err != nil {
		q.drop()
		return nil, err
	}
	if q.client, err = ordered.NewClient(q.pool, cfg); err != nil {
		q.drop()
		return nil, err
	}
	return q, nil
}

// drop closes the queue's pool and drops its schema.
func (q *benchQueue) drop() {
	if q.pool != nil {
		q.pool.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = q.schema.Drop(ctx)
}

// load enqueues n events over keys (seqs from 0 per key) in batches of 10,000, round robin
// over keys so that every batch touches many keys.
func load(ctx context.Context, c *ordered.Client, n, keys int, keyName func(int) string) error {
	payload := json.RawMessage(`{"amount_cents":1234,"currency":"EUR"}`)
	for lo := 0; lo < n; lo += 10_000 {
		batch := make([]ordered.Event, 0, min(10_000, n-lo))
		for i := lo; i < min(lo+10_000, n); i++ {
			batch = append(batch, ordered.Event{Key: keyName(i % keys), Seq: int64(i / keys), Payload: payload})
		}
		if _, err := c.EnqueueMany(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

func keyName(i int) string { return fmt.Sprintf("key-%06d", i) }

// drain runs a worker with a no-op handler until want jobs completed; it returns jobs/s and
// the completion latency (handler return to completion committed) p50 and p99 in ms. With
// batch > 0 the worker is a batch worker of that BatchSize.
func (b *bench) drain(ctx context.Context, q *benchQueue, handlers, want, batch int) (rate, p50, p99 float64, err error) {
	reg := prometheus.NewRegistry()
	cfg := &ordered.WorkerConfig{Workers: handlers, PollInterval: 50 * time.Millisecond, Registerer: reg, Retention: -1, BatchSize: batch}
	var w *ordered.Worker
	if batch > 0 {
		w, err = q.client.NewBatchWorker(func(_ context.Context, jobs []*ordered.Job) (int, error) { return len(jobs), nil }, cfg)
	} else {
		w, err = q.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }), cfg)
	}
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		return 0, 0, 0, err
	}
	defer w.StopAndCancel(context.WithoutCancel(ctx)) //nolint:errcheck
	for counterValue(reg, "ordered_completions_total") < float64(want) {
		if ctx.Err() != nil {
			return 0, 0, 0, ctx.Err()
		}
		time.Sleep(5 * time.Millisecond)
	}
	rate = float64(want) / time.Since(start).Seconds()
	completions := histogramOf(reg, "ordered_completion_duration_seconds")
	return rate, bucketQuantile(nil, completions, 0.5) * 1000, bucketQuantile(nil, completions, 0.99) * 1000, nil
}

func counterValue(reg *prometheus.Registry, name string) float64 {
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func histogramOf(reg *prometheus.Registry, name string) *dto.Histogram {
	families, _ := reg.Gather()
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				return m.GetHistogram()
			}
		}
	}
	return nil
}
