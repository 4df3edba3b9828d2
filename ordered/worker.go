package ordered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/panics"
	"github.com/sourcegraph/conc/pool"

	"github.com/orderedq/ordered/internal/startup"
	"github.com/orderedq/ordered/ordered/internal/completer"
	"github.com/orderedq/ordered/ordered/internal/startstop"
	"github.com/orderedq/ordered/ordered/internal/store"
	"github.com/orderedq/ordered/schema"
)

// ErrWorkerStopped is the cause of a handler's cancelled context when its worker stops with
// StopAndCancel.
var ErrWorkerStopped = errors.New("ordered: worker stopped")

// ErrJobTimeout is wrapped by the cause of a handler's cancelled context when the handler
// ran for WorkerConfig.JobTimeout, and by the error recorded for that attempt.
var ErrJobTimeout = errors.New("ordered: job timed out")

const (
	settleTimeout = 30 * time.Second
	claimTimeout  = 30 * time.Second
)

// Worker runs a Handler over the queue's jobs: it claims what it can start now, renews the
// leases of running jobs, settles their outcome, and does the queue's maintenance.
//
// Its machinery, by concern: the fetch loop (fetch.go), the executor that runs each job in a
// slot and settles it (executor.go), lease renewal (heartbeat.go), completion batches
// (completions.go, on internal/completer), the LISTEN connection (internal/notifier) and
// maintenance (internal/maintenance), each loop started and stopped by internal/startstop.
type Worker struct {
	// client is the user's: its pool serves the handlers. db is the same client on the
	// worker's own pool, which runs every statement of the worker's (set at Start).
	client  *Client
	db      *Client
	handler Handler
	// batch is set for a batch worker (NewBatchWorker), which runs it instead of handler.
	batch   BatchHandlerFunc
	cfg     WorkerConfig
	log     *slog.Logger
	metrics *metrics

	schema string
	// settleTimeout bounds each settling of an outcome: settleTimeout, shorter in tests.
	settleTimeout time.Duration
	// timeoutCause is the cause of a handler's context that JobTimeout cancelled.
	timeoutCause error
	wake         chan struct{}
	// slots holds a token per handler running; its capacity is cfg.Workers.
	slots chan struct{}
	// failing holds the failures for good in flight to their place in the worker's pool, and
	// settling the retries and give-backs to theirs (WorkerPoolConns).
	failing, settling gate
	// waiting counts the jobs claimed whose handler has not started: they will take slots.
	waiting atomic.Int64
	// unsettled counts the jobs whose handler succeeded and whose completion waits for its
	// batch; they hold no slot.
	unsettled atomic.Int64
	// moreReady is set when the last claim took all it asked for: more jobs may be ready, so
	// a slot that frees up is worth a claim.
	moreReady atomic.Bool
	// claimTime and slotTime are moving averages (nanoseconds, 0 until measured) of a claim's
	// round trip and of how long a job holds its slot; they decide the prefetch. A job claimed
	// ahead that waited too long for a slot raises slotTime to its wait.
	claimTime atomic.Int64
	slotTime  atomic.Int64

	// lifecycle guards started, stopping and the start's contexts: Start and Stop may race.
	lifecycle   sync.Mutex
	started     bool
	stopping    bool
	fetchCtx    context.Context
	fetchCancel context.CancelFunc
	workCtx     context.Context
	workCancel  context.CancelCauseFunc
	// loops are the fetch loop, maintenance and the notifier; completions is stopped after
	// them and the jobs, once no job waits for a batch.
	loops       []*startstop.Service
	jobs        *pool.Pool
	completer   *completer.Completer[*Job, completionResult]
	completions *startstop.Service
	// batchCompleter batches a batch worker's completions as completer does a worker's jobs;
	// it runs in the completions service too.
	batchCompleter *completer.Completer[*batchCompletion, batchCompletionResult]
	// stopper runs the stop; a panic in it (a loop's, re-raised) is re-raised by Stop.
	stopper conc.WaitGroup
	stopped chan struct{}
	// stopErr is why the worker stopped itself (see Err); nil if it did not.
	stopErr atomic.Pointer[error]
	// schemaStale counts the maintenance passes in a row whose check found the queue's schema
	// migrated by another version (maintenance's goroutine only).
	schemaStale int
}

