package ordered

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The batch executor: a batch worker's fetch loop claims batches (one a free slot), and each
// batch runs in one slot, under one heartbeat, from its claim to its settled outcome: the
// finished prefix completed in one statement (which also claims the key's next batch), the
// failed job retried or failed, the rest given back unrun.

// fetchBatches claims up to want batches and starts them; it returns want when it took all
// it could ask for, so that the fetch loop claims again at once.
func (w *Worker) fetchBatches(ctx context.Context, want int) (int, error) {
	if limit := w.batchesPerStatement(); want > limit {
		n, err := w.fetchBatches(ctx, limit)
		if n == limit {
			n = want
		}
		return n, err
	}
	start := time.Now()
	batches, err := w.db.ClaimBatch(ctx, want, w.cfg.BatchSize)
	took := time.Since(start)
	w.metrics.claimDuration.Observe(took.Seconds())
	if err != nil {
		return 0, err
	}
	observe(&w.claimTime, took)
	w.waiting.Add(int64(len(batches)))
	for _, b := range batches {
		w.jobs.Go(func() { w.runBatches(b) })
	}
	return len(batches), nil
}

// runBatches executes batch, then the next batches of its key that its completions claimed.
func (w *Worker) runBatches(batch []*Job) {
	defer w.signal() // the key's next jobs may be ready for a claim
	for batch != nil {
		for _, job := range batch {
			w.accept(job)
		}
		batch = w.executeBatch(batch)
	}
}

// executeBatch runs one claimed batch in a slot and settles it. It returns the key's next
// batch if its completion claimed one.
func (w *Worker) executeBatch(batch []*Job) (next []*Job) {
	started := false
	defer func() {
		if !started {
			w.waiting.Add(-1)
		}
	}()
	if !w.fetching() {
		w.giveBackBatch(batch, nil)
		return nil
	}
	ctx, cancel := context.WithCancelCause(w.workCtx)
	defer cancel(nil)
	// settleCtx bounds one settling, from when it begins: not from the claim, or a handler
	// that ran longer than settleTimeout would leave its failure unrecorded.
	settleCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), w.settleTimeout)
	}

	// Jobs recovered past this worker's attempt cap end the batch; its head is failed unrun.
	for i, job := range batch {
		if job.Attempt <= job.MaxAttempts {
			continue
		}
		w.giveBackBatch(batch[max(i, 1):], nil)
		if i == 0 {
			sctx, cancelSettle := settleCtx()
			defer cancelSettle()
			w.settle(sctx, job, fmt.Errorf("no attempts left: attempt %d of %d", job.Attempt, job.MaxAttempts))
			return nil
		}
		batch = batch[:i]
		break
	}

	defer w.startBatchHeartbeat(ctx, cancel, batch).stop()
	slotted, _ := w.takeSlot(ctx, false)
	if slotted {
		slottedAt := time.Now()
		defer func() {
			observe(&w.slotTime, time.Since(slottedAt))
			<-w.slots
			if w.moreReady.Load() {
				w.signal()
			}
		}()
	}
	if !slotted || ctx.Err() != nil || !w.fetching() {
		w.giveBackBatch(batch, nil)
		return nil
	}
	started = true
	w.waiting.Add(-1)
	start := time.Now()
	hctx, cancelTimeout := w.handlerContext(ctx)
	defer cancelTimeout()
	done, err := callBatchHandler(hctx, w.batch, batch)
	returned := time.Now()
	w.metrics.jobDuration.Observe(returned.Sub(start).Seconds())
	done = min(max(done, 0), len(batch))
	err = timedOut(hctx, returned, err, done < len(batch))
	// A batch that finished whole is completed even when ctx was cancelled as the claim
	// seemed lost (renewals failed past the fence): the completion is fenced by the claim,
	// as a HandlerFunc's is (see execute).
	finished := done == len(batch) && err == nil
	if errors.Is(err, ErrLeaseLost) || (!finished && errors.Is(context.Cause(ctx), ErrLeaseLost)) {
		w.firstAttemptsRan(batch...)
		w.lostBatch(batch, err)
		return nil
	}
	if done == len(batch) {
		err = nil // no job is left to have failed
	}
	stopped := errors.Is(context.Cause(hctx), ErrWorkerStopped) // not if JobTimeout came first

	// The rest first: until the prefix is completed the key's head is this batch's, so no
	// claim can take what goes back before its turn.
	var failed *Job
	rest := batch[done:]
	if err != nil {
		failed, rest = batch[done], batch[done+1:]
	}
	w.firstAttemptsRan(batch[:len(batch)-len(rest)]...)
	if !w.giveBackBatch(rest, err) {
		return nil
	}
	if done > 0 {
		limit := 0
		if failed == nil && len(rest) == 0 && !stopped && w.fetching() {
			limit = 1 // the key's next batch, or another key's, claimed by the same statement
		}
		returned = time.Now()
		r, cerr := w.batchCompleter.Complete(&batchCompletion{jobs: batch[:done], claimNext: limit > 0})
		if cerr == nil {
			cerr = r.err
		}
		w.metrics.completionDuration.Observe(time.Since(returned).Seconds())
		switch {
		case errors.Is(cerr, ErrLeaseLost):
			w.lostBatch(batch, nil)
			return nil
		case cerr != nil:
			// The leases will expire and another claim will take the batch again.
			w.log.Error("ordered: could not complete a batch", slogJob(batch[0].ID, batch[0].Key, batch[0].Seq),
				"jobs", done, "error", cerr)
			return nil
		}
		w.metrics.completions.Add(float64(done))
		if r.next != nil {
			next = r.next
			w.waiting.Add(1) // before the slot is given back
		}
	}
	if failed != nil {
		sctx, cancelSettle := settleCtx()
		defer cancelSettle()
		if stopped {
			w.giveBackStopped(sctx, failed, err)
		} else {
			w.settle(sctx, failed, err)
		}
	}
	return next
}

