package bench

import (
	"context"
	"fmt"
)

// benchThroughput enqueues, then drains with a no-op handler, each shape of load with each
// handler count, and reports jobs/s and the completion latency.
func (b *bench) benchThroughput(ctx context.Context) error {
	s := b.Sizes
	shapes := []struct {
		name      string
		jobs      int
		keys      int
		keyPrefix string
		// batched: the shape is drained again by a batch worker, beside the plain drain
		batched bool
	}{
		{fmt.Sprintf("(a) %d jobs over %d keys", s.Many, s.ManyKeys), s.Many, s.ManyKeys, "key", false},
		{fmt.Sprintf("(b) %d keys x %d jobs", s.OrderedKeys, s.PerKey), s.OrderedKeys * s.PerKey, s.OrderedKeys, "key", true},
		{fmt.Sprintf("(c) one key x %d jobs", s.Serial), s.Serial, 1, "key", true},
	}
	for _, shape := range shapes {
		for _, h := range s.Handlers {
			rate, p50, p99, err := b.drainShape(ctx, shape.jobs, shape.keys, h, 0)
			if err != nil {
				return err
			}
			b.add(fmt.Sprintf("throughput %s, %d handlers", shape.name, h), rate, "jobs/s", true,
				fmt.Sprintf("completion latency p50 <= %s ms, p99 <= %s ms", formatValue(p50), formatValue(p99)))
			if !shape.batched {
				continue
			}
			// The same shape drained by a batch worker right after, so that both see the same
			// machine: its ratio to the plain drain is the figure (for (c), to the serial floor).
			batched, _, _, err := b.drainShape(ctx, shape.jobs, shape.keys, h, s.BatchSize)
			if err != nil {
				return err
			}
			b.add(fmt.Sprintf("throughput %s, batches of %d, %d handlers", shape.name, s.BatchSize, h), batched, "jobs/s", true,
				fmt.Sprintf("%.1fx the plain drain above", batched/rate))
		}
	}
	return nil
}

// drainShape loads jobs over keys into a fresh queue and drains them with handlers handlers,
// in batches of batch jobs (0: a plain worker).
func (b *bench) drainShape(ctx context.Context, jobs, keys, handlers, batch int) (rate, p50, p99 float64, err error) {
	q, err := b.queue(ctx, int32(min(handlers, 64)+8), nil)
	if err != nil {
		return 0, 0, 0, err
	}
	defer q.drop()
	if err := load(ctx, q.client, jobs, keys, keyName); err != nil {
		return 0, 0, 0, err
	}
	_, _ = q.pool.Exec(ctx, "ANALYZE ordered_jobs, ordered_keys")
	return b.drain(ctx, q, handlers, jobs, batch)
}
