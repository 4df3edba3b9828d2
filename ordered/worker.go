package ordered

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/pool"

	"github.com/orderedq/ordered/ordered/internal/store"
	"github.com/orderedq/ordered/policy"
	"github.com/orderedq/ordered/schema"
)

// ErrWorkerStopped is the cause of a handler's cancelled context when its worker stops with
// StopAndCancel.
var ErrWorkerStopped = errors.New("ordered: worker stopped")

// Defaults and limits of WorkerConfig.
const (
	WorkersDefault             = 10
	PollIntervalDefault        = time.Second
	PollIntervalMin            = 10 * time.Millisecond
	MaintenanceIntervalDefault = 5 * time.Second
	RetentionDefault           = 24 * time.Hour
	// ClaimBatchMax bounds the jobs one claim statement takes.
	ClaimBatchMax = 100
	// notifyChannel is the LISTEN/NOTIFY channel of enqueues; its payload is the schema.
	notifyChannel = "ordered_jobs"
	listenSQL     = "LISTEN " + notifyChannel
	settleTimeout = 30 * time.Second
	claimTimeout  = 30 * time.Second
	// archiveBatchesPerPass bounds one maintenance pass's archival.
	archiveBatchesPerPass = 10
)

// WorkerPoolConns is the size of the pool a worker opens for its own statements, apart from
// its handlers: one for the claim (the fetch loop runs one at a time), completeFlushesMax for
// the completion batches in flight, one for maintenance, and two that the per-job statements
// share (lease renewals, retries, failures, give-backs), which are single-row and short, so a
// burst of them waits milliseconds, never a handler.
const WorkerPoolConns = 1 + completeFlushesMax + 1 + 2

// WorkerConfig configures a Worker. Zero fields take their defaults.
//
// Connections: a started worker runs its own statements (claims, lease renewals, completion
// batches, retries, give-backs, maintenance) through a pool of its own of WorkerPoolConns
// connections, opened at Start from a copy of the client's pool's config (so its exec mode and
// hooks come along) and closed at Stop, so that handlers never starve them; without PollOnly
// it also holds one LISTEN connection. Handlers use the client's pool: a TxHandlerFunc holds
// one of its connections for the whole handler, so that pool needs MaxConns of at least
// Workers (NewWorker warns when it is smaller; the handlers then wait for connections, their
// leases renewed), plus whatever the application's own queries take. In all, a worker costs
// the server WorkerPoolConns + 1 connections beyond the client's pool.
type WorkerConfig struct {
	// Workers is how many handlers run at once. Default WorkersDefault. A job whose handler
	// succeeded waits for its completion batch without taking one of them (its lease is
	// renewed meanwhile); up to about 1,000 such jobs per worker run again after their leases
	// expire if the process dies before their batches commit. While handlers hold their slots
	// for less time than a claim's round trip takes, the worker claims ahead what its slots
	// would finish during one claim (up to a claim's worth); such a job waits for a slot, its
	// lease renewed, and goes back to the queue, its attempt not counted, if it waits longer
	// than four claims' round trips (at least 50 ms). So does a key's next job that a
	// completion batch claimed meanwhile.
	Workers int
	// PollInterval is how often an idle worker looks for work when no notification wakes it
	// (notifications are not durable); each wait is jittered. Default PollIntervalDefault.
	PollInterval time.Duration
	// PollOnly disables LISTEN/NOTIFY: the worker then looks for work every PollInterval.
	// Without it the worker holds one more connection than its pool's, outside the pool, for
	// LISTEN. Behind a transaction-mode pooler a worker polls whatever PollOnly says: set
	// Config.Pooler, or else it notices (its own notification does not arrive), warns and
	// stops listening.
	PollOnly bool
	// HeartbeatInterval is how often a running job's lease is renewed. Default Lease/3.
	HeartbeatInterval time.Duration
	// StopGrace is how long a handler may take to stop once its context is cancelled because
	// its lease is running out. While renewals fail (the database unreachable, a partition),
	// the worker cancels a handler StopGrace before its lease would expire by this process's
	// own clock (less a margin), so a handler that stops within StopGrace never overlaps
	// another worker's claim of its job. Default Lease/6; it must be shorter than
	// 9/10 of the lease less HeartbeatInterval.
	StopGrace time.Duration
	// MaintenanceInterval is how often the worker fails exhausted jobs of crashed workers,
	// archives finished jobs and refreshes the gauges. Default MaintenanceIntervalDefault.
	MaintenanceInterval time.Duration
	// MaxAttempts, when positive, caps the attempts of the jobs this worker runs: a job fails
	// for good after that many attempts even if it was enqueued with more.
	MaxAttempts int
	// Retention is how long done jobs are kept before archival deletes them. Default
	// RetentionDefault; negative keeps them (archive with `ordered archive` instead).
	Retention time.Duration
	// Registerer receives the worker's metrics; nil registers none.
	Registerer prometheus.Registerer
	// MetricsLabels are constant labels on every metric of the worker, such as
	// {"queue": "billing"}. Workers on one Registerer with the same labels share their metrics;
	// the workers of two queues (two schemas) need labels of their own, with the same names.
	MetricsLabels prometheus.Labels
}

