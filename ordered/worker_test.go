package ordered_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// startWorker starts a worker and stops it when the test ends.
func startWorker(t *testing.T, b *testBundle, c *ordered.Client, h ordered.Handler, cfg *ordered.WorkerConfig) *ordered.Worker {
	t.Helper()
	w, err := c.NewWorker(h, cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.StopAndCancel(ctx))
	})
	return w
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// completionsBlockedBy counts the completion statements waiting for a lock that the session
// of tx holds (only this test's: tests run in parallel on one server).
func (b *testBundle) completionsBlockedBy(t *testing.T, tx pgx.Tx) int {
	t.Helper()
	var holder, n int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE $1 = ANY (pg_blocking_pids(pid)) AND query LIKE '%ordered_jobs_complete%'`, holder).Scan(&n))
	return n
}

// outlivedLeases reports whether job id was claimed more than n leases ago, by the database's
// clock: a lease it had not renewed would have run out by then.
func (b *testBundle) outlivedLeases(t *testing.T, id int64, n int, lease time.Duration) bool {
	t.Helper()
	var outlived bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp() > attempted_at + $2 * $3::interval
		FROM ordered_jobs_now WHERE id = $1`, id, n, lease).Scan(&outlived))
	return outlived
}

func (b *testBundle) countStatus(t *testing.T, status string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now WHERE status = $1`, status).Scan(&n))
	return n
}

func TestWorkerRunsEveryKeyInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const keys, perKey = 20, 15
	var mu sync.Mutex
	seen := map[string][]int64{}
	active := map[string]bool{}
	var violations []string
	h := ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		mu.Lock()
		if active[j.Key] {
			violations = append(violations, "two jobs of "+j.Key+" at once")
		}
		active[j.Key] = true
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		active[j.Key] = false
		seen[j.Key] = append(seen[j.Key], j.Seq)
		mu.Unlock()
		return nil
	})
	startWorker(t, b, b.client, h, &ordered.WorkerConfig{Workers: 8, PollInterval: 50 * time.Millisecond})
	for k := range keys {
		seqs := make([]int64, perKey)
		for i := range seqs {
			seqs[i] = int64(perKey - 1 - i) // enqueued in reverse within the batch
		}
		b.enqueue(t, fmt.Sprintf("k%d", k), seqs...)
	}
	waitFor(t, 30*time.Second, "all jobs done", func() bool { return b.countStatus(t, "done") == keys*perKey })
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, violations)
	for key, seqs := range seen {
		for i, s := range seqs {
			require.Equal(t, int64(i), s, "key %s ran %v", key, seqs)
		}
	}
}

// An enqueue into an idle system wakes a worker through LISTEN/NOTIFY, long before its poll.
func TestWorkerWakesOnEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	started := make(chan time.Time, 1)
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		started <- time.Now()
		return nil
	}), &ordered.WorkerConfig{PollInterval: time.Hour})

	// The listener is up once the worker holds a LISTEN connection.
	waitFor(t, 10*time.Second, "the LISTEN connection", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE query = 'LISTEN ordered_jobs' AND application_name = current_setting('application_name')`).Scan(&n))
		return n > 0
	})
	enqueued := time.Now()
	b.enqueue(t, "k", 1)
	select {
	case at := <-started:
		t.Logf("enqueue to start: %v", at.Sub(enqueued))
	case <-time.After(20 * time.Second):
		t.Fatal("the job did not start without a poll")
	}
}

// Poll-only mode finds work by polling alone.
func TestWorkerPollOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	done := make(chan struct{}, 1)
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		done <- struct{}{}
		return nil
	}), &ordered.WorkerConfig{PollOnly: true, PollInterval: 50 * time.Millisecond})
	b.enqueue(t, "k", 1)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the poll never found the job")
	}
}

