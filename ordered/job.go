package ordered

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/ordered/internal/store"
	"github.com/orderedq/ordered/policy"
)

// Job is a claimed event: the caller owns it until LeaseUntil (renew to keep it longer) and
// settles it with Complete, Retry or Fail.
type Job struct {
	ID      int64
	Key     string
	Seq     int64
	Kind    string
	Payload json.RawMessage
	// Attempt is this attempt's number, from 1.
	Attempt     int
	MaxAttempts int
	// ClaimVersion identifies this claim; every claim of the job gets a new one. Settling the
	// job is accepted only for the current claim.
	ClaimVersion int64
	// LeaseUntil is when the claim expires, by the database's clock, as of the claim.
	LeaseUntil  time.Time
	CreatedAt   time.Time
	AvailableAt time.Time
	// AttemptedAt is when this claim was made, by the database's clock.
	AttemptedAt time.Time
	// LastError is the error stored by the previous attempt, if any.
	LastError string

	// recovered is set when the claim took the job back from an expired lease.
	recovered bool
	// claimedAt is when the claim was sent, by this process's monotonic clock: the lease
	// cannot have started earlier.
	claimedAt time.Time
	// heartbeat renews the lease while a worker's handler runs the job (see Fence).
	heartbeat *heartbeat
}

// Fence is when, by this process's clock, a worker cancels the handler's context unless a
// renewal of the lease succeeds first: StopGrace and a margin before the lease could run out.
// It moves later with each renewal. A handler that hands the job to something the worker's
// own timers do not reach (another process) can hold it to the same deadline. Zero for a job
// that no worker's handler runs; once the handler has returned it moves no more.
func (j *Job) Fence() time.Time {
	h := j.heartbeat
	if h == nil {
		return time.Time{}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fence
}

// IdempotencyKey identifies the event's business operation: "key/seq". It is the same on every
// attempt (unlike ClaimVersion), so a handler can use it to make its effects happen once.
func (j *Job) IdempotencyKey() string {
	return j.Key + "/" + strconv.FormatInt(j.Seq, 10)
}

// Outcome is where a job went after a failed attempt. Its zero value, OutcomeNone, is what
// Retry, RetryAfter and Fail return with an error: the job went nowhere by this call.
type Outcome int

const (
	// OutcomeNone: no outcome; the call failed (with ErrLeaseLost: the claim was lost) and
	// changed nothing.
	OutcomeNone Outcome = iota
	// OutcomeRetried: the job is queued again, after a backoff; it still holds its key.
	OutcomeRetried
	// OutcomeSkipped: the job failed for good and its key moved on (the policy said Skip).
	OutcomeSkipped
	// OutcomeBlocked: the job failed for good and holds its key (the policy said Block).
	OutcomeBlocked
)

// String is the outcome's name: "none", "retried", "skipped" or "blocked".
func (o Outcome) String() string {
	switch o {
	case OutcomeNone:
		return "none"
	case OutcomeRetried:
		return "retried"
	case OutcomeSkipped:
		return "skipped"
	case OutcomeBlocked:
		return "blocked"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Claim claims up to limit jobs, each leased for Config.Lease: ready heads of their keys, and
// jobs whose worker's lease expired. It runs one short auto-committed statement, takes only
// rows no other claim holds and never waits for a locked one. No jobs is not an error.
func (c *Client) Claim(ctx context.Context, limit int) ([]*Job, error) {
	if limit < 1 {
		return nil, fmt.Errorf("ordered: claim limit %d must be at least 1", limit)
	}
	sent := time.Now()
	rows, err := store.JobClaimMany(ctx, c.db, limit, c.cfg.Lease)
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return nil, fmt.Errorf("ordered: claim: %w", err)
	}
	return claimedJobs(rows, sent), nil
}

// claimedJobs turns claimed rows into Jobs; sent is when the claim was sent.
func claimedJobs(rows []store.ClaimedJob, sent time.Time) []*Job {
	jobs := make([]*Job, len(rows))
	for i, r := range rows {
		jobs[i] = &Job{
			ID: r.ID, Key: r.Key, Seq: r.Seq, Kind: r.Kind, Payload: r.Payload,
			Attempt: r.Attempts, MaxAttempts: r.MaxAttempts, ClaimVersion: r.ClaimVersion,
			LeaseUntil: r.LeaseUntil, CreatedAt: r.CreatedAt, AvailableAt: r.AvailableAt,
			AttemptedAt: r.AttemptedAt, recovered: r.Recovered, claimedAt: sent,
		}
		if r.LastError != nil {
			jobs[i].LastError = *r.LastError
		}
	}
	return jobs
}

// Complete marks the job done and hands its key to the next job. ErrLeaseLost: the claim is
// no longer current and nothing changed. If the statement fails before ctx ends, it asks the
// database whether the completion committed all the same (the connection failed after the
// commit).
func (c *Client) Complete(ctx context.Context, job *Job) error {
	err := c.complete(ctx, c.db, job)
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		if lost, _, committed := c.batchOutcome(ctx, []*Job{job}, false); committed && len(lost) == 0 {
			return nil
		}
	}
	return err
}

// CompleteTx completes the job inside tx, so a handler's effect in the same database and the
// job's completion commit together or not at all: an exactly-once effect. The key's next job
// cannot start until tx commits.
//
// ErrLeaseLost: the claim is no longer current (another worker may own the job now), and tx
// is aborted by the database: its effects cannot commit, and a Commit of it fails and rolls
// back. Roll it back. (Rolling back to a savepoint lifts the abort for what was written before
// the savepoint: do not call CompleteTx inside a savepoint after effects that must go with it.)
func (c *Client) CompleteTx(ctx context.Context, tx pgx.Tx, job *Job) error {
	err := mapDBError(store.JobCompleteOrAbort(ctx, c.in(tx), job.ID, job.ClaimVersion))
	if err == nil || errors.Is(err, ErrLeaseLost) {
		return err
	}
	return fmt.Errorf("ordered: complete job %d: %w", job.ID, err)
}

func (c *Client) complete(ctx context.Context, db store.DBTX, job *Job) error {
	done, _, err := store.JobCompleteMany(ctx, c.in(db), []int64{job.ID}, []int64{job.ClaimVersion}, 0, 0)
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return fmt.Errorf("ordered: complete job %d: %w", job.ID, err)
	}
	if len(done) == 0 {
		return ErrLeaseLost
	}
	return nil
}

