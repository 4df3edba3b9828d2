package ordered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// Batches: one key is serial by definition, so a hot key runs one job a commit. A batch worker
// takes up to WorkerConfig.BatchSize consecutive ready jobs of one key under one claim, in seq
// order, and completes the prefix its handler finished in one statement.

// Limits of WorkerConfig.BatchSize.
const (
	BatchSizeDefault = 100
	BatchSizeMax     = 10_000
)

// BatchHandlerFunc processes a batch for a batch worker (Client.NewBatchWorker): up to
// WorkerConfig.BatchSize consecutive jobs of one key, in seq order, under one claim. It
// returns how many of them it finished, in order: jobs[:done] are completed, together, in
// one statement. If err is not nil, jobs[done] failed with it (Permanent and RetryIn are
// honoured, and the policy decides for a permanent failure, as for a Handler) and the jobs
// after it go back to the queue unrun, their attempts not counted; if err is nil, every job
// from jobs[done] on goes back so. A done out of range counts as 0 or len(jobs).
//
// The context is cancelled as a Handler's is: the claim lost (cause ErrLeaseLost: the whole
// batch belongs to someone else now and nothing of it is settled), the call's run past
// WorkerConfig.JobTimeout (a cause wrapping ErrJobTimeout: the finished prefix is completed
// and jobs[done] fails with the timeout, whatever err is) or StopAndCancel (cause
// ErrWorkerStopped: the finished prefix is completed, the rest goes back). Its effects happen
// at least once: use Job.IdempotencyKey. A panic counts as done 0 with the panic as jobs[0]'s
// error.
type BatchHandlerFunc func(ctx context.Context, jobs []*Job) (done int, err error)

// NewBatchWorker returns a Worker that runs h over batches of WorkerConfig.BatchSize jobs
// (default BatchSizeDefault): each of its Workers slots runs one batch at a time. A batch never
// overlaps another claim of its key's jobs; its jobs share one lease, renewed together. Start
// it with Start; it stops as a Worker does. A job claimed ahead of the slots is never held: a
// batch worker claims only what its free slots can start.
func (c *Client) NewBatchWorker(h BatchHandlerFunc, cfg *WorkerConfig) (*Worker, error) {
	if h == nil {
		return nil, errors.New("ordered: NewBatchWorker: nil handler")
	}
	wc := WorkerConfig{}
	if cfg != nil {
		wc = *cfg
	}
	if wc.BatchSize == 0 {
		wc.BatchSize = BatchSizeDefault
	}
	w, err := c.NewWorker(HandlerFunc(func(context.Context, *Job) error {
		return errors.New("ordered: a batch worker runs batches")
	}), &wc)
	if err != nil {
		return nil, err
	}
	w.batch = h
	return w, nil
}

// ClaimBatch claims up to limit batches of up to size jobs each, leased for Config.Lease: each
// a ready head of its key followed by that key's next jobs in seq order, as far as they are
// ready and, on a contiguous key, without a hole in their seqs; or a job whose worker's lease
// expired (the key's lowest open job) alone, so that a job that crashes its worker spends
// only its own attempts. The later jobs of a batch are claimed through its first: give back
// the rest with ReleaseBatch, complete the finished prefix with CompleteMany (a prefix from
// the batch's first job), and only then settle the failed job after it with Retry or Fail
// (settled alone before that, its claim reads as lost). No batch is not an error.
func (c *Client) ClaimBatch(ctx context.Context, limit, size int) ([][]*Job, error) {
	switch {
	case limit < 1:
		return nil, fmt.Errorf("ordered: claim limit %d must be at least 1", limit)
	case size < 1 || size > BatchSizeMax:
		return nil, fmt.Errorf("ordered: batch size %d must be between 1 and %d", size, BatchSizeMax)
	}
	sent := time.Now()
	rows, err := store.JobClaimBatch(ctx, c.db, limit, size, c.cfg.Lease)
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return nil, fmt.Errorf("ordered: claim batch: %w", err)
	}
	return batchesOf(claimedJobs(rows, sent)), nil
}

// batchesOf splits claimed jobs into one batch a key (a statement claims one batch a key at
// most), each in seq order.
func batchesOf(jobs []*Job) [][]*Job {
	slices.SortStableFunc(jobs, func(a, b *Job) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), cmp.Compare(a.Seq, b.Seq))
	})
	var out [][]*Job
	for i := 0; i < len(jobs); {
		j := i + 1
		for j < len(jobs) && jobs[j].Key == jobs[i].Key {
			j++
		}
		out = append(out, jobs[i:j:j])
		i = j
	}
	return out
}

// RenewBatch extends the one lease of a batch's jobs to Config.Lease from now. ErrLeaseLost:
// the claim of at least one of them is no longer current; stop working on the batch.
func (c *Client) RenewBatch(ctx context.Context, jobs []*Job) error {
	ids, versions := claimsOf(jobs)
	renewed, err := store.LeaseExtendMany(ctx, c.db, ids, versions, c.cfg.Lease)
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return fmt.Errorf("ordered: renew a batch of %d jobs: %w", len(jobs), err)
	}
	if len(renewed) < len(jobs) {
		return ErrLeaseLost
	}
	return nil
}

// ReleaseBatch gives back claimed jobs that never ran, in one statement, their attempts not
// counted: the rest of a batch after the job that stopped it. They stay behind their key's
// earlier jobs. ErrLeaseLost: the claim of at least one was lost (the others went back).
func (c *Client) ReleaseBatch(ctx context.Context, jobs []*Job) error {
	if len(jobs) == 0 {
		return nil
	}
	ids, versions := claimsOf(jobs)
	released, err := store.JobReleaseUnrunMany(ctx, c.db, ids, versions)
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return fmt.Errorf("ordered: release %d jobs: %w", len(jobs), err)
	}
	if len(released) < len(jobs) {
		return ErrLeaseLost
	}
	return nil
}

// completeBatchClaimNext completes jobs (finished prefixes of batches) in one statement and
// claims up to limit batches of up to size jobs: their keys' next, then other ready keys'.
func (c *Client) completeBatchClaimNext(ctx context.Context, jobs []*Job, limit, size int) (lost []*Job, next [][]*Job, err error) {
	ids, versions := claimsOf(jobs)
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		done, claimed, err := store.JobCompleteBatch(ctx, c.db, ids, versions, limit, size, c.cfg.Lease)
		if err == nil {
			return lostOf(jobs, done), batchesOf(claimedJobs(claimed, sent)), nil
		}
		resetIfReadOnly(c.pool, err)
		if attempt < completeAttempts && isTransient(err) && ctx.Err() == nil {
			continue
		}
		// The answer may be what was lost: ask whether the completion committed (the batches
		// it claimed then run again after their leases expire).
		if lost, _, ok := c.batchOutcome(ctx, jobs, false); ok {
			return lost, nil, nil
		}
		return nil, nil, fmt.Errorf("ordered: complete %d jobs: %w", len(jobs), err)
	}
}
