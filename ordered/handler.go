package ordered

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jackc/pgx/v5"
)

// Handler processes jobs for a Worker: a HandlerFunc, or a TxHandlerFunc for effects that
// must commit together with the job's completion.
//
// A handler's outcome decides the job's fate: nil completes it; Permanent(err) fails it for
// good and the policy decides for its key; RetryIn(d, err) retries it after d; any other
// error, or a panic, retries it with the configured backoff. The handler's context is
// cancelled when the claim is lost (context.Cause is ErrLeaseLost: stop, the job belongs to
// someone else now), when it has run for WorkerConfig.JobTimeout (a cause wrapping
// ErrJobTimeout) or when the worker stops with StopAndCancel (cause ErrWorkerStopped).
type Handler interface {
	// run processes job and reports whether it already completed it, and when the handler's
	// own code returned: a completion starts there.
	run(ctx context.Context, c *Client, job *Job) (completed bool, returned time.Time, err error)
}

// HandlerFunc is a Handler whose job is completed by the worker after it returns nil.
// Its effects happen at least once: use Job.IdempotencyKey to make them happen once.
type HandlerFunc func(ctx context.Context, job *Job) error

func (f HandlerFunc) run(ctx context.Context, _ *Client, job *Job) (bool, time.Time, error) {
	err := f(ctx, job)
	return false, time.Now(), err
}

// TxHandlerFunc is a Handler that works inside a transaction, at READ COMMITTED whatever the
// server's default: when it returns nil, the worker completes the job in the same transaction
// and commits, so the handler's database effect and the completion happen together or not at
// all. A stale attempt (lost claim) rolls back and counts as lost ownership, not a failure.
type TxHandlerFunc func(ctx context.Context, tx pgx.Tx, job *Job) error

// txHandlerOptions: under REPEATABLE READ or SERIALIZABLE a completion fails with a
// serialization error whenever its key was enqueued to, or its lease renewed, after the
// snapshot, and the attempt would be retried for it.
var txHandlerOptions = pgx.TxOptions{IsoLevel: pgx.ReadCommitted}

func (f TxHandlerFunc) run(ctx context.Context, c *Client, job *Job) (_ bool, _ time.Time, err error) {
	// The handler's writes, too, may meet a session on a server that takes no writes.
	defer func() { resetIfReadOnly(c.pool, err) }()
	tx, err := c.pool.BeginTx(ctx, txHandlerOptions)
	if err != nil {
		return false, time.Now(), err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after commit
	err = f(ctx, tx, job)
	returned := time.Now()
	if err != nil {
		return false, returned, err
	}
	// The completion and the commit are not cancellable: the handler returned nil, also when
	// StopAndCancel cancelled ctx (the job is then completed, as a HandlerFunc's is), and a
	// heartbeat that finds the job done while the commit is on its way cancels ctx, when a
	// cancelled commit would report an error for a transaction that committed. The claim is
	// fenced in CompleteTx itself, by its version and lease, whatever ctx says.
	settleCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := c.CompleteTx(settleCtx, tx, job); err != nil {
		return false, returned, err
	}
	if err := tx.Commit(settleCtx); err != nil {
		return false, returned, err
	}
	return true, returned, nil
}

// retryInError asks for a retry after a chosen delay.
type retryInError struct {
	delay time.Duration
	err   error
}

func (e *retryInError) Error() string { return e.err.Error() }
func (e *retryInError) Unwrap() error { return e.err }

// RetryIn wraps a handler's error so that the job is retried after delay instead of the
// configured backoff (for example after a rate limit's Retry-After). A delay of zero or less
// retries at once, and each such retry still counts an attempt: a handler that keeps asking
// for one spends the job's attempts in moments. Client.RetryAfter is the same for a caller
// that settles its own jobs.
func RetryIn(delay time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &retryInError{delay: delay, err: err}
}

// callHandler runs the handler, turning a panic into an error of this job alone, logged on
// log with its stack. returned is when the handler's own code returned (or panicked).
func callHandler(ctx context.Context, h Handler, c *Client, job *Job, log *slog.Logger) (completed bool, returned time.Time, err error) {
	defer func() {
		if r := recover(); r != nil {
			completed, returned, err = false, time.Now(), fmt.Errorf("panic: %v", r)
			log.Error("ordered: handler panicked", "job.id", job.ID, "job.key", job.Key, "job.seq", job.Seq,
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	return h.run(ctx, c, job)
}