// NewWorker returns a Worker that runs h. Start it with Start.
func (c *Client) NewWorker(h Handler, cfg *WorkerConfig) (*Worker, error) {
	if h == nil {
		return nil, errors.New("ordered: NewWorker: nil handler")
	}
	wc := cfg.withDefaults(c.cfg.Lease)
	if err := wc.validate(c.cfg.Lease); err != nil {
		return nil, err
	}
	if c.pool == nil {
		return nil, ErrNoPool
	}
	m, err := newMetrics(wc.Registerer, wc.MetricsLabels)
	if err != nil {
		return nil, fmt.Errorf("ordered: register metrics: %w", err)
	}
	if _, tx := h.(TxHandlerFunc); tx {
		if conns := int(c.pool.Stat().MaxConns()); conns < wc.Workers {
			// A warning, not an error: pgxpool's default MaxConns is below WorkersDefault, and
			// a short pool only makes handlers wait for a connection.
			c.cfg.Logger.Warn("ordered: the pool's MaxConns is below WorkerConfig.Workers: TxHandlerFunc handlers will wait for connections",
				"max_conns", conns, "workers", wc.Workers)
		}
	}
	return &Worker{
		client: c, handler: h, cfg: wc, log: c.cfg.Logger, metrics: m,
		wake: make(chan struct{}, 1), slots: make(chan struct{}, wc.Workers), stopped: make(chan struct{}),
		failing: make(gate, 1), settling: make(gate, 1),
		settleTimeout: settleTimeout,
		timeoutCause:  fmt.Errorf("%w after %v", ErrJobTimeout, wc.JobTimeout),
	}, nil
}

// Start starts fetching and running jobs, and returns. ctx serves the start-up only; stop the
// worker with Stop or StopAndCancel. A worker starts once, and not after Stop. A database
// that is not migrated to this version fails Start with an error wrapping
// schema.ErrNotMigrated (or schema.ErrSchemaNewer, if a newer version migrated it). A server
// that refuses or ends the start-up's session for a moment (restarting, shutting down,
// terminating sessions: SQLSTATE 57P01-57P03, 57P05, or a session reset as it starts) is asked
// again for about 3 s.
func (w *Worker) Start(ctx context.Context) error {
	w.lifecycle.Lock()
	switch {
	case w.stopping:
		w.lifecycle.Unlock()
		return fmt.Errorf("%w: a stopped worker does not start again", ErrWorkerStopped)
	case w.started:
		w.lifecycle.Unlock()
		return errors.New("ordered: worker already started")
	}
	w.started = true
	w.lifecycle.Unlock()

	// Outside the lock: a Stop meanwhile returns when its ctx ends, not when this query does.
	// The query also checks that the schema is migrated, so that a worker on an unmigrated
	// database fails here, not at every claim.
	db, err := w.openPool(ctx)
	var current string
	if err == nil {
		err = startup.Retry(ctx, func() (err error) {
			current, err = schema.CurrentSchema(ctx, db.db)
			return err
		})
	}

	w.lifecycle.Lock()
	defer w.lifecycle.Unlock()
	if err != nil || w.stopping {
		if db != nil {
			db.pool.Close()
		}
		close(w.stopped)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w while it started", ErrWorkerStopped)
	}
	w.db, w.schema = db, current
	base := context.WithoutCancel(ctx)
	w.fetchCtx, w.fetchCancel = context.WithCancel(base)
	w.workCtx, w.workCancel = context.WithCancelCause(base)
	// A job's goroutine lives from its claim until its outcome is settled; freeSlots bounds
	// how many there are (slots, prefetch, unsettled), and this only backs it up.
	w.jobs = pool.New().WithMaxGoroutines(w.cfg.Workers + prefetchMax(w.cfg.Workers) + unsettledMax + ClaimBatchMax)
	w.completer = completer.New(w.flushCompletions, CompleteBatchMax, completeFlushesMax)
	w.completions = startstop.New(w.completer.Run)
	if w.batch != nil {
		w.batchCompleter = completer.New(w.flushBatchCompletions, w.batchesPerStatement(), completeFlushesMax)
		w.completions = startstop.New(w.batchCompleter.Run)
	}
	w.loops = []*startstop.Service{startstop.New(w.fetchLoop), startstop.New(w.maintainer().Run)}
	if n := w.notifier(); n != nil {
		w.loops = append(w.loops, startstop.New(n.Run))
	}
	// Fresh services: Start cannot fail. The loops end with fetchCtx, the completions after
	// the jobs.
	_ = w.completions.Start(base)
	for _, s := range w.loops {
		_ = s.Start(w.fetchCtx)
	}
	return nil
}