// Worker runs a Handler over the queue's jobs: it claims what it can start now, renews the
// leases of running jobs, settles their outcome, and does the queue's maintenance.
type Worker struct {
	// client is the user's: its pool serves the handlers. db is the same client on the
	// worker's own pool, which runs every statement of the worker's (set at Start).
	client  *Client
	db      *Client
	handler Handler
	cfg     WorkerConfig
	log     *slog.Logger
	metrics *metrics

	schema string
	// settleTimeout bounds each settling of an outcome: settleTimeout, shorter in tests.
	settleTimeout time.Duration
	wake          chan struct{}
	// slots holds a token per handler running; its capacity is cfg.Workers.
	slots chan struct{}
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
	loops       conc.WaitGroup
	jobs        *pool.Pool
	completer   *completer
	stopped     chan struct{}
}

// NewWorker returns a Worker that runs h. Start it with Start.
func (c *Client) NewWorker(h Handler, cfg *WorkerConfig) (*Worker, error) {
	if h == nil {
		return nil, errors.New("ordered: NewWorker: nil handler")
	}
	var wc WorkerConfig
	if cfg != nil {
		wc = *cfg
	}
	wc.Workers = cmp.Or(wc.Workers, WorkersDefault)
	wc.PollInterval = cmp.Or(wc.PollInterval, PollIntervalDefault)
	wc.HeartbeatInterval = cmp.Or(wc.HeartbeatInterval, c.cfg.Lease/3)
	wc.StopGrace = cmp.Or(wc.StopGrace, c.cfg.Lease/6)
	wc.MaintenanceInterval = cmp.Or(wc.MaintenanceInterval, MaintenanceIntervalDefault)
	wc.Retention = cmp.Or(wc.Retention, RetentionDefault)
	switch {
	case wc.Workers < 1:
		return nil, fmt.Errorf("ordered: WorkerConfig.Workers %d must be at least 1", wc.Workers)
	case wc.PollInterval < PollIntervalMin:
		return nil, fmt.Errorf("ordered: WorkerConfig.PollInterval %v is below the minimum %v", wc.PollInterval, PollIntervalMin)
	case wc.HeartbeatInterval <= 0 || wc.HeartbeatInterval >= c.cfg.Lease:
		return nil, fmt.Errorf("ordered: WorkerConfig.HeartbeatInterval %v must be positive and shorter than the lease %v", wc.HeartbeatInterval, c.cfg.Lease)
	case wc.StopGrace <= 0 || wc.StopGrace >= c.cfg.Lease*9/10-wc.HeartbeatInterval:
		return nil, fmt.Errorf("ordered: WorkerConfig.StopGrace %v must be positive and shorter than 9/10 of the lease %v less the heartbeat interval %v",
			wc.StopGrace, c.cfg.Lease, wc.HeartbeatInterval)
	case wc.MaxAttempts < 0:
		return nil, fmt.Errorf("ordered: WorkerConfig.MaxAttempts %d must not be negative", wc.MaxAttempts)
	case wc.MaintenanceInterval <= 0:
		return nil, fmt.Errorf("ordered: WorkerConfig.MaintenanceInterval %v must be positive", wc.MaintenanceInterval)
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
		settleTimeout: settleTimeout,
	}, nil
}