// CompleteMany completes jobs in one statement and one commit, as Complete does each. It
// returns the jobs whose claims were lost; nothing changed for them. A batch that deadlocks
// with a transaction enqueuing to several of its keys out of key order is retried. If the
// statement fails before ctx ends, it asks the database whether the batch committed all the
// same (the connection failed after the commit) and, if so, answers as if nothing had failed.
func (c *Client) CompleteMany(ctx context.Context, jobs []*Job) (lost []*Job, err error) {
	if len(jobs) == 0 {
		return nil, nil
	}
	lost, _, err = c.completeManyClaimNext(ctx, jobs, 0)
	return lost, err
}

// completeAttempts bounds the tries of a batch that hits a deadlock or serialization failure.
const completeAttempts = 3

// completeManyClaimNext is CompleteMany that also claims, in the same statement, up to limit
// of the jobs the completions made ready: the next jobs of the completed jobs' keys.
func (c *Client) completeManyClaimNext(ctx context.Context, jobs []*Job, limit int) (lost, next []*Job, err error) {
	ids, versions := claimsOf(jobs)
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		done, claimed, err := store.JobCompleteMany(ctx, c.db, ids, versions, limit, c.cfg.Lease)
		if err == nil {
			return lostOf(jobs, done), claimedJobs(claimed, sent), nil
		}
		resetIfReadOnly(c.pool, err)
		// The statement rolled back whole: trying it again is safe.
		if attempt < completeAttempts && isTransient(err) && ctx.Err() == nil {
			continue
		}
		// The answer may be what was lost (the connection failed after the commit): then the
		// next jobs the batch claimed would wait out their leases, and the jobs it completed
		// would look lost to a second try.
		if lost, next, ok := c.batchOutcome(ctx, jobs, limit > 0); ok {
			return lost, next, nil
		}
		return nil, nil, fmt.Errorf("ordered: complete %d jobs: %w", len(jobs), err)
	}
}

// batchOutcome asks the database what became of a completion batch of jobs whose answer was
// lost. ok: it committed, and lost and next are its outcome; with claimedNext (the batch
// claimed next jobs), next holds those that are still its own, leased again from now.
func (c *Client) batchOutcome(ctx context.Context, jobs []*Job, claimedNext bool) (lost, next []*Job, ok bool) {
	if ctx.Err() != nil {
		return nil, nil, false
	}
	ids, versions := claimsOf(jobs)
	var keys []string
	if claimedNext {
		keys = make([]string, len(jobs))
		for i, j := range jobs {
			keys[i] = j.Key
		}
	}
	for attempt := 1; ; attempt++ {
		sent := time.Now()
		done, claimed, err := store.JobBatchOutcome(ctx, c.db, ids, versions, keys, c.cfg.Lease)
		resetIfReadOnly(c.pool, err)
		// It locks the keys as a completion does, so it can deadlock as one can with a
		// transaction that enqueues to several keys out of key order; it rolled back whole.
		if err != nil && attempt < completeAttempts && isTransient(err) && ctx.Err() == nil {
			continue
		}
		if err != nil || len(done) == 0 {
			return nil, nil, false
		}
		return lostOf(jobs, done), claimedJobs(claimed, sent), true
	}
}

