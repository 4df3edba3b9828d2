package ordered

import (
	"context"
)

// Completion batches: a worker's successful attempts wait in the completer
// (internal/completer) for a batch, and flushCompletions settles each batch in one statement
// that also claims the next job of each key it completes while the worker is fetching.

const (
	// CompleteBatchMax bounds the jobs one completion statement settles.
	CompleteBatchMax = 500
	// completeFlushesMax is how many completion statements a worker keeps in flight. Two let
	// the database work on one batch while the next is sent and use a second core; more
	// split the same jobs into smaller batches and cost more commits.
	completeFlushesMax = 2
)

// completionResult is the answer to one job of a completion batch.
type completionResult struct {
	err error
	// next is the key's next job, claimed by the batch; nextAhead is set if the batch claimed
	// while the worker was prefetching, so next may have been claimed ahead of the slots.
	next      *Job
	nextAhead bool
}

// flushCompletions completes one batch of jobs whose handlers succeeded, and answers each
// job, in order. A job waits for its batch without a handler slot, so while batches are in
// flight the worker's slots run other jobs, and batches grow (up to unsettledMax jobs wait at
// once). The batch's next jobs run in the slots of the jobs whose completions made them ready.
func (w *Worker) flushCompletions(jobs []*Job) []completionResult {
	results := make([]completionResult, len(jobs))
	ahead := w.prefetch() > 0
	lost, next, err := w.completeBatch(jobs)
	if err != nil {
		// One at a time, without claims: a job the batch cannot complete then costs only
		// itself. (A batch that committed but whose answer was lost does not come here, unless
		// it timed out or asking what it did failed too: then each of these finds its claim
		// completed already and is reported lost, which is only logged and counted, and the
		// next jobs the batch claimed run again after their leases expire.)
		// One deadline for them all: a database that does not answer holds the worker, and its
		// Stop, for settleTimeout a batch and one more for its jobs, not for settleTimeout a
		// job. The fallback is kept after a timeout too: a batch held by one key that a
		// producer's open transaction holds still completes the jobs of its other keys.
		w.log.Warn("ordered: a completion batch failed; completing its jobs one at a time",
			"jobs", len(jobs), "error", err)
		ctx, cancel := context.WithTimeout(context.Background(), w.settleTimeout)
		defer cancel()
		for i, job := range jobs {
			results[i] = completionResult{err: w.db.Complete(ctx, job)}
		}
		return results
	}
	isLost := make(map[*Job]bool, len(lost))
	for _, j := range lost {
		isLost[j] = true
	}
	nextOf := make(map[string]*Job, len(next))
	for _, j := range next {
		nextOf[j.Key] = j
	}
	for i, job := range jobs {
		if isLost[job] {
			results[i] = completionResult{err: ErrLeaseLost}
			continue
		}
		results[i] = completionResult{next: nextOf[job.Key], nextAhead: ahead}
		delete(nextOf, job.Key)
	}
	return results
}

// completeBatch runs the batch's statement, with claims while the worker is fetching.
func (w *Worker) completeBatch(jobs []*Job) (lost, next []*Job, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), w.settleTimeout)
	defer cancel()
	limit := 0
	if w.fetching() {
		limit = len(jobs)
	}
	return w.db.completeManyClaimNext(ctx, jobs, limit)
}