// A job that runs for twice its lease keeps it by heartbeats: one attempt only.
func TestWorkerHeartbeatKeepsLongJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Renewed every 100 ms, and fenced 100 ms before it would run out (StopGrace): only a
	// stall of the test process of about 2.4 s would lose it.
	const lease = 3 * time.Second
	c := b.newClient(t, &ordered.Config{Lease: lease})
	id := b.enqueue(t, "k", 1)[0]
	var attempts sync.Map
	startWorker(t, b, c, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		attempts.Store(j.Attempt, true)
		for !b.outlivedLeases(t, j.ID, 2, lease) {
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 2, PollInterval: 20 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, StopGrace: 100 * time.Millisecond})
	waitFor(t, 30*time.Second, "the job done", func() bool { return b.jobStatus(t, id) == "done" })
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT attempts FROM ordered_jobs_now WHERE id = $1`, id).Scan(&n))
	require.Equal(t, 1, n)
	_, again := attempts.Load(2)
	require.False(t, again)
}

// A lost claim cancels the handler with ErrLeaseLost and its outcome is not acknowledged.
func TestWorkerLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// The next renewal, within a second, finds the claim lost, long before the lease's end.
	c := b.newClient(t, &ordered.Config{Lease: 3 * time.Second})
	reg := prometheus.NewRegistry()
	id := b.enqueue(t, "k", 1)[0]
	running := make(chan struct{})
	cause := make(chan error, 1)
	startWorker(t, b, c, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		close(running)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil // would complete the job, were the claim still ours
	}), &ordered.WorkerConfig{PollInterval: time.Hour, Registerer: reg})
	<-running
	// Another worker takes the job over, as after a stall.
	tag, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET claim_version = claim_version + 1
		WHERE job_id = $1 AND state = 'running'`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	select {
	case err := <-cause:
		require.ErrorIs(t, err, ordered.ErrLeaseLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not cancelled")
	}
	waitFor(t, 5*time.Second, "lost ownership counted", func() bool {
		return metricValue(t, reg, "ordered_lost_ownership_total") == 1
	})
	require.Equal(t, "running", b.jobStatus(t, id))
}

func TestWorkerStopDrainsRunningJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.enqueue(t, "k", 1)[0]
	running := make(chan struct{})
	w, err := b.client.NewWorker(ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		close(running)
		time.Sleep(300 * time.Millisecond)
		return ctx.Err()
	}), &ordered.WorkerConfig{PollInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	<-running
	require.NoError(t, w.Stop(b.ctx))
	require.Equal(t, "done", b.jobStatus(t, id))
	select {
	case <-w.Stopped():
	default:
		t.Fatal("Stopped not closed after Stop returned")
	}
}

// StopAndCancel cancels the handlers. A job whose handler then fails goes back to the queue at
// once, its attempt not counted and the error recorded. It has started, so an event below it
// is late.
func TestWorkerStopAndCancelReleasesJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.enqueue(t, "k", 5)[0]
	cause := make(chan error, 1)
	b.runUntilStopAndCancel(t, func(ctx context.Context) error {
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	require.ErrorIs(t, <-cause, ordered.ErrWorkerStopped)
	require.Equal(t, "queued", b.jobStatus(t, id))
	require.Equal(t, "context canceled", b.lastError(t, id))
	_, err := b.client.Enqueue(b.ctx, validEvent("k", 3))
	requireLateEvent(t, err, "k", 3, 5)
	j := b.claimOne(t, b.client)
	require.Equal(t, id, j.ID)
	require.Equal(t, 1, j.Attempt, "the attempt StopAndCancel cut short was counted")
}

// Being stopped is no failure of the job: one on its last attempt goes back to the queue too,
// rather than fail for good and block its key.
func TestWorkerStopAndCancelDoesNotFailAJobOnItsLastAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil) // the block policy
	last := validEvent("k", 1)
	last.MaxAttempts = 1
	res, err := b.client.EnqueueMany(b.ctx, []ordered.Event{last, validEvent("k", 2)})
	require.NoError(t, err)
	b.runUntilStopAndCancel(t, func(ctx context.Context) error {
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	})
	require.Equal(t, "queued", b.jobStatus(t, res[0].ID))
	j := b.claimOne(t, b.client)
	require.Equal(t, "k/1", j.IdempotencyKey())
	require.Equal(t, 1, j.Attempt)
	require.NoError(t, b.client.Complete(b.ctx, j))
	require.Equal(t, "k/2", b.claimOne(t, b.client).IdempotencyKey())
}