func claimsOf(jobs []*Job) (ids, versions []int64) {
	ids, versions = make([]int64, len(jobs)), make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i], versions[i] = j.ID, j.ClaimVersion
	}
	return ids, versions
}

// lostOf returns the jobs whose claims are not in done.
func lostOf(jobs []*Job, done []store.Claim) []*Job {
	completed := make(map[store.Claim]bool, len(done))
	for _, c := range done {
		completed[c] = true
	}
	var lost []*Job
	for _, j := range jobs {
		if !completed[store.Claim{ID: j.ID, Version: j.ClaimVersion}] {
			lost = append(lost, j)
		}
	}
	return lost
}

// releaseUnrun gives back a claimed job without counting the attempt: it never started
// (handlerErr nil), or its handler was cut short by StopAndCancel and returned handlerErr.
// ErrLeaseLost: the claim is no longer current.
func (c *Client) releaseUnrun(ctx context.Context, job *Job, handlerErr error) error {
	var text *string
	if handlerErr != nil {
		t := errorText(handlerErr)
		text = &t
	}
	ok, err := store.JobReleaseUnrun(ctx, c.db, job.ID, job.ClaimVersion, text)
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return fmt.Errorf("ordered: release job %d: %w", job.ID, err)
	}
	if !ok {
		return ErrLeaseLost
	}
	return nil
}

// Renew extends the job's lease to Config.Lease from now and returns the new expiry.
// ErrLeaseLost: the claim is no longer current; stop working on the job.
func (c *Client) Renew(ctx context.Context, job *Job) (time.Time, error) {
	until, ok, err := store.LeaseExtend(ctx, c.db, job.ID, job.ClaimVersion, c.cfg.Lease)
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return time.Time{}, fmt.Errorf("ordered: renew job %d: %w", job.ID, err)
	}
	if !ok {
		return time.Time{}, ErrLeaseLost
	}
	return until, nil
}

// Retry gives the job back after a failed attempt, to run again after Config.Backoff's delay.
// A job with no attempts left fails for good instead, and the policy decides for its key.
// With an error the outcome is OutcomeNone; ErrLeaseLost: the claim was lost, nothing changed.
func (c *Client) Retry(ctx context.Context, job *Job, cause error) (Outcome, error) {
	return c.RetryAfter(ctx, job, c.cfg.Backoff.Delay(job.Attempt), cause)
}

// RetryAfter is Retry with a delay chosen by the caller.
func (c *Client) RetryAfter(ctx context.Context, job *Job, delay time.Duration, cause error) (Outcome, error) {
	return c.retryAfter(ctx, c.db, false, job, delay, cause)
}

// RetryTx is Retry inside tx, so the job goes back with the caller's own changes or not at
// all. ErrLeaseLost: the claim is no longer current, and tx is aborted by the database (as by
// CompleteTx): nothing written in it can commit. Roll it back. Until tx ends, the job's row is
// locked: its lease renewals wait for tx.
func (c *Client) RetryTx(ctx context.Context, tx pgx.Tx, job *Job, cause error) (Outcome, error) {
	return c.RetryAfterTx(ctx, tx, job, c.cfg.Backoff.Delay(job.Attempt), cause)
}

// RetryAfterTx is RetryTx with a delay chosen by the caller.
func (c *Client) RetryAfterTx(ctx context.Context, tx pgx.Tx, job *Job, delay time.Duration, cause error) (Outcome, error) {
	return c.retryAfter(ctx, c.in(tx), true, job, delay, cause)
}

// retryAfter runs a retry on db; inTx: db is a caller's transaction, which a lost claim aborts.
func (c *Client) retryAfter(ctx context.Context, db store.DBTX, inTx bool, job *Job, delay time.Duration, cause error) (Outcome, error) {
	if job.Attempt >= job.MaxAttempts {
		return c.fail(ctx, db, inTx, job, cause, true)
	}
	ok, err := store.JobReleaseForRetry(ctx, db, job.ID, job.ClaimVersion, max(delay, 0), errorText(cause))
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return OutcomeNone, fmt.Errorf("ordered: retry job %d: %w", job.ID, err)
	}
	if !ok {
		return OutcomeNone, c.claimLost(ctx, db, inTx, job)
	}
	return OutcomeRetried, nil
}

// Fail fails the job for good, without further attempts; the policy decides whether its key
// blocks or moves on. With an error the outcome is OutcomeNone; ErrLeaseLost: the claim was
// lost, nothing changed.
func (c *Client) Fail(ctx context.Context, job *Job, cause error) (Outcome, error) {
	return c.fail(ctx, c.db, false, job, cause, false)
}