// Start starts fetching and running jobs, and returns. ctx serves the start-up only; stop the
// worker with Stop or StopAndCancel. A worker starts once, and not after Stop. A database
// that is not migrated to this version fails Start with an error wrapping
// schema.ErrNotMigrated (or schema.ErrSchemaNewer, if a newer version migrated it).
func (w *Worker) Start(ctx context.Context) error {
	w.lifecycle.Lock()
	switch {
	case w.stopping:
		w.lifecycle.Unlock()
		return fmt.Errorf("ordered: start worker: %w", ErrWorkerStopped)
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
		current, err = schema.CurrentSchema(ctx, db.db)
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
		return fmt.Errorf("ordered: start worker: %w", ErrWorkerStopped)
	}
	w.db, w.schema = db, current
	base := context.WithoutCancel(ctx)
	w.fetchCtx, w.fetchCancel = context.WithCancel(base)
	w.workCtx, w.workCancel = context.WithCancelCause(base)
	// A job's goroutine lives from its claim until its outcome is settled; freeSlots bounds
	// how many there are (slots, prefetch, unsettled), and this only backs it up.
	w.jobs = pool.New().WithMaxGoroutines(w.cfg.Workers + prefetchMax(w.cfg.Workers) + unsettledMax + ClaimBatchMax)
	w.completer = newCompleter(w)
	go w.completer.run()
	w.loops.Go(func() { w.fetchLoop(w.fetchCtx) })
	w.loops.Go(func() { w.maintenanceLoop(w.fetchCtx) })
	if !w.cfg.PollOnly {
		w.loops.Go(func() { w.listenLoop(w.fetchCtx) })
	}
	return nil
}

