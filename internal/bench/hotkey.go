package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/orderedq/ordered/ordered"
)

// benchHotKey drains the other keys with a small and a big backlog on one key behind a
// running head. A drain of 1,000 jobs lasts 40 to 100 ms, so each backlog is measured in
// hotRounds drains of fresh other keys by one running worker, each timed from the
// commit of the others' one enqueue batch to their last completion committed (a worker's
// start-up is in neither), and the median is kept. Both queues stand side by side and their
// drains alternate, so a shared machine's drift falls on both alike.
func (b *bench) benchHotKey(ctx context.Context) error {
	s := b.Sizes
	backlogs := []int{s.HotSmall, s.HotBig}
	queues := make([]*hotQueue, len(backlogs))
	for i, backlog := range backlogs {
		h, err := b.newHotQueue(ctx, backlog)
		if err != nil {
			return err
		}
		defer h.close(context.WithoutCancel(ctx))
		queues[i] = h
	}
	rates := make([][]float64, len(backlogs))
	for round := range hotRounds {
		for n := range queues {
			i := (round + n) % len(queues) // who goes first alternates too
			rate, err := queues[i].drain(ctx, round)
			if err != nil {
				return err
			}
			rates[i] = append(rates[i], rate)
		}
	}
	medians := make([]float64, len(backlogs))
	for i, backlog := range backlogs {
		slices.Sort(rates[i])
		medians[i] = rates[i][len(rates[i])/2]
		b.add(fmt.Sprintf("hot key: %d other keys drained, hot backlog %d", s.HotOthers, backlog), medians[i], "jobs/s", true,
			fmt.Sprintf("median of %d drains, alternating", hotRounds))
	}
	b.add(fmt.Sprintf("hot-key flatness (backlog %d vs %d)", s.HotBig, s.HotSmall), medians[1]/medians[0], "ratio", false, "target >= 0.9")
	return nil
}

// hotRounds is how many drains of each backlog the hot-key median is taken over: a drain
// lasts tens of milliseconds, at the mercy of the machine's noise.
const hotRounds = 25

// hotQueue is a queue whose hot key holds a backlog behind a running head, with a worker that
// drains the other keys as they come.
type hotQueue struct {
	q       *benchQueue
	w       *ordered.Worker
	reg     *prometheus.Registry
	others  int
	handled atomic.Int64
	target  atomic.Int64
	drained chan struct{}
}

func (b *bench) newHotQueue(ctx context.Context, backlog int) (_ *hotQueue, err error) {
	q, err := b.queue(ctx, 72, &ordered.Config{Lease: time.Hour})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			q.drop()
		}
	}()
	if err := load(ctx, q.client, backlog+1, 1, func(int) string { return "hot" }); err != nil {
		return nil, err
	}
	// The hot key's head is taken and never settled: its backlog waits behind it.
	if _, err := q.client.Claim(ctx, 1); err != nil {
		return nil, err
	}
	h := &hotQueue{q: q, reg: prometheus.NewRegistry(), others: b.Sizes.HotOthers, drained: make(chan struct{}, 1)}
	h.w, err = q.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
		if h.handled.Add(1) == h.target.Load() {
			h.drained <- struct{}{}
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 64, PollInterval: 50 * time.Millisecond, Registerer: h.reg, Retention: -1})
	if err != nil {
		return nil, err
	}
	if err := h.w.Start(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

// drain enqueues the round's other keys, one job each, and returns their drain rate.
func (h *hotQueue) drain(ctx context.Context, round int) (float64, error) {
	// The table is vacuumed, analyzed and checkpointed first: the backlog's load would
	// otherwise leave a checkpoint running through the first drains.
	_, _ = h.q.pool.Exec(ctx, "VACUUM ANALYZE ordered_jobs, ordered_keys, ordered_heads")
	_, _ = h.q.pool.Exec(ctx, "CHECKPOINT")

	h.target.Store(int64((round + 1) * h.others))
	others := make([]ordered.Event, h.others)
	for i := range others {
		others[i] = ordered.Event{Key: fmt.Sprintf("other-%d-%05d", round, i), Payload: json.RawMessage(`{}`)}
	}
	if _, err := h.q.client.EnqueueMany(ctx, others); err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-h.drained:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	// The last handler has been called; its completion commits with the next batch.
	for counterValue(h.reg, "ordered_completions_total") < float64(h.target.Load()) {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(100 * time.Microsecond)
	}
	return float64(h.others) / time.Since(start).Seconds(), nil
}

func (h *hotQueue) close(ctx context.Context) {
	_ = h.w.StopAndCancel(ctx)
	h.q.drop()
}
