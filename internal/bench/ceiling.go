package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// benchCeiling measures single-row UPDATE commits/s at the largest bench concurrency.
func (b *bench) benchCeiling(ctx context.Context) error {
	for _, c := range b.Sizes.Concurrency {
		q, err := b.queue(ctx, int32(c), nil)
		if err != nil {
			return err
		}
		if _, err := q.pool.Exec(ctx, ceilingTableSQL); err != nil {
			q.drop()
			return err
		}
		var commits atomic.Int64
		ctx2, cancel := context.WithTimeout(ctx, b.Sizes.CeilingTime)
		var wg sync.WaitGroup
		for range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx2.Err() == nil {
					if _, err := q.pool.Exec(ctx2, ceilingUpdateSQL, 1+rand.IntN(100_000)); err == nil {
						commits.Add(1)
					}
				}
			}()
		}
		start := time.Now()
		wg.Wait()
		cancel()
		rate := float64(commits.Load()) / time.Since(start).Seconds()
		if c == slices.Max(b.Sizes.Concurrency) || b.ceiling == 0 {
			b.ceiling = max(b.ceiling, rate)
		}
		b.add(fmt.Sprintf("ceiling: single-row UPDATE commits, %d clients", c), rate, "commits/s", false, "")
		q.drop()
	}
	return nil
}
