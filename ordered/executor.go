package ordered

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderedq/ordered/policy"
)

// The executor owns a claimed job from its claim to its settled outcome: it takes a handler
// slot (or gives the job back unrun), keeps the heartbeat going, calls the handler, and
// settles what it returned: a completion through the completer, a retry, a failure for good,
// or a give-back when the worker stops.

// accept applies this worker's attempt cap to a job it claimed, and counts the claim.
func (w *Worker) accept(job *Job) {
	if w.cfg.MaxAttempts > 0 && job.MaxAttempts > w.cfg.MaxAttempts {
		job.MaxAttempts = w.cfg.MaxAttempts
	}
	w.metrics.claims.Inc()
	if job.recovered {
		w.metrics.expiredRecovered.Inc()
	}
}

// firstAttemptsRan observes the wait from enqueue to claim of the jobs that ran their first
// attempt: once a job, as a job given back unrun is claimed again on its first attempt.
func (w *Worker) firstAttemptsRan(jobs ...*Job) {
	for _, job := range jobs {
		if job.Attempt == 1 {
			w.metrics.enqueueToStart.Observe(job.AttemptedAt.Sub(job.CreatedAt).Seconds())
		}
	}
}

// run executes job, then the next jobs of its key that the completions claimed, from claim to
// settled outcome. ahead is set for a job of a claim the worker made while prefetching: it
// may have been claimed ahead of the slots. So may a next job that a completion batch claimed
// while the worker was prefetching: the batch claims the next job of every key it completes,
// whatever the slots free then.
func (w *Worker) run(job *Job, ahead bool) {
	defer w.signal() // the key's next job may be ready for a claim
	for job != nil {
		w.accept(job)
		job, ahead = w.execute(job, ahead)
	}
}

