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
	}{
		{fmt.Sprintf("(a) %d jobs over %d keys", s.Many, s.ManyKeys), s.Many, s.ManyKeys, "key"},
		{fmt.Sprintf("(b) %d keys x %d jobs", s.OrderedKeys, s.PerKey), s.OrderedKeys * s.PerKey, s.OrderedKeys, "key"},
		{fmt.Sprintf("(c) one key x %d jobs", s.Serial), s.Serial, 1, "key"},
	}
	for _, shape := range shapes {
		for _, h := range s.Handlers {
			q, err := b.queue(ctx, int32(min(h, 64)+8), nil)
			if err != nil {
				return err
			}
			if err := load(ctx, q.client, shape.jobs, shape.keys, keyName); err != nil {
				q.drop()
				return err
			}
			_, _ = q.pool.Exec(ctx, "ANALYZE ordered_jobs, ordered_keys")
			rate, p50, p99, err := b.drain(ctx, q, h, shape.jobs)
			q.drop()
			if err != nil {
				return err
			}
			b.add(fmt.Sprintf("throughput %s, %d handlers", shape.name, h), rate, "jobs/s", true,
				fmt.Sprintf("completion latency p50 <= %s ms, p99 <= %s ms", formatValue(p50), formatValue(p99)))
		}
	}
	return nil
}
