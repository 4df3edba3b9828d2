package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// benchEnqueue measures the bulk enqueue rate (batches of 10,000) and that of single events
// from 8 producers.
func (b *bench) benchEnqueue(ctx context.Context) error {
	s := b.Sizes
	q, err := b.queue(ctx, 16, nil)
	if err != nil {
		return err
	}
	defer q.drop()
	start := time.Now()
	if err := load(ctx, q.client, s.Bulk, 1_000, keyName); err != nil {
		return err
	}
	b.add("bulk enqueue (batches of 10,000)", float64(s.Bulk)/time.Since(start).Seconds(), "events/s", true, "")
	// Autovacuum would analyze the table after the load (it is set to, every 5,000 changed
	// rows); without statistics each single enqueue costs twice as much, growing with the table.
	_, _ = q.pool.Exec(ctx, "ANALYZE ordered_jobs, ordered_keys")

	var n atomic.Int64
	ctx2, cancel := context.WithTimeout(ctx, s.SingleTime)
	defer cancel()
	var wg sync.WaitGroup
	start = time.Now()
	for p := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int64(0); ctx2.Err() == nil; i++ {
				if _, err := q.client.Enqueue(ctx2, ordered.Event{Key: fmt.Sprintf("single-%d-%d", p, i%100), Seq: i}); err == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.add("single-event enqueue, 8 producers", float64(n.Load())/time.Since(start).Seconds(), "events/s", true, "")
	return nil
}