// A TxHandlerFunc that StopAndCancel cancels and that returns nil is completed, its writes
// committed with the completion, as a HandlerFunc's would be: the cancelled context does not
// cut the completion short.
func TestWorkerStopAndCancelCompletesATxHandlerThatReturnsNil(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	effects := b.effectsTable(t)
	id := b.enqueue(t, "k", 1)[0]
	running := make(chan struct{})
	w, err := b.client.NewWorker(ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, j.IdempotencyKey()); err != nil {
			return err
		}
		close(running)
		<-ctx.Done()
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	<-running
	require.NoError(t, w.StopAndCancel(b.ctx))
	require.Equal(t, "done", b.jobStatus(t, id))
	require.Equal(t, 1, effects())
}

// runUntilStopAndCancel runs a worker whose handler waits for its context to end and then
// returns what returned says; it calls StopAndCancel once the first job runs and returns when
// the worker has stopped.
func (b *testBundle) runUntilStopAndCancel(t *testing.T, returned func(ctx context.Context) error) {
	t.Helper()
	running := make(chan struct{})
	var once sync.Once
	w, err := b.client.NewWorker(ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		once.Do(func() { close(running) })
		<-ctx.Done()
		return returned(ctx)
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	<-running
	require.NoError(t, w.StopAndCancel(b.ctx))
}

// A worker stopped before it started (a shutdown that overtook the start-up) never starts:
// Start says so, and nothing of it runs or stays behind.
func TestWorkerStoppedBeforeStartNeverStarts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1)
	w, err := b.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
		t.Error("a worker stopped before it started ran a job")
		return nil
	}), &ordered.WorkerConfig{PollInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Stop(b.ctx))
	err = w.Start(b.ctx)
	require.ErrorIs(t, err, ordered.ErrWorkerStopped)
	require.EqualError(t, err, "ordered: worker stopped: a stopped worker does not start again")
	require.NoError(t, w.StopAndCancel(b.ctx))
	<-w.Stopped()
	require.Equal(t, 1, b.claimOne(t, b.client).Attempt, "the stopped worker claimed k/1")
}

// A Stop while the worker starts (its start-up query waits for a connection) returns when its
// ctx ends, not when the start-up does; the start then gives up, and nothing of it stays.
func TestWorkerStopWhileStartingHonoursItsContext(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg, err := pgxpool.ParseConfig(b.queue.URL)
	require.NoError(t, err)
	acquiring := make(chan struct{}, 1)
	proceed := make(chan struct{})
	cfg.PrepareConn = func(ctx context.Context, _ *pgx.Conn) (bool, error) {
		select {
		case acquiring <- struct{}{}:
		default:
		}
		select {
		case <-proceed:
			return true, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := ordered.NewClient(pool, nil)
	require.NoError(t, err)
	w, err := c.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }), nil)
	require.NoError(t, err)
	startCtx, cancelStart := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancelStart()
	started := make(chan error, 1)
	go func() { started <- w.Start(startCtx) }()
	<-acquiring // Start's query waits for its connection

	ctx, cancel := context.WithTimeout(b.ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.Stop(ctx), context.DeadlineExceeded)
	select {
	case err := <-started:
		t.Fatalf("Stop waited for the start-up (%v), not for its ctx", err)
	default: // the start-up still waits for its connection
	}
	close(proceed)
	require.ErrorIs(t, <-started, ordered.ErrWorkerStopped)
	<-w.Stopped()
}

// A worker whose start failed is stopped, and is not started again; Stop returns at once.
func TestWorkerFailedStartIsStopped(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w, err := b.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }), nil)
	require.NoError(t, err)
	cancelled, cancel := context.WithCancel(b.ctx)
	cancel()
	require.ErrorIs(t, w.Start(cancelled), context.Canceled)
	<-w.Stopped()
	require.ErrorContains(t, w.Start(b.ctx), "already started")
	require.NoError(t, w.Stop(b.ctx))
	err = w.Start(b.ctx)
	require.ErrorIs(t, err, ordered.ErrWorkerStopped)
	require.EqualError(t, err, "ordered: worker stopped: a stopped worker does not start again")
}