// Stop stops fetching new jobs, gives back those claimed but not started (their attempts not
// counted), and waits for the running ones to finish and be settled. If ctx ends first, Stop
// returns ctx's error and the jobs go on; Stopped tells when they end. A worker stopped before
// it started, or while it starts, never starts.
func (w *Worker) Stop(ctx context.Context) error {
	w.lifecycle.Lock()
	if !w.stopping {
		w.stopping = true
		switch {
		case !w.started:
			close(w.stopped)
		case w.fetchCancel == nil:
			// Starting (Start closes stopped when it sees the stop), or its start failed,
			// which closed stopped.
		default:
			w.fetchCancel()
			go func() {
				w.loops.Wait()
				w.jobs.Wait()
				w.completer.stop()
				w.workCancel(nil)
				w.db.pool.Close() // every statement of the worker's has returned
				close(w.stopped)
			}()
		}
	}
	w.lifecycle.Unlock()
	select {
	case <-w.stopped:
		return nil
	case <-ctx.Done():
		return ctx.Err()
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

// openPool opens the worker's own pool: the client's pool's config, WorkerPoolConns
// connections, none opened before a statement asks for one.
func (w *Worker) openPool(ctx context.Context) (*Client, error) {
	cfg := w.client.pool.Config() // a copy
	cfg.MaxConns, cfg.MinConns, cfg.MinIdleConns = WorkerPoolConns, 0, 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("ordered: open the worker's pool: %w", err)
	}
	// The same exec mode as the client's: a transaction pooler needs it on every connection.
	return &Client{pool: p, db: store.WithExecMode(p, w.client.mode), mode: w.client.mode, cfg: w.client.cfg}, nil
}

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

// accept applies this worker's attempt cap to a job it claimed, and counts the claim.
func (w *Worker) accept(job *Job) {
	if w.cfg.MaxAttempts > 0 && job.MaxAttempts > w.cfg.MaxAttempts {
		job.MaxAttempts = w.cfg.MaxAttempts
	}
	w.metrics.claims.Inc()
	if job.recovered {
		w.metrics.expiredRecovered.Inc()
	}
	if job.Attempt == 1 {
		w.metrics.enqueueToStart.Observe(job.AttemptedAt.Sub(job.CreatedAt).Seconds())
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
	start := time.Now()
	completed, returned, err := callHandler(ctx, w.handler, w.client, job)
	w.metrics.jobDuration.Observe(returned.Sub(start).Seconds())

	if completed && err == nil {
		// Committed with the handler's transaction; a heartbeat that ran after the commit may
		// have found the job done and cancelled ctx, which changes nothing.
		w.metrics.completionDuration.Observe(time.Since(returned).Seconds())
		w.metrics.completions.Inc()
		return nil, false
	}
	if errors.Is(context.Cause(ctx), ErrLeaseLost) || errors.Is(err, ErrLeaseLost) {
		w.lostOwnership(job, err)
		return nil, false
	}
	if err == nil {
		w.unsettled.Add(1)
		releaseSlot()
		r := w.completer.complete(job)
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
	if errors.Is(context.Cause(ctx), ErrWorkerStopped) {
		// Cut short by StopAndCancel, which is no failure of the job: it goes back with the
		// attempt not counted, so a job on its last attempt is not failed for it.
		w.giveBackStopped(settleCtx, job, err)
		return nil, false
	}
	w.settle(settleCtx, job, err)
	return nil, false
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
	err := w.db.releaseUnrun(ctx, job, nil)
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		w.log.Error("ordered: could not give back an unstarted job", slogJob(job.ID, job.Key, job.Seq), "error", err)
	}
	return err
}

// giveBackStopped releases a job whose handler StopAndCancel cut short (it returned herr),
// its attempt not counted.
func (w *Worker) giveBackStopped(ctx context.Context, job *Job, herr error) {
	switch err := w.db.releaseUnrun(ctx, job, herr); {
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

// startHeartbeat renews the job's lease every HeartbeatInterval, counted from the claim, until
// the heartbeat's stop is called; stop waits for a renewal in flight. A lost claim cancels
// the handler. So does the fence, by this process's own clock, while renewals fail (the
// database may be unreachable, and another worker may own the job by now): StopGrace before
// the lease would run out, counted from when the last renewal that succeeded (or the claim)
// was sent and less a margin, so that a handler that stops within StopGrace never overlaps
// another claim of its job, even one this worker never hears of. One timer serves the beats
// and the fence, which a renewal that hangs does not put off. It is a timer, not a
// goroutine: most jobs end before their first beat, and a goroutine a job would add a stack
// that every garbage collection scans.
func (w *Worker) startHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, job *Job) *heartbeat {
	interval := w.cfg.HeartbeatInterval
	h := &heartbeat{w: w, ctx: ctx, cancel: cancel, job: job, fence: w.fenceAfter(job.claimedAt)}
	next := job.claimedAt.Add(interval)
	if sent := time.Now(); sent.After(h.fence.Add(-interval)) {
		// The claim took so long to answer (a completion batch that waited for its keys) that
		// the fence is near: the lease is renewed before the job goes on, or the job goes
		// back unrun (or is lost).
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
		_, err := w.db.Renew(rctx, job)
		rcancel()
		if err != nil {
			w.log.Warn("ordered: could not renew a lease that the claim's answer took long to bring", slogJob(job.ID, job.Key, job.Seq), "error", err)
			h.over = true
			cancel(ErrLeaseLost)
		}
		h.fence, next = w.fenceAfter(sent), sent.Add(interval)
	}
	h.mu.Lock()
	h.timer = time.AfterFunc(time.Until(next), h.beat)
	h.mu.Unlock()
	return h
}

// fenceAfter is when a job's handler is cancelled if no renewal sent after sent succeeds: the
// lease counted from sent, by this process's clock, less a tenth for margin and StopGrace.
func (w *Worker) fenceAfter(sent time.Time) time.Time {
	lease := w.client.cfg.Lease
	return sent.Add(lease - lease/10 - w.cfg.StopGrace)
}

// heartbeat is one job's lease renewal, in one allocation.
type heartbeat struct {
	w      *Worker
	ctx    context.Context
	cancel context.CancelCauseFunc
	job    *Job

	mu sync.Mutex
	// fence is when the handler's context is cancelled unless a renewal succeeds first.
	fence time.Time
	// renewing is set while a renewal is in flight; the timer waits for the fence meanwhile.
	renewing bool
	// over is set once the heartbeat is stopped, the claim lost or the fence passed.
	over     bool
	lastErr  error
	inFlight sync.WaitGroup
	timer    *time.Timer
}

// beat is the timer's: it renews the lease, or cancels the handler once the fence has passed.
func (h *heartbeat) beat() {
	w, job := h.w, h.job
	h.mu.Lock()
	if h.over {
		h.mu.Unlock()
		return
	}
	sent := time.Now()
	if !sent.Before(h.fence) {
		// No renewal succeeded in time, or the one in flight hangs.
		h.over = true
		lastErr := h.lastErr
		h.mu.Unlock()
		w.log.Warn("ordered: lease running out while renewals fail; cancelling the handler",
			slogJob(job.ID, job.Key, job.Seq), "error", lastErr)
		h.cancel(ErrLeaseLost)
		return
	}
	if h.renewing {
		// A beat that fired as the renewal before it returned: that renewal sets the timer.
		h.mu.Unlock()
		return
	}
	h.renewing = true
	h.timer.Reset(h.fence.Sub(sent))
	h.inFlight.Add(1) // under mu: stop's Wait cannot have begun
	h.mu.Unlock()
	defer h.inFlight.Done()

	interval := w.cfg.HeartbeatInterval
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(h.ctx), interval)
	_, err := w.db.Renew(rctx, job)
	rcancel()

	h.mu.Lock()
	h.renewing = false
	lost := false
	switch {
	case h.over:
		// Stopped, or the fence passed while the renewal was in flight: whatever the
		// database answered comes too late.
	case err == nil:
		h.fence = w.fenceAfter(sent)
	case errors.Is(err, ErrLeaseLost):
		h.over, lost = true, true
		h.timer.Stop()
	default:
		// The next beat tries again; the fence cancels the handler if none succeeds in time.
		h.lastErr = err
		w.log.Warn("ordered: lease renewal failed", slogJob(job.ID, job.Key, job.Seq), "error", err)
	}
	if !h.over {
		// The beats keep their cadence, and never pass the fence.
		next := sent.Add(interval)
		if h.fence.Before(next) {
			next = h.fence
		}
		h.timer.Reset(time.Until(next))
	}
	h.mu.Unlock()
	if lost {
		h.cancel(ErrLeaseLost)
	}
}

func (h *heartbeat) stop() {
	h.mu.Lock()
	h.over = true
	h.timer.Stop()
	h.mu.Unlock()
	h.inFlight.Wait()
}

// settle records a failed attempt (herr is not nil): a retry, or a failure for good.
func (w *Worker) settle(ctx context.Context, job *Job, herr error) {
	var outcome Outcome
	var err error
	var retryAfter *retryAfterError
	switch {
	case IsPermanent(herr):
		outcome, err = w.db.Fail(ctx, job, herr)
	case errors.As(herr, &retryAfter):
		outcome, err = w.db.RetryAfter(ctx, job, retryAfter.delay, herr)
	default:
		outcome, err = w.db.Retry(ctx, job, herr)
	}
	switch {
	case errors.Is(err, ErrLeaseLost):
		w.lostOwnership(job, herr)
	case err != nil:
		// The lease will expire and another claim will take the job again.
		w.log.Error("ordered: could not settle job", slogJob(job.ID, job.Key, job.Seq), "error", err)
	case outcome == Retried:
		w.metrics.retries.Inc()
		w.log.Info("ordered: job will be retried", slogJob(job.ID, job.Key, job.Seq),
			"attempt", job.Attempt, "error", herr)
	default:
		decision := policy.Skip
		if outcome == Blocked {
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

// listenLoop holds a LISTEN connection that wakes the fetch loop on enqueues. Behind a
// transaction pooler (Config.Pooler) there is none: a LISTEN there lasts one transaction and
// its notifications go to no one, so the worker polls. When the pooler is not declared, each
// connection checks that a notification it sends itself arrives within listenProbeTimeout;
// if not, it warns once and leaves the worker polling, which it does all along anyway.
func (w *Worker) listenLoop(ctx context.Context) {
	if w.client.cfg.Pooler == PoolerTransaction {
		w.log.Info("ordered: behind a transaction pooler: polling for jobs, not listening for notifications",
			"poll_interval", w.cfg.PollInterval)
		return
	}
	backoff := policy.Exponential{Base: 50 * time.Millisecond, Max: 5 * time.Second}
	for failures := 0; ctx.Err() == nil; {
		listened, err := w.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errNotificationsLost) {
			w.log.Warn("ordered: the notification listener receives no notifications (is this a transaction-mode "+
				"pooler? then set Config.Pooler to PoolerTransaction); polling for jobs instead",
				"poll_interval", w.cfg.PollInterval, "waited", listenProbeTimeout)
			return
		}
		if listened {
			failures = 0 // it worked until now: reconnect at once, back off only if that fails
		}
		failures++
		w.log.Warn("ordered: notification listener disconnected; reconnecting", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(backoff.Delay(failures)):
		}
	}
}

// listenProbeTimeout bounds the wait for the notification a listener sends itself. Polling
// goes on meanwhile, so a slow answer costs nothing but the wait.
const listenProbeTimeout = 10 * time.Second

// errNotificationsLost: a listener's own notification did not arrive in time.
var errNotificationsLost = errors.New("ordered: notification not received")

// listen holds one LISTEN connection until it fails or ctx ends. listened reports whether the
// LISTEN itself succeeded; errNotificationsLost, that the connection receives no notifications.
func (w *Worker) listen(ctx context.Context) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, w.client.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, listenSQL); err != nil {
		return false, err
	}
	w.signal() // notifications sent while we were not listening are lost: look now
	// Sent through the pool, not on this connection: a pooler could run a NOTIFY of this
	// connection on the very server connection that ran its LISTEN, and deliver it.
	probe := fmt.Sprintf("probe %s %x", w.schema, rand.Uint64())
	if err := store.ListenProbe(ctx, w.db.db, probe); err != nil {
		return false, err // as if the LISTEN had failed: back off
	}
	// The timer stops once the probe is in; the wait then goes on with ctx alone.
	probeCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(listenProbeTimeout, cancel)
	defer timer.Stop()
	for waitCtx := probeCtx; ; {
		n, err := conn.WaitForNotification(waitCtx)
		if err != nil {
			if waitCtx == probeCtx && ctx.Err() == nil && probeCtx.Err() != nil {
				return true, errNotificationsLost
			}
			return true, err
		}
		switch n.Payload {
		case w.schema:
			w.signal()
		case probe:
			timer.Stop()
			waitCtx = ctx
		}
	}
}

// maintenanceLoop runs a maintenance pass every MaintenanceInterval, the first one interval
// after start: the gauges may count the whole table, and a worker starting next to a deep
// backlog should spend its first moments on jobs.
func (w *Worker) maintenanceLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(w.cfg.MaintenanceInterval)):
		}
		w.maintain(ctx)
	}
}

