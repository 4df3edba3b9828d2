package ordered

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/orderedq/ordered/policy"
)

// The fetch loop owns the claims: it claims as many jobs as the worker's free slots and its
// prefetch can take, hands each to the executor, and sleeps until a slot frees, a notification
// arrives or the poll interval passes. The prefetch sizing (moving averages of a claim's round
// trip and of a slot's hold) lives here too.

// fetching reports whether the worker still takes new jobs (it has not been asked to stop).
func (w *Worker) fetching() bool { return w.fetchCtx.Err() == nil }

// signal wakes the fetch loop without blocking.
func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// jitter returns d scaled by a random factor in [0.8, 1.2), so that workers spread out.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// fetchLoop claims and starts jobs until ctx ends.
func (w *Worker) fetchLoop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	backoff := policy.Exponential{Base: 20 * time.Millisecond, Max: w.cfg.PollInterval}
	failures := 0
	for {
		if ctx.Err() != nil {
			// Stopping: a select below that had both a wake-up and ctx.Done ready may have
			// picked the wake-up, and the claim must not run.
			return
		}
		wait := jitter(w.cfg.PollInterval)
		if free := w.freeSlots(); free > 0 {
			want := min(free, ClaimBatchMax)
			n, err := w.fetch(ctx, want)
			w.moreReady.Store(err == nil && n == want)
			switch {
			case err != nil && ctx.Err() == nil:
				// The wake-up that led here is spent: try again soon, not at the next poll.
				failures++
				wait = min(wait, backoff.Delay(failures))
				w.log.ErrorContext(ctx, "ordered: claim failed", "error", err)
			case err == nil && n == want:
				failures = 0
				// There may be more. The jobs just claimed count against the free slots
				// until they start: let them start (and quick ones finish) first, or the
				// next claim asks for only what is left, and a worker with few slots and
				// quick handlers spends its time on small claims.
				runtime.Gosched()
				continue
			case err == nil:
				failures = 0
			}
		} else {
			// A wake-up that finds no capacity is not spent: the next freed slot claims.
			w.moreReady.Store(true)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-timer.C:
		}
	}
}

// fetch claims up to want jobs and starts them.
func (w *Worker) fetch(ctx context.Context, want int) (int, error) {
	// Not cancelled by Stop: a claim that committed must be read and its jobs run, or they
	// would sit until their leases expire and lose an attempt.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	if w.batch != nil {
		return w.fetchBatches(ctx, want)
	}
	// Only a claim made while prefetching can hold jobs claimed ahead of the slots.
	ahead := w.prefetch() > 0
	start := time.Now()
	jobs, err := w.db.Claim(ctx, want)
	took := time.Since(start)
	w.metrics.claimDuration.Observe(took.Seconds())
	if err != nil {
		return 0, err
	}
	observe(&w.claimTime, took)
	w.waiting.Add(int64(len(jobs)))
	for _, job := range jobs {
		w.jobs.Go(func() { w.run(job, ahead) })
	}
	return len(jobs), nil
}

// unsettledMax bounds a worker's unsettled jobs: what its completion batches in flight hold.
// Beyond it the worker claims no more until some are settled.
const unsettledMax = CompleteBatchMax * completeFlushesMax

// freeSlots is how many more jobs the worker may claim now: slots no handler holds and no
// claimed job waits for, plus the prefetch, within the bound of unsettled jobs.
func (w *Worker) freeSlots() int {
	// waiting first: a starting job takes its slot before it leaves waiting, so it is
	// counted twice rather than missed.
	waiting := int(w.waiting.Load())
	return min(w.cfg.Workers+w.prefetch()-len(w.slots)-waiting, unsettledMax-int(w.unsettled.Load()))
}

// prefetch is how many jobs beyond its slots the worker claims now.
func (w *Worker) prefetch() int {
	if w.batch != nil {
		return 0 // a batch holds its key's next jobs: it is not claimed ahead of the slots
	}
	return prefetchFor(w.cfg.Workers, time.Duration(w.claimTime.Load()), time.Duration(w.slotTime.Load()))
}

// prefetchFor is the prefetch of a worker with workers slots, by the moving averages of a
// claim's round trip and of a slot's hold (0: not measured yet): what the slots finish during
// one claim, while that is more than nothing, up to prefetchMax.
//   - Quicker handlers need it, or the worker spends its time on claims as small as its free
//     slots. A job claimed ahead then waits for a slot about as long as a claim takes.
//   - Slower ones get none: a job a worker cannot start stays for other workers.
//   - When handlers turn slow before the averages show it, the jobs claimed ahead wait behind
//     them; one that waits much longer than a claim would take goes back (slotWaitMax).
func prefetchFor(workers int, claim, slot time.Duration) int {
	if claim <= 0 || slot <= 0 || slot >= claim {
		return 0
	}
	perSlot := (claim + slot - 1) / slot
	return int(min(int64(perSlot)*int64(workers), int64(prefetchMax(workers))))
}

// prefetchMax bounds the prefetch: a claim's worth, or one job a slot if that is more.
func prefetchMax(workers int) int { return max(workers, ClaimBatchMax) }

// slotWaitMin is the least a job claimed ahead may wait for a slot before it goes back.
const slotWaitMin = 50 * time.Millisecond

// slotWaitMax is how long a job claimed ahead may wait for a slot: a few claims' round trips,
// the wait the prefetch expects, or slotWaitMin. A longer wait means the handlers turned
// slow, and the job is better off with another worker.
func slotWaitMax(claim time.Duration) time.Duration { return max(4*claim, slotWaitMin) }

// raise sets the moving average avg to d if d is higher.
func raise(avg *atomic.Int64, d time.Duration) {
	for {
		old := avg.Load()
		if old >= int64(d) || avg.CompareAndSwap(old, int64(d)) {
			return
		}
	}
}

// observe folds d into the moving average avg (weight 1/8; the first sample sets it).
func observe(avg *atomic.Int64, d time.Duration) {
	sample := max(int64(d), 1)
	for {
		old := avg.Load()
		next := sample
		if old != 0 {
			next = old + (sample-old)/8
		}
		if avg.CompareAndSwap(old, next) {
			return
		}
	}
}