func TestWorkerHandlerOutcomes(t *testing.T) {
	t.Parallel()
	// The retried jobs wait an hour: none is claimed again while the metrics are read.
	logs := &syncBuffer{}
	b := setup(t, &ordered.Config{Backoff: policy.Exponential{Base: time.Hour}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	reg := prometheus.NewRegistry()
	ids := map[string]int64{}
	for _, key := range []string{"ok", "permanent", "later", "panic"} {
		ids[key] = b.enqueue(t, key, 1)[0]
	}
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		switch j.Key {
		case "permanent":
			return ordered.Permanent(errors.New("bad invoice"))
		case "later":
			return ordered.RetryIn(time.Hour, errors.New("rate limited"))
		case "panic":
			panic("kaboom")
		}
		return nil
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, Registerer: reg})

	waitFor(t, 20*time.Second, "every job settled", func() bool {
		return b.jobStatus(t, ids["ok"]) == "done" && b.jobStatus(t, ids["permanent"]) == "blocked" &&
			b.lastError(t, ids["later"]) != "" && b.lastError(t, ids["panic"]) != ""
	})
	require.Equal(t, "bad invoice", b.lastError(t, ids["permanent"]))
	require.Equal(t, "rate limited", b.lastError(t, ids["later"]))
	require.Equal(t, "panic: kaboom", b.lastError(t, ids["panic"]))
	// The panic is logged with the stack of the handler that panicked.
	require.Regexp(t, `level=ERROR msg="ordered: handler panicked" job.id=\d+ job.key=panic job.seq=1 panic=kaboom stack=".*TestWorkerHandlerOutcomes`, logs.String())
	var wait time.Duration
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT available_at - now() FROM ordered_jobs_now WHERE id = $1`, ids["later"]).Scan(&wait))
	require.Greater(t, wait, 50*time.Minute)

	// Metrics after the known sequence: 4 claims, 1 completion, 2 retries, 1 blocking failure.
	// Counters move when the settling statements return, a moment after the rows read as settled.
	waitFor(t, 20*time.Second, "the metrics", func() bool {
		return metricValue(t, reg, "ordered_retries_total") == 2 &&
			metricValue(t, reg, "ordered_completions_total") == 1 &&
			metricValue(t, reg, "ordered_failures_total", "decision", "block") == 1
	})
	require.Equal(t, 4.0, metricValue(t, reg, "ordered_claims_total"))
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_completions_total"))
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_failures_total", "decision", "block"))
	require.Equal(t, 0.0, metricValue(t, reg, "ordered_lost_ownership_total"))
	require.Equal(t, 4.0, metricValue(t, reg, "ordered_job_duration_seconds"))
	require.Equal(t, 4.0, metricValue(t, reg, "ordered_enqueue_to_start_seconds"))
}

// A transactional handler's effect commits with the completion, once.
func TestWorkerTxHandlerCommitsEffectWithCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.pool.Exec(b.ctx, `CREATE TABLE effects (idempotency_key text PRIMARY KEY)`)
	require.NoError(t, err)
	ids := b.enqueue(t, "acct", 1, 2, 3)
	startWorker(t, b, b.client, ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, j.IdempotencyKey()); err != nil {
			return err
		}
		if j.Seq == 2 && j.Attempt == 1 {
			return errors.New("fails after its effect: the effect must roll back")
		}
		return nil
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond})
	waitFor(t, 20*time.Second, "all done", func() bool { return b.jobStatus(t, ids[2]) == "done" })
	var keys []string
	rows, err := b.pool.Query(b.ctx, `SELECT idempotency_key FROM effects ORDER BY 1`)
	require.NoError(t, err)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"acct/1", "acct/2", "acct/3"}, keys)
}

// A worker's metrics also count expired leases it recovers, and the gauges follow the queue.
func TestWorkerMetricsRecoveryAndGauges(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := prometheus.NewRegistry()
	id := b.enqueue(t, "k", 1)[0]
	b.enqueue(t, "other", 1)
	b.claimOne(t, b.client) // a worker that dies holding k/1 ...
	b.expireLease(t, id)    // ... and whose lease ran out
	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET available_at = now() - interval '1 minute' WHERE key = 'other'`)
	require.NoError(t, err)
	started := make(chan struct{}, 2)
	release := make(chan struct{})
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		started <- struct{}{}
		<-release
		return nil
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond, Registerer: reg})
	<-started
	<-started
	waitFor(t, 10*time.Second, "running gauge", func() bool {
		return metricValue(t, reg, "ordered_jobs", "status", "running") == 2
	})
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_expired_leases_recovered_total"))
	close(release)
	waitFor(t, 10*time.Second, "done gauge", func() bool {
		return metricValue(t, reg, "ordered_jobs", "status", "done") == 2
	})
}

