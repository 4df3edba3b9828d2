package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// benchDeep claims from a deep backlog with 8 claimers, measuring each claim.
func (b *bench) benchDeep(ctx context.Context) error {
	s := b.Sizes
	q, err := b.queue(ctx, 16, nil)
	if err != nil {
		return err
	}
	defer q.drop()
	if err := load(ctx, q.client, s.DeepJobs, s.DeepKeys, keyName); err != nil {
		return err
	}
	// As for the hot key: the claims are measured, not the checkpoint the load set off.
	_, _ = q.pool.Exec(ctx, "VACUUM ANALYZE ordered_jobs, ordered_keys, ordered_heads")
	_, _ = q.pool.Exec(ctx, "CHECKPOINT")
	var mu sync.Mutex
	var lat []time.Duration
	var done atomic.Int64
	ctx2, cancel := context.WithTimeout(ctx, s.DeepTime)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx2.Err() == nil {
				t := time.Now()
				jobs, err := q.client.Claim(ctx2, 1)
				if err != nil || len(jobs) == 0 {
					continue
				}
				d := time.Since(t)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				if q.client.Complete(ctx, jobs[0]) == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	name := fmt.Sprintf("deep backlog (%d jobs over %d keys)", s.DeepJobs, s.DeepKeys)
	b.add(name+": claim p50", ms(percentile(lat, 0.50)), "ms", false, "")
	b.add(name+": claim p99", ms(percentile(lat, 0.99)), "ms", false, "target < 10 ms")
	b.add(name+": 8 claimers, claim+complete", float64(done.Load())/elapsed.Seconds(), "jobs/s", true, "")
	return nil
}