// maintain runs one pass of maintenance; every statement is short and bounded.
func (w *Worker) maintain(ctx context.Context) {
	n, err := w.db.failExhausted(ctx, ExhaustedBatchDefault, func(d policy.Decision) {
		w.metrics.failures.WithLabelValues(d.String()).Inc()
	})
	if err != nil && ctx.Err() == nil {
		w.log.Error("ordered: maintenance: failing exhausted jobs", "error", err)
	}
	if n > 0 {
		w.signal()
	}
	if w.cfg.Retention >= 0 {
		for range archiveBatchesPerPass {
			n, err := w.db.Archive(ctx, ArchiveParams{OlderThan: w.cfg.Retention})
			if err != nil {
				if ctx.Err() == nil {
					w.log.Error("ordered: maintenance: archiving", "error", err)
				}
				break
			}
			if n < ArchiveBatchDefault {
				break
			}
		}
	}
	// Passes are jittered down to 0.8 intervals apart: counts of that age are recounted.
	stats, err := w.db.sharedStats(ctx, w.cfg.MaintenanceInterval*4/5)
	if err != nil {
		if ctx.Err() == nil {
			w.log.Error("ordered: maintenance: stats", "error", err)
		}
		return
	}
	if stats.CountedAt.IsZero() {
		return // another worker is taking the first counts
	}
	w.metrics.observeStats(w.log, w.schema, stats)
}