// A handler's error that is not text PostgreSQL can store (a NUL byte, bytes that are not
// UTF-8: a wrapped response body or command output) is stored with those bytes escaped, so the
// job is failed or retried as its handler said, at once, and not left to its lease.
func TestWorkerStoresHandlerErrorsThatAreNotText(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Backoff: policy.Exponential{Base: time.Hour}})
	ids := map[string]int64{}
	for _, key := range []string{"permanent", "later", "panic"} {
		ids[key] = b.enqueue(t, key, 1)[0]
	}
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		switch j.Key {
		case "permanent":
			return ordered.Permanent(errors.New("upstream said: \x00\x01 binary"))
		case "later":
			return ordered.RetryIn(time.Hour, errors.New("body \xff\xfe end \u00e9"))
		}
		panic("bad \x00")
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond})

	waitFor(t, 20*time.Second, "every job settled", func() bool {
		return b.jobStatus(t, ids["permanent"]) == "blocked" &&
			b.lastError(t, ids["later"]) != "" && b.lastError(t, ids["panic"]) != ""
	})
	require.Equal(t, `upstream said: \x00`+"\x01 binary", b.lastError(t, ids["permanent"]))
	require.Equal(t, `body \xff\xfe end `+"\u00e9", b.lastError(t, ids["later"]))
	require.Equal(t, `panic: bad \x00`, b.lastError(t, ids["panic"]))
	var attempts int
	var wait time.Duration
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT attempts, available_at - now() FROM ordered_jobs_now WHERE id = $1`,
		ids["later"]).Scan(&attempts, &wait))
	require.Equal(t, 1, attempts, "retried once, with its delay")
	require.Greater(t, wait, 50*time.Minute)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT attempts FROM ordered_jobs_now WHERE id = $1`, ids["permanent"]).Scan(&attempts))
	require.Equal(t, 1, attempts, "failed for good at its first attempt")
}