// giveBackBatch gives back jobs of a batch that did not run, their attempts not counted, and
// reports whether it could; a lost claim is reported as the batch's. herr is what the
// handler returned, if anything, for the log.
func (w *Worker) giveBackBatch(jobs []*Job, herr error) bool {
	if len(jobs) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.settleTimeout)
	defer cancel()
	err := w.settling.do(ctx, func() error { return w.db.ReleaseBatch(ctx, jobs) })
	switch {
	case errors.Is(err, ErrLeaseLost):
		w.lostBatch(jobs, herr)
		return false
	case err != nil:
		// The leases will expire and another claim will take the jobs again.
		w.log.Error("ordered: could not give back the rest of a batch", slogJob(jobs[0].ID, jobs[0].Key, jobs[0].Seq),
			"jobs", len(jobs), "error", err)
		return false
	}
	return true
}

func (w *Worker) lostBatch(batch []*Job, herr error) {
	w.metrics.lostOwnership.Inc()
	w.log.Warn("ordered: lost the claim of a batch; its outcome is not acknowledged",
		slogJob(batch[0].ID, batch[0].Key, batch[0].Seq), "jobs", len(batch), "handler_error", herr)
}

// callBatchHandler runs h, turning a panic into the failure of the batch's first job.
func callBatchHandler(ctx context.Context, h BatchHandlerFunc, batch []*Job) (done int, err error) {
	defer func() {
		if r := recover(); r != nil {
			done, err = 0, fmt.Errorf("panic: %v", r)
		}
	}()
	return h(ctx, batch)
}

// batchesPerStatement bounds the batches one claim or completion statement takes: about
// CompleteBatchMax jobs, as a worker's completion batch holds at most.
func (w *Worker) batchesPerStatement() int { return max(1, CompleteBatchMax/w.cfg.BatchSize) }

// batchCompletion is the finished prefix of a batch, waiting for its completion statement;
// claimNext asks for a next batch to run in its slot.
type batchCompletion struct {
	jobs      []*Job
	claimNext bool
}

// batchCompletionResult answers a batchCompletion: err is ErrLeaseLost if the claim of any of
// its jobs was lost (they share one lease, so all were, in practice); next is the batch
// claimed for its slot, if any.
type batchCompletionResult struct {
	err  error
	next []*Job
}

// flushBatchCompletions completes the finished prefixes of several batches in one statement,
// which also claims a next batch for each that asks: its key's next, else another key's.
func (w *Worker) flushBatchCompletions(items []*batchCompletion) []batchCompletionResult {
	results := make([]batchCompletionResult, len(items))
	var jobs []*Job
	limit := 0
	for _, it := range items {
		jobs = append(jobs, it.jobs...)
		if it.claimNext {
			limit++
		}
	}
	if !w.fetching() {
		limit = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.settleTimeout)
	defer cancel()
	lost, next, err := w.db.completeBatchClaimNext(ctx, jobs, limit, w.cfg.BatchSize)
	if err != nil {
		// One batch at a time, without claims: a batch the statement cannot complete then
		// costs only itself.
		w.log.Warn("ordered: a completion of batches failed; completing them one at a time",
			"batches", len(items), "error", err)
		for i, it := range items {
			l, _, err := w.db.completeBatchClaimNext(ctx, it.jobs, 0, w.cfg.BatchSize)
			if err == nil && len(l) > 0 {
				err = ErrLeaseLost
			}
			results[i] = batchCompletionResult{err: err}
		}
		return results
	}
	isLost := make(map[*Job]bool, len(lost))
	for _, j := range lost {
		isLost[j] = true
	}
	// A key's next batch goes to the batch of that key; the others to the rest that ask.
	nextOf := make(map[string][]*Job, len(next))
	for _, b := range next {
		nextOf[b[0].Key] = b
	}
	for i, it := range items {
		for _, j := range it.jobs {
			if isLost[j] {
				results[i].err = ErrLeaseLost
			}
		}
		if b := nextOf[it.jobs[0].Key]; b != nil && it.claimNext && results[i].err == nil {
			results[i].next = b
			delete(nextOf, it.jobs[0].Key)
		}
	}
	var spare [][]*Job
	for _, b := range next {
		if nextOf[b[0].Key] != nil {
			spare = append(spare, b)
		}
	}
	for i, it := range items {
		if len(spare) == 0 {
			break
		}
		if it.claimNext && results[i].err == nil && results[i].next == nil {
			results[i].next, spare = spare[0], spare[1:]
		}
	}
	// Batches claimed for a slot that can no longer take them (its batch was lost) go back.
	for _, b := range spare {
		w.giveBackBatch(b, nil)
	}
	return results
}