// execute runs one claimed job: heartbeat, handler, then its outcome. The handler runs in one
// of the worker's slots, taken when it starts and given back when it returns: a job waits for
// its completion batch without one, so handlers never wait for commits. A job that may have
// been claimed ahead of the slots (ahead) waits for one at most slotWaitMax, then goes back to
// the queue. It returns the key's next job if the completion claimed it, and whether that job
// may have been claimed ahead of the slots.
func (w *Worker) execute(job *Job, ahead bool) (next *Job, nextAhead bool) {
	started := false
	defer func() {
		if !started {
			w.waiting.Add(-1)
		}
	}()
	if !w.fetching() {
		// Stopping, and the job has not started (its claim was in flight, or a completion
		// claimed it): it goes back for another worker, its attempt not counted.
		_ = w.giveBackUnrun(job)
		return nil, false
	}
	ctx, cancel := context.WithCancelCause(w.workCtx)
	defer cancel(nil)

	if job.Attempt > job.MaxAttempts {
		// Recovered past this worker's cap (its earlier attempts crashed): fail it unrun.
		settleCtx, cancelSettle := context.WithTimeout(context.WithoutCancel(ctx), w.settleTimeout)
		defer cancelSettle()
		w.settle(settleCtx, job, fmt.Errorf("no attempts left: attempt %d of %d", job.Attempt, job.MaxAttempts))
		return nil, false
	}

	// The heartbeat runs until the outcome is settled: a completion that waits for the key
	// (an open enqueue of it) must not outlive the lease meanwhile.
	defer w.startHeartbeat(ctx, cancel, job).stop()

	// A slot for the handler; the heartbeat keeps the lease while the job waits for one.
	slotted, waitedTooLong := w.takeSlot(ctx, ahead)
	if waitedTooLong {
		err := w.giveBackUnrun(job)
		switch {
		case err == nil:
			w.metrics.givenBack.Inc()
			return nil, false
		case errors.Is(err, ErrLeaseLost):
			w.lostOwnership(job, nil)
			return nil, false
		}
		// Still this worker's: the job waits its turn after all, rather than sit until its
		// lease expires and lose an attempt it never used.
		slotted, _ = w.takeSlot(ctx, false)
	}
	slottedAt := time.Now()
	releaseSlot := func() {
		if slotted {
			slotted = false
			observe(&w.slotTime, time.Since(slottedAt))
			<-w.slots
			if w.moreReady.Load() {
				w.signal() // a free slot and, as far as the last claim knows, a ready job for it
			}
		}
	}
	// The slot is given back once the outcome is settled (a failure waiting for its key keeps
	// it, so the worker claims no more meanwhile), at once by a success that waits for its
	// batch, and also by a handler that ends its goroutine (runtime.Goexit).
	defer releaseSlot()
	if !slotted || ctx.Err() != nil || !w.fetching() {
		// Stop or StopAndCancel, or the lease given up on while the job waited for a slot: it
		// never ran, so it goes back with its attempt not counted if the claim still holds.
		if err := w.giveBackUnrun(job); errors.Is(err, ErrLeaseLost) {
			w.lostOwnership(job, nil)
		}
		return nil, false
	}
	started = true
	w.waiting.Add(-1)
	w.firstAttemptsRan(job)
	start := time.Now()
	hctx, cancelTimeout := w.handlerContext(ctx)
	defer cancelTimeout()
	completed, returned, err := callHandler(hctx, w.handler, w.client, job, w.log)
	err = timedOut(hctx, returned, err, false)
	w.metrics.jobDuration.Observe(returned.Sub(start).Seconds())

	if completed && err == nil {
		// Committed with the handler's transaction; a heartbeat that ran after the commit may
		// have found the job done and cancelled ctx, which changes nothing.
		w.metrics.completionDuration.Observe(time.Since(returned).Seconds())
		w.metrics.completions.Inc()
		return nil, false
	}
	if errors.Is(err, ErrLeaseLost) || (err != nil && errors.Is(context.Cause(ctx), ErrLeaseLost)) {
		w.lostOwnership(job, err)
		return nil, false
	}
	if err == nil {
		// Completed even when ctx was cancelled as the claim seemed lost (renewals failed
		// past the fence): the completion is fenced by the claim's version and lease, so it
		// succeeds only if the claim still holds, and a job whose handler did its work is
		// not run again for nothing.
		w.unsettled.Add(1)
		releaseSlot()
		r, err := w.completer.Complete(job)
		if err != nil {
			r = completionResult{err: err}
		}
		if r.next != nil {
			w.waiting.Add(1) // before unsettled falls, so the claimable count never overshoots
		}
		if w.unsettled.Add(-1) == unsettledMax-1 {
			w.signal() // below the bound of unsettled jobs again
		}
		w.metrics.completionDuration.Observe(time.Since(returned).Seconds())
		switch {
		case r.err == nil:
			w.metrics.completions.Inc()
		case errors.Is(r.err, ErrLeaseLost):
			w.lostOwnership(job, nil)
		default:
			// The lease will expire and another claim will take the job again.
			w.log.Error("ordered: could not complete job", slogJob(job.ID, job.Key, job.Seq), "error", r.err)
		}
		return r.next, r.nextAhead
	}
	settleCtx, cancelSettle := context.WithTimeout(context.WithoutCancel(ctx), w.settleTimeout)
	defer cancelSettle()
	if errors.Is(context.Cause(hctx), ErrWorkerStopped) {
		// Cut short by StopAndCancel, which is no failure of the job: it goes back with the
		// attempt not counted, so a job on its last attempt is not failed for it. A handler
		// that JobTimeout cut short first (hctx's cause is the first) has used its attempt.
		w.giveBackStopped(settleCtx, job, err)
		return nil, false
	}
	w.settle(settleCtx, job, err)
	return nil, false
}

// handlerContext is ctx bounded by the worker's JobTimeout, if it has one.
func (w *Worker) handlerContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if w.cfg.JobTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeoutCause(ctx, w.cfg.JobTimeout, w.timeoutCause)
}

// timedOut returns the error of a handler's call in hctx that returned herr at returned,
// unfinished if it left jobs of its batch undone: when JobTimeout had cut the call short by
// then, herr wrapped in hctx's cause, or the cause itself for a call that stopped short without
// an error (a batch that never finishes in time must still spend attempts).
func timedOut(hctx context.Context, returned time.Time, herr error, unfinished bool) error {
	if herr == nil && !unfinished {
		return nil
	}
	cause := context.Cause(hctx)
	if !errors.Is(cause, ErrJobTimeout) || errors.Is(herr, ErrJobTimeout) {
		return herr
	}
	if deadline, _ := hctx.Deadline(); returned.Before(deadline) {
		return herr // it returned before the timeout; what failed after (a commit) is no timeout
	}
	if herr == nil {
		return cause
	}
	return fmt.Errorf("%w: %w", cause, herr)
}

