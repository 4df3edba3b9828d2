package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/orderedq/ordered/ordered"
)

// benchWakeup enqueues into an idle worker and measures enqueue -> handler start.
func (b *bench) benchWakeup(ctx context.Context) error {
	for _, pollOnly := range []bool{false, true} {
		q, err := b.queue(ctx, 8, nil)
		if err != nil {
			return err
		}
		started := make(chan time.Time, 1)
		w, err := q.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
			started <- time.Now()
			return nil
		}), &ordered.WorkerConfig{Workers: 2, PollOnly: pollOnly, PollInterval: ordered.PollIntervalDefault})
		if err != nil {
			q.drop()
			return err
		}
		if err := w.Start(ctx); err != nil {
			q.drop()
			return err
		}
		time.Sleep(200 * time.Millisecond) // let the listener connect
		var lat []time.Duration
		for i := range b.Sizes.WakeSamples {
			time.Sleep(time.Duration(20+rand.IntN(30)) * time.Millisecond)
			t := time.Now()
			if _, err := q.client.Enqueue(ctx, ordered.Event{Key: fmt.Sprintf("w%d", i), Seq: 0}); err != nil {
				_ = w.StopAndCancel(ctx)
				q.drop()
				return err
			}
			lat = append(lat, (<-started).Sub(t))
		}
		_ = w.Stop(ctx)
		q.drop()
		slices.Sort(lat)
		mode := "LISTEN/NOTIFY"
		note := "target p50 < 5 ms"
		if pollOnly {
			mode, note = fmt.Sprintf("poll-only (poll %s)", ordered.PollIntervalDefault), ""
		}
		b.add("wake-up enqueue->start, "+mode+": p50", ms(percentile(lat, 0.5)), "ms", false, note)
		b.add("wake-up enqueue->start, "+mode+": p99", ms(percentile(lat, 0.99)), "ms", false, "")
	}
	return nil
}