// Stop stops fetching new jobs, gives back those claimed but not started (their attempts not
// counted), and waits for the running ones to finish and be settled. If ctx ends first, Stop
// returns ctx's error and the jobs go on; Stopped tells when they end. A worker stopped before
// it started, or while it starts, never starts.
func (w *Worker) Stop(ctx context.Context) error {
	w.lifecycle.Lock()
	w.stopLocked()
	w.lifecycle.Unlock()
	select {
	case <-w.stopped:
		w.stopper.Wait() // re-raises a panic of the worker's loops
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stopLocked begins the stop, once (lifecycle held): fetching ends at once, and the stopper
// waits for the loops, then the jobs, then their completions.
func (w *Worker) stopLocked() {
	if w.stopping {
		return
	}
	w.stopping = true
	switch {
	case !w.started:
		close(w.stopped)
	case w.fetchCancel == nil:
		// Starting (Start closes stopped when it sees the stop), or its start failed, which
		// closed stopped.
	default:
		w.fetchCancel()
		w.stopper.Go(func() {
			defer close(w.stopped)
			// Every step runs, whatever panicked before it; the first panic is re-raised.
			var pc panics.Catcher
			for _, s := range w.loops {
				pc.Try(s.Stop)
			}
			pc.Try(w.jobs.Wait)
			pc.Try(w.completions.Stop) // no job waits for a batch any more
			w.workCancel(nil)
			w.db.pool.Close() // every statement of the worker's has returned
			pc.Repanic()
		})
	}
}

// StopAndCancel is Stop that also cancels the running handlers' contexts (cause
// ErrWorkerStopped). A job whose handler then returns an error goes back to the queue at once,
// its attempt not counted: being stopped is no failure of the job, and a job on its last
// attempt is not failed for it. One whose handler returns nil is completed.
func (w *Worker) StopAndCancel(ctx context.Context) error {
	w.lifecycle.Lock()
	cancel := w.workCancel
	w.lifecycle.Unlock()
	if cancel != nil {
		cancel(ErrWorkerStopped)
	}
	return w.Stop(ctx)
}

// Stopped is closed when the worker has stopped and every job it ran is settled.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// Err says why the worker stopped itself, nil if it did not (it runs, or Stop stopped it). A
// worker stops itself, as Stop does, when two maintenance passes in a row find the queue's
// schema migrated by another version: the error wraps schema.ErrSchemaNewer or
// schema.ErrNotMigrated (the functions differ). Run that version's workers in its place; a
// migrate by this one would put its own functions back under them.
func (w *Worker) Err() error {
	if err := w.stopErr.Load(); err != nil {
		return *err
	}
	return nil
}

// openPool opens the worker's own pool: the client's pool's config, WorkerPoolConns
// connections, none opened before a statement asks for one.
func (w *Worker) openPool(ctx context.Context) (*Client, error) {
	cfg := w.client.pool.Config() // a copy
	cfg.MaxConns, cfg.MinConns, cfg.MinIdleConns = WorkerPoolConns, 0, 0
	// Claims record it as the job's claimed_by.
	cfg.ConnConfig.RuntimeParams["application_name"] = cmp.Or(w.cfg.Name,
		cfg.ConnConfig.RuntimeParams["application_name"], defaultWorkerName())
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ordered: open the worker's pool: %w", err)
	}
	// The same exec mode as the client's: a transaction pooler needs it on every connection.
	return &Client{pool: p, db: store.WithExecMode(p, w.client.mode), mode: w.client.mode, cfg: w.client.cfg}, nil
}