func (b *testBundle) lastError(t *testing.T, id int64) string {
	t.Helper()
	var s *string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT last_error FROM ordered_jobs_now WHERE id = $1`, id).Scan(&s))
	if s == nil {
		return ""
	}
	return *s
}

// metricValue reads a counter, gauge or histogram count from reg; labels are name, value pairs.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// WorkerConfig.MaxAttempts caps the attempts of the jobs a worker runs, below their own.
func TestWorkerMaxAttemptsCapsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Backoff: policy.Exponential{Base: time.Millisecond, Max: time.Millisecond}})
	id := b.enqueue(t, "k", 1)[0] // enqueued with the default of 25 attempts
	var attempts sync.Map
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		attempts.Store(j.Attempt, j.MaxAttempts)
		return errors.New("always failing")
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaxAttempts: 2})
	waitFor(t, 20*time.Second, "the job blocked", func() bool { return b.jobStatus(t, id) == "blocked" })
	maxSeen, ok := attempts.Load(2)
	require.True(t, ok)
	require.Equal(t, 2, maxSeen, "the handler sees the capped MaxAttempts")
	_, third := attempts.Load(3)
	require.False(t, third)
}

// A completion that waits for an open enqueue of its key keeps its lease meanwhile (the
// heartbeat runs until the outcome is settled), so the job is not run again.
func TestWorkerCompletionWaitingForEnqueueKeepsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const lease = 3 * time.Second
	c := b.newClient(t, &ordered.Config{Lease: lease})
	id := b.enqueue(t, "k", 1)[0]

	// An enqueue of the same key stays open: the completion must wait for it.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	_, err = c.EnqueueTx(b.ctx, tx, ordered.Event{Key: "k", Seq: 2})
	require.NoError(t, err)

	var runs sync.Map
	startWorker(t, b, c, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		runs.Store(j.Attempt, j.Seq)
		return nil
	}), &ordered.WorkerConfig{PollInterval: 50 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond, StopGrace: 100 * time.Millisecond})
	waitFor(t, 10*time.Second, "the completion waiting for the key", func() bool {
		return b.completionsBlockedBy(t, tx) > 0
	})
	waitFor(t, 60*time.Second, "the completion waiting for twice the lease", func() bool {
		return b.outlivedLeases(t, id, 2, lease)
	})
	require.Positive(t, b.completionsBlockedBy(t, tx), "the completion stopped waiting")
	require.NoError(t, tx.Commit(b.ctx))

	waitFor(t, 10*time.Second, "k/1 done", func() bool { return b.jobStatus(t, id) == "done" })
	var attempts int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT attempts FROM ordered_jobs_now WHERE id = $1`, id).Scan(&attempts))
	require.Equal(t, 1, attempts, "the job was run again: its lease lapsed while its completion waited")
	_, again := runs.Load(2)
	require.False(t, again)
}

