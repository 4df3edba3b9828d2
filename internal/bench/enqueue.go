package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// singleRounds is how many times the single-event measurements alternate with the plain
// INSERT's, each a share of --single-time, so that a change in the machine's load meets both.
const singleRounds = 4

// benchEnqueue measures the bulk enqueue rate (batches of 10,000) and single events, beside a
// plain one-row INSERT of the same columns in the same database: the rate of 8 producers, and
// the latency of one producer's enqueue and commit.
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
	if _, err := q.pool.Exec(ctx, plainTableSQL); err != nil {
		return err
	}

	payload := json.RawMessage(`{"amount_cents":1234,"currency":"EUR"}`)
	enqueue := func(ctx context.Context, p int, i int64) error {
		_, err := q.client.Enqueue(ctx, ordered.Event{Key: fmt.Sprintf("single-%d-%d", p, i%100), Seq: i, Payload: payload})
		return err
	}
	insert := func(ctx context.Context, p int, i int64) error {
		_, err := q.pool.Exec(ctx, plainInsertSQL, fmt.Sprintf("single-%d-%d", p, i%100), i, string(payload))
		return err
	}
	var enqueued, inserted, enqueueTime, insertTime float64
	var enqueueLat, insertLat []time.Duration
	var seq atomic.Int64 // one seq counter, so each round appends behind the last
	for range singleRounds {
		for _, m := range []struct {
			write     func(context.Context, int, int64) error
			n, secs   *float64
			latencies *[]time.Duration
		}{{insert, &inserted, &insertTime, &insertLat}, {enqueue, &enqueued, &enqueueTime, &enqueueLat}} {
			n, secs, err := producers(ctx, 8, s.SingleTime/(2*singleRounds), &seq, m.write)
			if err != nil {
				return err
			}
			*m.n, *m.secs = *m.n+n, *m.secs+secs
			lat, err := latencies(ctx, s.SingleTime/(4*singleRounds), &seq, m.write)
			if err != nil {
				return err
			}
			*m.latencies = append(*m.latencies, lat...)
		}
	}
	plainRate, rate := inserted/insertTime, enqueued/enqueueTime
	b.add("plain one-row INSERT, 8 producers", plainRate, "inserts/s", true, "the yardstick of the row below")
	b.add("single-event enqueue, 8 producers", rate, "events/s", true, fmt.Sprintf("%.2fx the plain INSERT", rate/plainRate))
	for _, l := range []struct {
		name string
		lat  []time.Duration
	}{{"plain one-row INSERT", insertLat}, {"single-event enqueue", enqueueLat}} {
		slices.Sort(l.lat)
		b.add(l.name+", one producer: latency p50", ms(percentile(l.lat, 0.50)), "ms", false, "statement and commit")
		b.add(l.name+", one producer: latency p99", ms(percentile(l.lat, 0.99)), "ms", false, fmt.Sprintf("of %d", len(l.lat)))
	}
	return nil
}

// producers runs write from n goroutines for d, each goroutine p with its own i from seq,
// and returns how many writes succeeded and the seconds they took. Each goroutine writes at
// least once and finishes the write under way at the deadline: cutting a statement short
// would close its connection, and the next round would pay for new sessions.
func producers(ctx context.Context, n int, d time.Duration, seq *atomic.Int64, write func(context.Context, int, int64) error) (float64, float64, error) {
	var done atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for p := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := write(ctx, p, seq.Add(1)); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				done.Add(1)
				if ctx.Err() != nil || !time.Now().Before(end) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		return 0, 0, *err
	}
	return float64(done.Load()), time.Since(start).Seconds(), nil
}

// latencies times write, one call at a time from one producer, for d and at least once.
func latencies(ctx context.Context, d time.Duration, seq *atomic.Int64, write func(context.Context, int, int64) error) ([]time.Duration, error) {
	var out []time.Duration
	for end := time.Now().Add(d); len(out) == 0 || time.Now().Before(end); {
		start := time.Now()
		if err := write(ctx, 99, seq.Add(1)); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}