// FailTx is Fail inside tx, so the job fails with the caller's own changes or not at all.
// ErrLeaseLost: the claim is no longer current, and tx is aborted by the database (as by
// CompleteTx): nothing written in it can commit. Roll it back.
func (c *Client) FailTx(ctx context.Context, tx pgx.Tx, job *Job, cause error) (Outcome, error) {
	return c.fail(ctx, c.in(tx), true, job, cause, false)
}

func (c *Client) fail(ctx context.Context, db store.DBTX, inTx bool, job *Job, cause error, exhausted bool) (Outcome, error) {
	decision := c.cfg.Policy.Decide(&policy.Failure{
		JobID: job.ID, Key: job.Key, Seq: job.Seq, Kind: job.Kind,
		Attempts: job.Attempt, MaxAttempts: job.MaxAttempts, Err: cause, Exhausted: exhausted,
	})
	ok, err := store.JobFailIfClaimed(ctx, db, store.JobFailParams{
		ID: job.ID, Version: job.ClaimVersion, Error: errorText(cause), Block: decision == policy.Block,
	})
	if err != nil {
		resetIfReadOnly(c.pool, err)
		return OutcomeNone, fmt.Errorf("ordered: fail job %d: %w", job.ID, err)
	}
	if !ok {
		return OutcomeNone, c.claimLost(ctx, db, inTx, job)
	}
	return outcomeOf(decision), nil
}

// claimLost reports job's claim lost: ErrLeaseLost. In a caller's transaction it first
// aborts that transaction, so that what the caller wrote beside the write cannot commit.
func (c *Client) claimLost(ctx context.Context, db store.DBTX, inTx bool, job *Job) error {
	if !inTx {
		return ErrLeaseLost
	}
	err := mapDBError(store.JobClaimLost(ctx, db, job.ID, job.ClaimVersion))
	if err == nil || errors.Is(err, ErrLeaseLost) {
		return ErrLeaseLost
	}
	return fmt.Errorf("ordered: abort the transaction of lost claim %d of job %d: %w", job.ClaimVersion, job.ID, err)
}

// FailExhausted fails, through the policy, up to limit jobs whose lease expired on their last
// attempt: their workers crashed or stalled on every attempt, so the claim will not take them
// again. It returns how many it failed. Safe to run from many processes at once: each job is
// failed by one of them. A job whose current lease is still valid is never failed.
func (c *Client) FailExhausted(ctx context.Context, limit int) (int, error) {
	return c.failExhausted(ctx, limit, nil)
}

func (c *Client) failExhausted(ctx context.Context, limit int, onFail func(policy.Decision)) (int, error) {
	if limit < 1 {
		limit = ExhaustedBatchDefault
	}
	jobs, err := store.JobExhaustedList(ctx, c.db, limit)
	if err != nil {
		return 0, fmt.Errorf("ordered: list exhausted jobs: %w", err)
	}
	failed := 0
	for _, j := range jobs {
		cause := fmt.Errorf("lease expired on attempt %d of %d: the worker stopped or crashed", j.Attempts, j.MaxAttempts)
		decision := c.cfg.Policy.Decide(&policy.Failure{
			JobID: j.ID, Key: j.Key, Seq: j.Seq, Kind: j.Kind, Attempts: j.Attempts,
			MaxAttempts: j.MaxAttempts, Err: cause, Exhausted: true, LeaseExpired: true,
		})
		ok, err := store.JobFailIfClaimed(ctx, c.db, store.JobFailParams{
			ID: j.ID, Version: j.ClaimVersion, Error: errorText(cause),
			Block: decision == policy.Block, Expired: true,
		})
		if err != nil {
			return failed, fmt.Errorf("ordered: fail exhausted job %d: %w", j.ID, err)
		}
		if ok {
			failed++
			if onFail != nil {
				onFail(decision)
			}
			c.cfg.Logger.WarnContext(ctx, "ordered: job failed after its lease expired on the last attempt",
				slogJob(j.ID, j.Key, j.Seq), "decision", decision.String())
		}
	}
	return failed, nil
}

func outcomeOf(d policy.Decision) Outcome {
	if d == policy.Block {
		return OutcomeBlocked
	}
	return OutcomeSkipped
}

// errorText is the error stored with a job: text PostgreSQL can store, bounded, and never the
// payload (handlers' errors are theirs to keep clean of secrets).
func errorText(err error) string {
	if err == nil {
		return ""
	}
	return truncate(storableText(err.Error()), MaxErrorBytes)
}

// storableText is s with each NUL byte and each byte that is not UTF-8 written as its \xNN
// escape: an error that wraps a response body or a command's output must still be stored, or
// the job could not be failed or retried.
func storableText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == 0 || (r == utf8.RuneError && size == 1) {
			fmt.Fprintf(&b, `\x%02x`, s[i])
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