// A key's next job that a completion claims after waiting for the key longer than the lease
// (counted, by the worker's clock, from when the completion was sent) has its lease renewed
// before it runs, rather than be given back for a lease the worker cannot vouch for: it runs
// on the claim the completion made.
func TestWorkerRenewsANextJobWhoseClaimAnsweredLate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const lease = 2 * time.Second
	c := b.newClient(t, &ordered.Config{Lease: lease})
	ids := b.enqueue(t, "k", 1, 2)
	tx := b.holdKeys(t, c, 3, "k")
	reg := prometheus.NewRegistry()
	startWorker(t, b, c, ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond, Registerer: reg,
			HeartbeatInterval: 100 * time.Millisecond, StopGrace: 100 * time.Millisecond})
	waitFor(t, 10*time.Second, "k/1's completion waiting for the key", func() bool {
		return b.completionsBlockedBy(t, tx) > 0
	})
	waitFor(t, 60*time.Second, "the completion waiting past k/1's lease", func() bool {
		return b.outlivedLeases(t, ids[0], 1, lease)
	})
	require.NoError(t, tx.Commit(b.ctx))
	waitFor(t, 10*time.Second, "k/2 done", func() bool { return b.jobStatus(t, ids[1]) == "done" })
	var version int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT claim_version FROM ordered_jobs_now WHERE id = $1`, ids[1]).Scan(&version))
	require.Equal(t, int64(1), version, "k/2 was given back and claimed again")
	require.Zero(t, metricValue(t, reg, "ordered_lost_ownership_total"))
}

// A worker goes on with a key without a claim of its own: each completion claims, in the same
// statement, the job it made ready, for the slot it freed. Order holds, and a key's backlog
// drains with about one statement per job.
func TestWorkerCompletionClaimsKeysNextJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const n = 30
	seqs := make([]int64, n)
	for i := range seqs {
		seqs[i] = int64(i + 1)
	}
	b.enqueue(t, "k", seqs...)
	var mu sync.Mutex
	var ran []int64
	reg := prometheus.NewRegistry()
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, j.Seq)
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: time.Hour, PollOnly: true, Registerer: reg})
	waitFor(t, 20*time.Second, "the key drained", func() bool { return b.countStatus(t, "done") == n })
	mu.Lock()
	require.Equal(t, seqs, ran)
	mu.Unlock()
	require.Equal(t, float64(n), metricValue(t, reg, "ordered_claims_total"))
	// A few claim statements, however long the key: the first, a few that a freed slot set
	// off before k/1's completion had claimed k/2 (they come back empty), and one when the
	// key ran out. Every other job was claimed by a completion.
	require.LessOrEqual(t, metricValue(t, reg, "ordered_claim_duration_seconds"), 5.0)
}

// A stopping worker claims no next job with its completions: once Stop returns, nothing it
// claimed is left running.
func TestWorkerStopLeavesNoNextJobClaimed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2, 3)
	running := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	w, err := b.client.NewWorker(ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		once.Do(func() { close(running) })
		<-release
		return nil
	}), &ordered.WorkerConfig{PollInterval: time.Hour})
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	<-running
	// Stop with a context already done starts the stop (no more fetching) and returns at once.
	expired, cancel := context.WithCancel(b.ctx)
	cancel()
	require.ErrorIs(t, w.Stop(expired), context.Canceled)
	close(release)
	<-w.Stopped()
	require.Equal(t, 0, b.countStatus(t, "running"))
	require.Equal(t, 1, b.countStatus(t, "done"))
	require.Equal(t, 2, b.countStatus(t, "queued"))
}

// StopAndCancel while a completion batch is in flight: the next job that batch claimed is
// given back unstarted, its attempt not counted, instead of run with a cancelled context.
func TestWorkerStopAndCancelGivesBackClaimedNextJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ids := b.enqueue(t, "k", 1, 2)
	var mu sync.Mutex
	var ran []int64
	w, err := b.client.NewWorker(ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, j.Seq)
		return nil
	}), &ordered.WorkerConfig{PollInterval: time.Hour, PollOnly: true})
	require.NoError(t, err)

	// Hold the key: k/1's completion (and the claim of k/2 with it) waits at the database.
	lock, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer lock.Rollback(b.ctx) //nolint:errcheck
	_, err = lock.Exec(b.ctx, `SELECT 1 FROM ordered_keys WHERE key = 'k' FOR UPDATE`)
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	waitFor(t, 10*time.Second, "the completion waiting for the key", func() bool {
		return b.completionsBlockedBy(t, lock) > 0
	})
	expired, cancel := context.WithCancel(b.ctx)
	cancel()
	require.ErrorIs(t, w.StopAndCancel(expired), context.Canceled)
	require.NoError(t, lock.Rollback(b.ctx))
	<-w.Stopped()

	mu.Lock()
	require.Equal(t, []int64{1}, ran)
	mu.Unlock()
	require.Equal(t, "done", b.jobStatus(t, ids[0]))
	var status string
	var attempts int
	var attemptedAt *time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status, attempts, attempted_at FROM ordered_jobs_now WHERE id = $1`,
		ids[1]).Scan(&status, &attempts, &attemptedAt))
	require.Equal(t, "queued", status)
	require.Equal(t, 0, attempts, "an attempt that never started is not counted")
	require.Nil(t, attemptedAt, "a job that never ran has not started")
	require.Equal(t, "k/2", describe([]*ordered.Job{b.claimOne(t, b.client)})[0])
}

// A panic outside any handler (here the failure policy's, called as the worker settles a job)
// is not lost in a goroutine nobody watches: the worker's Stop, where its owner waits, re-raises
// it, once everything else has stopped.
func TestAPanicInTheWorkersMachineryIsReraisedByStop(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1)
	c := b.newClient(t, &ordered.Config{Policy: policy.Func(func(*policy.Failure) policy.Decision {
		panic("policy broke")
	})})
	ran := make(chan struct{})
	w, err := c.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
		close(ran)
		return ordered.Permanent(errors.New("bad job"))
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not run")
	}
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = w.Stop(b.ctx)
	}()
	require.NotNil(t, recovered, "the policy's panic was lost")
	require.Contains(t, fmt.Sprint(recovered), "policy broke")
	select {
	case <-w.Stopped():
	default:
		t.Fatal("Stopped is open after Stop re-raised the panic")
	}
}