// takeSlot waits for a handler slot until ctx ends or the worker stops; a job that may have
// been claimed ahead waits at most slotWaitMax. waitedTooLong reports that wait running out:
// the handlers are slower than the averages said, so the prefetch stops until they show
// otherwise.
func (w *Worker) takeSlot(ctx context.Context, ahead bool) (slotted, waitedTooLong bool) {
	select {
	case w.slots <- struct{}{}:
		return true, false
	default:
	}
	var tooLong <-chan time.Time
	if ahead {
		wait := slotWaitMax(time.Duration(w.claimTime.Load()))
		timer := time.NewTimer(wait)
		defer timer.Stop()
		tooLong = timer.C
	}
	start := time.Now()
	select {
	case w.slots <- struct{}{}:
		return true, false
	case <-ctx.Done():
	case <-w.fetchCtx.Done():
	case <-tooLong:
		select {
		case w.slots <- struct{}{}: // freed at the same moment
			return true, false
		default:
		}
		raise(&w.slotTime, time.Since(start))
		return false, true
	}
	return false, false
}

// giveBackUnrun releases a job claimed but not started, its attempt not counted, rather than
// run it with a cancelled context. ErrLeaseLost: the claim was no longer current.
func (w *Worker) giveBackUnrun(job *Job) error {
	ctx, cancel := context.WithTimeout(context.Background(), w.settleTimeout)
	defer cancel()
	err := w.settling.do(ctx, func() error { return w.db.releaseUnrun(ctx, job, nil) })
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		w.log.Error("ordered: could not give back an unstarted job", slogJob(job.ID, job.Key, job.Seq), "error", err)
	}
	return err
}

// giveBackStopped releases a job whose handler StopAndCancel cut short (it returned herr),
// its attempt not counted.
func (w *Worker) giveBackStopped(ctx context.Context, job *Job, herr error) {
	switch err := w.settling.do(ctx, func() error { return w.db.releaseUnrun(ctx, job, herr) }); {
	case errors.Is(err, ErrLeaseLost):
		w.lostOwnership(job, herr)
	case err != nil:
		// The lease will expire and another claim will take the job again.
		w.log.Error("ordered: could not give back a job cut short by the stop", slogJob(job.ID, job.Key, job.Seq), "error", err)
	default:
		w.log.Info("ordered: job cut short by the stop goes back to the queue", slogJob(job.ID, job.Key, job.Seq),
			"attempt", job.Attempt, "error", herr)
	}
}

// settle records a failed attempt (herr is not nil): a retry, or a failure for good.
func (w *Worker) settle(ctx context.Context, job *Job, herr error) {
	var outcome Outcome
	var retryIn *retryInError
	g := w.settling
	if IsPermanent(herr) || job.Attempt >= job.MaxAttempts {
		g = w.failing // a failure for good: it waits for its key's row
	}
	err := g.do(ctx, func() (err error) {
		switch {
		case IsPermanent(herr):
			outcome, err = w.db.Fail(ctx, job, herr)
		case errors.As(herr, &retryIn):
			outcome, err = w.db.RetryAfter(ctx, job, retryIn.delay, herr)
		default:
			outcome, err = w.db.Retry(ctx, job, herr)
		}
		return err
	})
	if err == nil && errors.Is(herr, ErrJobTimeout) {
		w.metrics.timeouts.Inc()
	}
	switch {
	case errors.Is(err, ErrLeaseLost):
		w.lostOwnership(job, herr)
	case err != nil:
		// The lease will expire and another claim will take the job again.
		w.log.Error("ordered: could not settle job", slogJob(job.ID, job.Key, job.Seq), "error", err)
	case outcome == OutcomeRetried:
		w.metrics.retries.Inc()
		w.log.Info("ordered: job will be retried", slogJob(job.ID, job.Key, job.Seq),
			"attempt", job.Attempt, "error", herr)
	default:
		decision := policy.Skip
		if outcome == OutcomeBlocked {
			decision = policy.Block
		}
		w.metrics.failures.WithLabelValues(decision.String()).Inc()
		w.log.Warn("ordered: job failed for good", slogJob(job.ID, job.Key, job.Seq),
			"attempt", job.Attempt, "outcome", outcome.String(), "error", herr)
	}
}

func (w *Worker) lostOwnership(job *Job, herr error) {
	w.metrics.lostOwnership.Inc()
	w.log.Warn("ordered: lost the claim of a job; its outcome is not acknowledged",
		slogJob(job.ID, job.Key, job.Seq), "attempt", job.Attempt, "handler_error", herr)
}

// gate holds statements of one kind to their share of the worker's pool: one place each.
type gate chan struct{}

// do runs f in a place once it has one, or returns ctx's cause if ctx ends first.
func (g gate) do(ctx context.Context, f func() error) error {
	select {
	case g <- struct{}{}:
		defer func() { <-g }()
		return f()
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
