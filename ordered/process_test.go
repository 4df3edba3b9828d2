package ordered_test

// Faults with real processes and a real server: a worker process killed or paused in the
// middle of a job, connections terminated under a running worker, PostgreSQL restarted.
//
// The worker processes are this test binary run again: TestMain calls workerProcessMain when
// workerProcessEnv is set. A worker process records what its handler does in the table effects
// of its queue's schema: a "start" row, committed on its own as the handler starts, and a
// "done" row written in the transaction that completes the job (a TxHandlerFunc), so that a
// "done" row exists exactly when that attempt's completion committed.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/schema"
)

// workerProcessEnv, when set, makes the test binary run workerProcessMain instead of the tests.
const workerProcessEnv = "ORDERED_TEST_WORKER_PROCESS"

// The worker process's configuration, from its environment.
const (
	envDBURL    = "ORDERED_TEST_DB_URL"        // libpq URL selecting the queue's schema
	envName     = "ORDERED_TEST_WORKER_NAME"   // recorded in effects.worker
	envLease    = "ORDERED_TEST_LEASE"         // Config.Lease
	envPoll     = "ORDERED_TEST_POLL_INTERVAL" // WorkerConfig.PollInterval
	envWorkers  = "ORDERED_TEST_WORKERS"       // WorkerConfig.Workers
	envJobDelay = "ORDERED_TEST_JOB_DELAY"     // how long each job works
	envHold     = "ORDERED_TEST_HOLD"          // "key/seq": the job the handler holds
	envGoFile   = "ORDERED_TEST_GO_FILE"       // holding ends when this file exists
	envBatch    = "ORDERED_TEST_BATCH"         // a batch worker of this WorkerConfig.BatchSize (0: none)
)

// readyLine is what a worker process prints on stdout once its worker has started.
const readyLine = "ORDERED-TEST-WORKER-READY"

// lostClaimLog is the worker's log message when a job's outcome was refused as stale.
const lostClaimLog = "lost the claim of a job"

// processConfig configures a worker process (and the same handler in this process).
type processConfig struct {
	Name     string
	URL      string
	Lease    time.Duration
	Poll     time.Duration
	Workers  int
	JobDelay time.Duration
	// Hold is "key/seq" of a job to hold: the handler writes its "done" effect (in the
	// completion's transaction) and then waits, ignoring its context, until GoFile exists;
	// without GoFile it waits until its context ends and fails the attempt.
	Hold   string
	GoFile string
	// Batch, if positive, makes the worker a batch worker with this BatchSize, whose handler
	// records each job's "start" and "done" effects on their own (see effectsHandler.batch).
	Batch int
}

func (c processConfig) env() []string {
	return []string{
		workerProcessEnv + "=1",
		envDBURL + "=" + c.URL,
		envName + "=" + c.Name,
		envLease + "=" + c.Lease.String(),
		envPoll + "=" + c.Poll.String(),
		envWorkers + "=" + strconv.Itoa(c.Workers),
		envJobDelay + "=" + c.JobDelay.String(),
		envHold + "=" + c.Hold,
		envGoFile + "=" + c.GoFile,
		envBatch + "=" + strconv.Itoa(c.Batch),
	}
}

func processConfigFromEnv() (processConfig, error) {
	c := processConfig{
		Name: os.Getenv(envName), URL: os.Getenv(envDBURL),
		Hold: os.Getenv(envHold), GoFile: os.Getenv(envGoFile),
	}
	var errs []error
	duration := func(name string) time.Duration {
		d, err := time.ParseDuration(os.Getenv(name))
		errs = append(errs, err)
		return d
	}
	c.Lease, c.Poll, c.JobDelay = duration(envLease), duration(envPoll), duration(envJobDelay)
	var err error
	c.Workers, err = strconv.Atoi(os.Getenv(envWorkers))
	errs = append(errs, err)
	c.Batch, err = strconv.Atoi(os.Getenv(envBatch))
	errs = append(errs, err)
	if c.URL == "" || c.Name == "" {
		errs = append(errs, fmt.Errorf("%s and %s are required", envDBURL, envName))
	}
	return c, errors.Join(errs...)
}

// noBackoff retries at once: a job whose attempt failed on a broken connection is claimable
// again without waiting, so a test's run does not depend on a backoff's timer.
type noBackoff struct{}

func (noBackoff) Delay(int) time.Duration { return 0 }

// workerProcessMain runs a worker in this process; process tests start it, kill it, stop it.
// It prints readyLine once started, stops gracefully on SIGTERM (exit 0) and exits when its
// standard input closes, that is when the test process is gone: it never outlives the tests.
func workerProcessMain() int {
	cfg, err := processConfigFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker process:", err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("worker", cfg.Name, "pid", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	poolCfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		logger.Error("worker process: parse URL", "error", err)
		return 2
	}
	poolCfg.MaxConns = int32(cfg.Workers + 3) // handlers' transactions and their start rows, claims, heartbeats
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		logger.Error("worker process: connect", "error", err)
		return 1
	}
	defer pool.Close()
	client, err := ordered.NewClient(pool, &ordered.Config{Lease: cfg.Lease, Backoff: noBackoff{}, Logger: logger})
	if err != nil {
		logger.Error("worker process: client", "error", err)
		return 1
	}
	h := &effectsHandler{pool: pool, cfg: cfg}
	wcfg := &ordered.WorkerConfig{Workers: cfg.Workers, PollInterval: cfg.Poll, BatchSize: cfg.Batch}
	var w *ordered.Worker
	if cfg.Batch > 0 {
		w, err = client.NewBatchWorker(h.batch, wcfg)
	} else {
		w, err = client.NewWorker(ordered.TxHandlerFunc(h.handle), wcfg)
	}
	if err != nil {
		logger.Error("worker process: worker", "error", err)
		return 1
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	if err := w.Start(ctx); err != nil {
		logger.Error("worker process: start", "error", err)
		return 1
	}
	fmt.Println(readyLine)

	parentGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(parentGone)
	}()
	select {
	case <-term:
	case <-parentGone:
		logger.Error("worker process: the test process is gone; exiting")
		return 1
	}
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer stopCancel()
	if err := w.StopAndCancel(stopCtx); err != nil {
		logger.Error("worker process: stop", "error", err)
		return 1
	}
	logger.Info("worker process: stopped")
	return 0
}

// effectsTableSQL is the table where handlers record what they do.
const effectsTableSQL = `CREATE TABLE effects (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key           text        NOT NULL,
    seq           bigint      NOT NULL,
    claim_version bigint      NOT NULL,
    attempt       integer     NOT NULL,
    worker        text        NOT NULL,
    pid           integer     NOT NULL,
    phase         text        NOT NULL CHECK (phase IN ('start', 'done')),
    at            timestamptz NOT NULL DEFAULT clock_timestamp()
)`

// effect is a row of effects.
type effect struct {
	ID           int64     `db:"id"`
	Key          string    `db:"key"`
	Seq          int64     `db:"seq"`
	ClaimVersion int64     `db:"claim_version"`
	Attempt      int       `db:"attempt"`
	Worker       string    `db:"worker"`
	PID          int       `db:"pid"`
	Phase        string    `db:"phase"`
	At           time.Time `db:"at"`
}

// effectsHandler is the handler of the worker processes and of the in-process workers here.
type effectsHandler struct {
	pool *pgxpool.Pool
	cfg  processConfig
}

func (h *effectsHandler) handle(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
	if err := h.record(ctx, h.pool, j, "start"); err != nil {
		return err
	}
	if h.cfg.JobDelay > 0 {
		select {
		case <-time.After(h.cfg.JobDelay):
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	if err := h.record(ctx, tx, j, "done"); err != nil {
		return err
	}
	if j.IdempotencyKey() == h.cfg.Hold {
		if h.cfg.GoFile == "" {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		// Like a handler stuck in a call that does not watch its context: it goes on, and
		// returns nil, whatever happened to its claim meanwhile.
		for {
			if _, err := os.Stat(h.cfg.GoFile); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// batch is the batch workers' handler: each job's "start" and "done" effects are committed on
// their own, in order; the Hold job, after its "start", is held until the context ends.
func (h *effectsHandler) batch(ctx context.Context, jobs []*ordered.Job) (int, error) {
	for i, j := range jobs {
		if err := h.record(ctx, h.pool, j, "start"); err != nil {
			return i, err
		}
		if j.IdempotencyKey() == h.cfg.Hold {
			<-ctx.Done()
			return i, context.Cause(ctx)
		}
		if err := h.record(ctx, h.pool, j, "done"); err != nil {
			return i, err
		}
	}
	return len(jobs), nil
}

// execer is a pool, a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (h *effectsHandler) record(ctx context.Context, db execer, j *ordered.Job, phase string) error {
	_, err := db.Exec(ctx, `INSERT INTO effects (key, seq, claim_version, attempt, worker, pid, phase)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		j.Key, j.Seq, j.ClaimVersion, j.Attempt, h.cfg.Name, os.Getpid(), phase)
	return err
}

// syncBuffer collects the output of a process or a logger.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testLogger is a logger for an in-process worker, shown when the test fails.
func testLogger(t *testing.T) (*slog.Logger, *syncBuffer) {
	t.Helper()
	out := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", out)
		}
	})
	return slog.New(slog.NewTextHandler(out, nil)), out
}

// workerProc is a worker process.
type workerProc struct {
	name   string
	cmd    *exec.Cmd
	out    *syncBuffer
	exited chan struct{}
	err    error // what Wait returned, once exited is closed
}

// startWorkerProcess starts a worker process and waits until its worker runs. The process is
// killed when the test ends, if it has not exited by then.
func startWorkerProcess(t *testing.T, cfg processConfig) *workerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cfg.env()...)
	p := &workerProc{name: cfg.Name, cmd: cmd, out: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	// The process exits when its standard input closes: after Wait here, or when this process
	// dies, however it dies. No worker outlives the tests.
	_, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // stopped or not; an error only when it has exited already
		<-p.exited
		if t.Failed() {
			t.Logf("worker process %s (pid %d) ended with %v; its output:\n%s", p.name, cmd.Process.Pid, p.err, p.out)
		}
	})
	waitFor(t, 30*time.Second, "worker process "+cfg.Name+" ready", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("worker process %s exited before it was ready: %v", cfg.Name, p.err)
		default:
		}
		return strings.Contains(p.out.String(), readyLine)
	})
	return p
}

func (p *workerProc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig), "signal %v to worker process %s", sig, p.name)
}

func (p *workerProc) waitExit(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(within):
		t.Fatalf("worker process %s did not exit within %v", p.name, within)
	}
}

// kill kills the process (SIGKILL: no cleanup of any kind) and waits until it is gone.
func (p *workerProc) kill(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGKILL)
	p.waitExit(t, 10*time.Second)
}

// stop stops the process gracefully (SIGTERM) and requires a clean exit.
func (p *workerProc) stop(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	p.waitExit(t, 30*time.Second)
	require.NoError(t, p.err, "worker process %s did not stop cleanly", p.name)
}

// withAppName returns the libpq URL with application_name set, so that a test can find the
// sessions of one worker in pg_stat_activity, and only them.
func withAppName(t *testing.T, raw, app string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// newAppPool is a pool on raw whose sessions carry application_name app.
func newAppPool(t *testing.T, ctx context.Context, raw, app string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(withAppName(t, raw, app))
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// querier is a pool or a connection.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func createEffectsTable(t *testing.T, ctx context.Context, db querier) {
	t.Helper()
	_, err := db.Exec(ctx, effectsTableSQL)
	require.NoError(t, err)
}

// readEffects returns every effect, oldest first.
func readEffects(t *testing.T, ctx context.Context, db querier) []effect {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT * FROM effects ORDER BY at, id`)
	require.NoError(t, err)
	effects, err := pgx.CollectRows(rows, pgx.RowToStructByName[effect])
	require.NoError(t, err)
	return effects
}

func filterEffects(effects []effect, keep func(e effect) bool) []effect {
	var out []effect
	for _, e := range effects {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// requireEffectsInOrder checks the history of keys whose jobs are seqs 1..n (want: key → n):
// every job completed exactly once, in seq order, and no attempt of a job started before the
// key's previous job had completed.
func requireEffectsInOrder(t *testing.T, effects []effect, want map[string]int) {
	t.Helper()
	done := map[string][]int64{}
	for _, e := range effects {
		ran := done[e.Key]
		next := int64(len(ran) + 1)
		switch e.Phase {
		case "start":
			require.Equal(t, next, e.Seq, "key %s: an attempt of seq %d (claim %d, worker %s) started when seqs %v were done",
				e.Key, e.Seq, e.ClaimVersion, e.Worker, ran)
		case "done":
			require.Equal(t, next, e.Seq, "key %s: seq %d (claim %d, worker %s) completed when seqs %v were done",
				e.Key, e.Seq, e.ClaimVersion, e.Worker, ran)
			done[e.Key] = append(ran, e.Seq)
		}
	}
	require.Len(t, done, len(want), "keys with completed jobs")
	for key, n := range want {
		require.Len(t, done[key], n, "completed jobs of key %s", key)
	}
}

// jobRow is what the tests read of a job.
type jobRow struct {
	Status       string
	Attempts     int
	ClaimVersion int64
	AttemptedAt  time.Time
}

func (b *testBundle) job(t *testing.T, id int64) jobRow {
	t.Helper()
	var j jobRow
	require.NoError(t, b.pool.QueryRow(b.ctx,
		`SELECT status, attempts, claim_version, attempted_at FROM ordered_jobs_now WHERE id = $1`, id).
		Scan(&j.Status, &j.Attempts, &j.ClaimVersion, &j.AttemptedAt))
	return j
}

// sessions counts the sessions of app matching a condition on pg_stat_activity.
func (b *testBundle) sessions(t *testing.T, app, cond string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND `+cond, app).Scan(&n))
	return n
}

// A worker process is SIGKILLed in the middle of a job. Its lease, renewed by heartbeats while
// it lived, runs out; another worker process takes the job over within lease + poll interval
// (plus a margin) of the kill, runs it as attempt 2, and only then the key's next job.
func TestProcessKilledMidJobIsTakenOverAfterLease(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffectsTable(t, b.ctx, b.pool)
	const lease, poll = time.Second, 100 * time.Millisecond
	ids := b.enqueue(t, "k", 1, 2)

	cfg := processConfig{Lease: lease, Poll: poll, Workers: 2}
	// One slot: A cannot reclaim its own job, should a heartbeat come late on a loaded machine.
	cfgA := cfg
	cfgA.Workers = 1
	cfgA.Name, cfgA.URL, cfgA.Hold = "A", withAppName(t, b.queue.URL, "ordered-test-A-"+b.queue.Schema), "k/1"
	a := startWorkerProcess(t, cfgA)
	waitFor(t, 10*time.Second, "A running k/1", func() bool {
		starts := filterEffects(readEffects(t, b.ctx, b.pool), func(e effect) bool { return e.Worker == "A" })
		return len(starts) == 1 && b.jobStatus(t, ids[0]) == "running"
	})
	// B is up before the crash, as the rest of a fleet would be.
	cfgB := cfg
	cfgB.Name, cfgB.URL = "B", withAppName(t, b.queue.URL, "ordered-test-B-"+b.queue.Schema)
	bw := startWorkerProcess(t, cfgB)
	// While A lives its heartbeats renew the lease, and B leaves the job alone.
	waitFor(t, 10*time.Second, "A renewed its lease", func() bool {
		var renewed bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT lease_until > attempted_at + $2::interval
			FROM ordered_jobs_now WHERE id = $1`, ids[0], lease).Scan(&renewed))
		return renewed
	})
	before := b.job(t, ids[0])
	require.Equal(t, "running", before.Status)
	require.Equal(t, 1, before.Attempts, "B took the job over while A renewed its lease")

	a.kill(t)
	var killedAt, leaseAtKill time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT clock_timestamp(), lease_until FROM ordered_jobs_now WHERE id = $1`,
		ids[0]).Scan(&killedAt, &leaseAtKill))

	waitFor(t, 15*time.Second, "k/1 and k/2 done", func() bool {
		return b.jobStatus(t, ids[0]) == "done" && b.jobStatus(t, ids[1]) == "done"
	})
	j := b.job(t, ids[0])
	require.Equal(t, 2, j.Attempts)
	require.Equal(t, int64(2), j.ClaimVersion)
	takeover := j.AttemptedAt.Sub(killedAt)
	t.Logf("kill to takeover (database clock): %v; lease had %v left at the kill", takeover, leaseAtKill.Sub(killedAt))
	// A renewal still in flight at the kill can only have moved the lease later.
	require.False(t, j.AttemptedAt.Before(leaseAtKill), "the job was taken over before its lease expired")
	// The margin is for a busy machine, where B's poll and its process run late; the takeover's
	// time is reported above.
	require.LessOrEqual(t, takeover, lease+poll*6/5+5*time.Second, "the takeover came late")
	require.Equal(t, 1, b.job(t, ids[1]).Attempts, "the key's next job ran more than once")

	effects := readEffects(t, b.ctx, b.pool)
	requireEffectsInOrder(t, effects, map[string]int{"k": 2})
	require.Empty(t, filterEffects(effects, func(e effect) bool { return e.Worker == "A" && e.Phase == "done" }),
		"the killed worker's effect committed")
	takenOver := filterEffects(effects, func(e effect) bool { return e.Seq == 1 && e.Phase == "done" })
	require.Len(t, takenOver, 1)
	require.Equal(t, "B", takenOver[0].Worker)
	require.Equal(t, 2, takenOver[0].Attempt)
	require.Equal(t, bw.cmd.Process.Pid, takenOver[0].PID)
	bw.stop(t)
}

// A worker process A is paused (SIGSTOP) while it holds job k/1, before its heartbeat renews
// the lease; worker process B takes the job over once the lease expires, completes it and runs
// k/2. When A resumes, its late completion is refused: nothing of A's commits, the job's claim
// is B's, and the key ran in order.
//
// "paused in its handler": A resumes with its handler about to return (its effect written in
// the completion's transaction); either its heartbeat notices the lost claim first, or its
// completion reaches the database and is refused there. "completion in flight": A's
// completion is already at the database, held on the key's lock by the test, when A pauses; it
// is evaluated, and refused, after B's claim, while A is still stopped.
func TestProcessPausedPastLeaseIsFenced(t *testing.T) {
	t.Parallel()
	// Long enough that a renewal slowed by a busy machine does not run into the worker's own
	// fence (which cancels the handler and frees A's slot before the test pauses it).
	const lease, poll = 3 * time.Second, 100 * time.Millisecond
	cfg := processConfig{Lease: lease, Poll: poll, Workers: 2}
	// One slot: A cannot reclaim its own job, should a heartbeat come late on a loaded machine.
	cfgA := cfg
	cfgA.Workers = 1

	start := func(t *testing.T, b *testBundle, name string, c processConfig) (*workerProc, string) {
		app := "ordered-test-" + name + "-" + b.queue.Schema
		c.Name, c.URL = name, withAppName(t, b.queue.URL, app)
		return startWorkerProcess(t, c), app
	}
	effectsOfA := func(t *testing.T, b *testBundle, phase string) []effect {
		return filterEffects(readEffects(t, b.ctx, b.pool), func(e effect) bool { return e.Worker == "A" && e.Phase == phase })
	}
	// resumeA resumes A and waits until it has settled its stale attempt.
	resumeA := func(t *testing.T, b *testBundle, a *workerProc, appA string) {
		a.signal(t, syscall.SIGCONT)
		waitFor(t, 10*time.Second, "A's stale outcome refused", func() bool {
			return strings.Contains(a.out.String(), lostClaimLog) &&
				b.sessions(t, appA, `state = 'idle in transaction'`) == 0
		})
		for _, line := range strings.Split(a.out.String(), "\n") {
			if strings.Contains(line, lostClaimLog) {
				t.Logf("A: %s", line)
			}
		}
	}
	requireFenced := func(t *testing.T, b *testBundle, ids []int64, bw *workerProc) {
		j := b.job(t, ids[0])
		require.Equal(t, "done", j.Status)
		require.Equal(t, 2, j.Attempts)
		effects := readEffects(t, b.ctx, b.pool)
		requireEffectsInOrder(t, effects, map[string]int{"k": 2})
		require.Empty(t, filterEffects(effects, func(e effect) bool { return e.Worker == "A" && e.Phase == "done" }),
			"the paused worker's late completion committed")
		aStarts := filterEffects(effects, func(e effect) bool { return e.Worker == "A" })
		require.Len(t, aStarts, 1)
		require.Equal(t, j.ClaimVersion-1, aStarts[0].ClaimVersion)
		completed := filterEffects(effects, func(e effect) bool { return e.Seq == 1 && e.Phase == "done" })
		require.Len(t, completed, 1)
		require.Equal(t, "B", completed[0].Worker)
		require.Equal(t, bw.cmd.Process.Pid, completed[0].PID)
		require.Equal(t, j.ClaimVersion, completed[0].ClaimVersion, "the job's claim is not B's")
		require.Equal(t, "done", b.jobStatus(t, ids[1]))
	}

	t.Run("paused in its handler", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		createEffectsTable(t, b.ctx, b.pool)
		ids := b.enqueue(t, "k", 1, 2)
		goFile := filepath.Join(t.TempDir(), "go")
		cfgA := cfgA
		cfgA.Hold, cfgA.GoFile = "k/1", goFile
		a, appA := start(t, b, "A", cfgA)
		waitFor(t, 10*time.Second, "A working on k/1", func() bool {
			return len(effectsOfA(t, b, "start")) == 1 && b.sessions(t, appA, `state = 'idle in transaction'`) == 1
		})
		a.signal(t, syscall.SIGSTOP)
		require.Equal(t, 1, b.job(t, ids[0]).Attempts)
		bw, _ := start(t, b, "B", cfg)
		waitFor(t, 15*time.Second, "B took k/1 over and completed it, then k/2", func() bool {
			return b.jobStatus(t, ids[0]) == "done" && b.jobStatus(t, ids[1]) == "done"
		})
		require.NoError(t, os.WriteFile(goFile, nil, 0o600)) // A's handler returns as soon as it runs
		resumeA(t, b, a, appA)
		requireFenced(t, b, ids, bw)
		bw.stop(t)
		a.stop(t)
	})

	t.Run("completion in flight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		createEffectsTable(t, b.ctx, b.pool)
		ids := b.enqueue(t, "k", 1, 2)
		// Completions take the key's row FOR SHARE: holding it FOR UPDATE holds them at the
		// database. Claims and lease renewals do not touch it.
		lock, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = lock.Rollback(b.ctx) }()
		_, err = lock.Exec(b.ctx, `SELECT 1 FROM ordered_keys WHERE key = 'k' FOR UPDATE`)
		require.NoError(t, err)

		a, appA := start(t, b, "A", cfgA)
		waitFor(t, 10*time.Second, "A's completion of k/1 waiting for the key", func() bool {
			return b.sessions(t, appA, `wait_event_type = 'Lock' AND query LIKE '%ordered_job_complete(%'`) == 1
		})
		a.signal(t, syscall.SIGSTOP)
		require.Equal(t, 1, b.job(t, ids[0]).Attempts)
		bw, _ := start(t, b, "B", cfg)
		waitFor(t, 15*time.Second, "B took k/1 over", func() bool { return b.job(t, ids[0]).Attempts == 2 })
		require.NoError(t, lock.Rollback(b.ctx))

		// The database answers A's completion while A is stopped, by aborting A's transaction.
		// Had it accepted it, A's uncommitted update would hold the job, and B could not
		// complete it.
		waitFor(t, 15*time.Second, "A's completion refused, B's committed and k/2 done", func() bool {
			return b.sessions(t, appA, `state = 'idle in transaction (aborted)' AND query LIKE '%ordered_job_complete(%'`) == 1 &&
				b.jobStatus(t, ids[0]) == "done" && b.jobStatus(t, ids[1]) == "done"
		})
		resumeA(t, b, a, appA)
		requireFenced(t, b, ids, bw)
		bw.stop(t)
		a.stop(t)
	})
}

// terminateSessions terminates every session of app (pg_terminate_backend) and returns the
// pids of those that were listening for notifications and of the others.
func (b *testBundle) terminateSessions(t *testing.T, app string) (listeners, others []int) {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT pid, query = $2, pg_terminate_backend(pid)
		FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()`, app, "LISTEN ordered_jobs")
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var pid int
		var listening, terminated bool
		require.NoError(t, rows.Scan(&pid, &listening, &terminated))
		require.True(t, terminated, "session %d not terminated", pid)
		if listening {
			listeners = append(listeners, pid)
		} else {
			others = append(others, pid)
		}
	}
	require.NoError(t, rows.Err())
	return listeners, others
}

// listenerPIDs returns the pids of app's sessions that listen for notifications: whose LISTEN
// has returned. A session still running it is not listening yet, and a drop then is a failed
// reconnection, not the drop of a listener.
func listenerPIDs(t *testing.T, ctx context.Context, db querier, app string) []int {
	t.Helper()
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE application_name = $1 AND query = 'LISTEN ordered_jobs' AND state = 'idle'`, app)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return pids
}

// streamEvents enqueues keys × perKey events (seqs 1..perKey) and returns what
// requireEffectsInOrder wants.
func streamEvents(t *testing.T, b *testBundle, keys, perKey int) map[string]int {
	t.Helper()
	want := map[string]int{}
	for k := range keys {
		key := fmt.Sprintf("key-%02d", k)
		seqs := make([]int64, perKey)
		for i := range seqs {
			seqs[i] = int64(i + 1)
		}
		b.enqueue(t, key, seqs...)
		want[key] = perKey
	}
	return want
}

// An in-process worker's sessions, its notification listener and its pool's connections, are
// terminated by the server twice while it works through a stream. Every job completes, once,
// in order per key; and the listener reconnects by itself: a later enqueue into the idle
// queue starts at once, long before the worker's next poll could have found it.
//
// The poll interval is 6s, not an hour, and long enough to tell a notified start from a
// polled one on a busy machine: a connection loss leaves work that only a poll finds
// (jobs whose outcome could not be settled, recovered after their lease; and, see
// TestWorkerRetriesClaimAfterError, jobs whose wake-up was spent on a failed claim).
func TestConnectionsTerminatedMidRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffectsTable(t, b.ctx, b.pool)
	app := "ordered-test-terminated-" + b.queue.Schema
	pool := newAppPool(t, b.ctx, b.queue.URL, app, 8)
	logger, log := testLogger(t)
	c, err := ordered.NewClient(pool, &ordered.Config{Lease: time.Second, Backoff: noBackoff{}, Logger: logger})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	const keys, perKey = 20, 20
	const total = keys * perKey
	const poll = 6 * time.Second
	want := streamEvents(t, b, keys, perKey)

	h := &effectsHandler{pool: pool, cfg: processConfig{Name: "W", JobDelay: 15 * time.Millisecond}}
	began := time.Now()
	startWorker(t, b, c, ordered.TxHandlerFunc(h.handle), &ordered.WorkerConfig{
		Workers: 4, PollInterval: poll, Registerer: reg,
	})
	waitFor(t, 10*time.Second, "the worker's listener", func() bool { return len(listenerPIDs(t, b.ctx, b.pool, app)) == 1 })

	killed := map[int]bool{}
	for _, share := range []int{20, 45} {
		waitFor(t, 20*time.Second, fmt.Sprintf("%d%% of the jobs done", share), func() bool {
			return b.countStatus(t, "done") >= total*share/100
		})
		done := b.countStatus(t, "done")
		listeners, others := b.terminateSessions(t, app)
		t.Logf("at %d of %d jobs done: terminated listener %v and %d other sessions", done, total, listeners, len(others))
		require.Len(t, listeners, 1, "the worker was not listening when its sessions were terminated")
		require.NotEmpty(t, others)
		require.Less(t, done, total, "the stream ended before its sessions were terminated")
		for _, pid := range listeners {
			killed[pid] = true
		}
	}
	waitFor(t, 30*time.Second, "every job done", func() bool { return b.countStatus(t, "done") == total })
	t.Logf("stream of %d jobs done in %v; retries %v, lost claims %v, expired leases recovered %v, settle failures %d, failed claims %d",
		total, time.Since(began).Round(time.Millisecond), metricValue(t, reg, "ordered_retries_total"),
		metricValue(t, reg, "ordered_lost_ownership_total"), metricValue(t, reg, "ordered_expired_leases_recovered_total"),
		strings.Count(log.String(), "could not settle job"), strings.Count(log.String(), "claim failed"))
	requireEffectsInOrder(t, readEffects(t, b.ctx, b.pool), want)

	// The listener is back: a session of its own, not one of those terminated.
	waitFor(t, 10*time.Second, "a new listener", func() bool {
		for _, pid := range listenerPIDs(t, b.ctx, b.pool, app) {
			if !killed[pid] {
				return true
			}
		}
		return false
	})
	// Nothing runs. Right after one of the worker's claims (a poll), its next poll is at least
	// 0.8·poll away: a job enqueued then and started well before can only have been woken by
	// the notification of its enqueue.
	fetches := func() float64 { return metricValue(t, reg, "ordered_claim_duration_seconds") }
	notBefore := time.Now() // the claim we wait for ends after this
	seen := fetches()
	waitFor(t, 3*poll, "one of the worker's polls", func() bool {
		if fetches() > seen {
			return true
		}
		notBefore = time.Now()
		return false
	})
	b.enqueue(t, "later", 1)
	waitFor(t, 10*time.Second, "the later job started", func() bool {
		return len(filterEffects(readEffects(t, b.ctx, b.pool), func(e effect) bool { return e.Key == "later" })) > 0
	})
	startedWithin := time.Since(notBefore)
	t.Logf("after the listener reconnected, a job enqueued into the idle queue started within %v of the last poll",
		startedWithin.Round(time.Millisecond))
	require.Less(t, startedWithin, poll*8/10-500*time.Millisecond, "the job waited for a poll")
	waitFor(t, 10*time.Second, "the later job done", func() bool { return b.countStatus(t, "done") == total+1 })
}

// PostgreSQL itself restarts (fast shutdown: every session is cut, running transactions roll
// back) while an in-process worker works through a stream. The worker, never restarted,
// recovers by itself: every job completes, once, in order per key, and it listens again.
func TestPostgresRestartMidRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Close()) })

	const app = "ordered-test-restart"
	pool := newAppPool(t, ctx, cluster.URL(), app, 8)
	_, err = schema.Migrate(ctx, pool)
	require.NoError(t, err)
	createEffectsTable(t, ctx, pool)
	// The test watches through a pool of its own, whose failed queries during the restart
	// are retried by polling.
	watch := newAppPool(t, ctx, cluster.URL(), "ordered-test-restart-watch", 2)
	countDone := func() int {
		var n int
		if err := watch.QueryRow(ctx, `SELECT count(*) FROM ordered_jobs_now WHERE status = 'done'`).Scan(&n); err != nil {
			return -1
		}
		return n
	}

	logger, log := testLogger(t)
	c, err := ordered.NewClient(pool, &ordered.Config{Lease: time.Second, Backoff: noBackoff{}, Logger: logger})
	require.NoError(t, err)
	b := &testBundle{ctx: ctx, pool: pool, client: c}
	const keys, perKey = 10, 30
	const total = keys * perKey
	want := streamEvents(t, b, keys, perKey)
	reg := prometheus.NewRegistry()
	h := &effectsHandler{pool: pool, cfg: processConfig{Name: "W", JobDelay: 20 * time.Millisecond}}
	began := time.Now()
	startWorker(t, b, c, ordered.TxHandlerFunc(h.handle), &ordered.WorkerConfig{
		Workers: 4, PollInterval: 200 * time.Millisecond, Registerer: reg,
	})

	waitFor(t, 20*time.Second, "a fifth of the jobs done", func() bool { return countDone() >= total/5 })
	before := countDone()
	restartBegan := time.Now()
	require.NoError(t, cluster.Restart(ctx))
	restart := time.Since(restartBegan)
	var after int
	waitFor(t, 10*time.Second, "the server answering", func() bool { after = countDone(); return after >= 0 })
	t.Logf("restarted in %v with %d then %d of %d jobs done", restart.Round(time.Millisecond), before, after, total)
	require.Less(t, after, total, "the stream ended before the restart")

	waitFor(t, 30*time.Second, "every job done", func() bool { return countDone() == total })
	t.Logf("stream of %d jobs done in %v; retries %v, lost claims %v, expired leases recovered %v, failed claims %d",
		total, time.Since(began).Round(time.Millisecond), metricValue(t, reg, "ordered_retries_total"),
		metricValue(t, reg, "ordered_lost_ownership_total"), metricValue(t, reg, "ordered_expired_leases_recovered_total"),
		strings.Count(log.String(), "claim failed"))
	// A fresh connection: the pools may still hold sessions cut by the restart.
	conn, err := pgx.Connect(ctx, cluster.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	requireEffectsInOrder(t, readEffects(t, ctx, conn), want)
	waitFor(t, 15*time.Second, "the worker listening again", func() bool {
		return len(listenerPIDs(t, ctx, conn, app)) == 1
	})
}

// The listener's reconnection backoff is for consecutive failures: once a listener is back,
// the next drop starts again from the shortest wait. Dropped eight times, one drop after the
// other, the worker waits the first step of its backoff (at most 50 ms) each time, where
// carrying the failures over would wait up to 5 s by the eighth.
func TestListenerReconnectsPromptlyAfterRepeatedTerminations(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	app := "ordered-test-relisten-" + b.queue.Schema
	pool := newAppPool(t, b.ctx, b.queue.URL, app, 4)
	logger, logs := testLogger(t)
	c, err := ordered.NewClient(pool, &ordered.Config{Logger: logger})
	require.NoError(t, err)
	startWorker(t, b, c, ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{PollInterval: time.Hour})

	var listener int
	waitFor(t, 10*time.Second, "the worker's listener", func() bool {
		pids := listenerPIDs(t, b.ctx, b.pool, app)
		if len(pids) == 1 {
			listener = pids[0]
		}
		return listener != 0
	})
	reconnecting := regexp.MustCompile(`notification listener disconnected; reconnecting.* wait=(\S+)`)
	for drop := 1; drop <= 8; drop++ {
		logged := len(logs.String())
		var terminated bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT pg_terminate_backend($1)`, listener).Scan(&terminated))
		require.True(t, terminated)
		old := listener
		waitFor(t, 10*time.Second, "the listener back", func() bool {
			for _, pid := range listenerPIDs(t, b.ctx, b.pool, app) {
				if pid != old {
					listener = pid
					return true
				}
			}
			return false
		})
		// The first wait after this drop; a reconnection that failed on a busy machine may
		// wait longer after it, as it should.
		m := reconnecting.FindStringSubmatch(logs.String()[logged:])
		require.NotNil(t, m, "drop %d: no reconnection logged", drop)
		wait, err := time.ParseDuration(m[1])
		require.NoError(t, err)
		require.LessOrEqual(t, wait, 50*time.Millisecond, "drop %d: the listener first waited %v, as if earlier drops were failures", drop, wait)
	}
}

// A claim that fails (here an injected error; in life a dropped connection, a failover, a
// serialization failure) must not cost the wake-up that caused it: the worker tries again
// soon, not only at its next poll. With a poll interval of an hour, the notified job starts
// within seconds.
func TestWorkerRetriesClaimAfterError(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// The first claim that takes a job fails; the sequence is not rolled back with it.
	_, err := b.pool.Exec(b.ctx, `
		CREATE SEQUENCE claim_attempts;
		CREATE FUNCTION fail_first_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF nextval('claim_attempts') = 1 THEN
				RAISE EXCEPTION 'injected claim failure';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fail_first_claim BEFORE UPDATE ON ordered_heads FOR EACH ROW
			WHEN (OLD.state = 'queued' AND NEW.state = 'running')
			EXECUTE FUNCTION fail_first_claim();`)
	require.NoError(t, err)
	app := "ordered-test-claim-error-" + b.queue.Schema
	pool := newAppPool(t, b.ctx, b.queue.URL, app, 4)
	logger, log := testLogger(t)
	c, err := ordered.NewClient(pool, &ordered.Config{Logger: logger})
	require.NoError(t, err)
	started := make(chan struct{}, 1)
	reg := prometheus.NewRegistry()
	startWorker(t, b, c, ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
		started <- struct{}{}
		return nil
	}), &ordered.WorkerConfig{PollInterval: time.Hour, Registerer: reg})
	// A starting worker claims twice: at once, and when its listener is up (it may have missed
	// a notification until then). After that, only the enqueue's notification wakes it.
	waitFor(t, 10*time.Second, "the worker's first two claims", func() bool {
		return metricValue(t, reg, "ordered_claim_duration_seconds") == 2
	})
	require.Len(t, listenerPIDs(t, b.ctx, b.pool, app), 1)

	b.enqueue(t, "k", 1)
	waitFor(t, 10*time.Second, "the injected claim failure", func() bool { return strings.Contains(log.String(), "injected claim failure") })
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("after a failed claim the notified job waits for the next poll, an hour away")
	}
}

// A transactional handler's completion commits while a heartbeat is on its way: the renewal
// finds the job done, no longer running. The job completed, and the worker must count it as
// completed, not log and count a lost claim whose "outcome is not acknowledged".
func TestTxHandlerCompletionDuringHeartbeatIsNotALostClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// A commit that takes 1.5s, with the completed job's row locked: a deferred trigger.
	_, err := b.pool.Exec(b.ctx, `
		CREATE TABLE slow_commit (v int);
		CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_sleep(1.5);
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON slow_commit
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();`)
	require.NoError(t, err)
	// Lease 3s: heartbeats every second, the first one during the commit.
	c := b.newClient(t, &ordered.Config{Lease: 3 * time.Second})
	reg := prometheus.NewRegistry()
	id := b.enqueue(t, "k", 1)[0]
	startWorker(t, b, c, ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
		_, err := tx.Exec(ctx, `INSERT INTO slow_commit VALUES (1)`)
		return err
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, Registerer: reg})

	waitFor(t, 10*time.Second, "the job settled by the worker", func() bool {
		return metricValue(t, reg, "ordered_completions_total")+metricValue(t, reg, "ordered_lost_ownership_total") >= 1
	})
	j := b.job(t, id)
	require.Equal(t, "done", j.Status)
	require.Equal(t, 1, j.Attempts)
	require.Equal(t, 0.0, metricValue(t, reg, "ordered_lost_ownership_total"), "a completed job counted as a lost claim")
	require.Equal(t, 1.0, metricValue(t, reg, "ordered_completions_total"))
}
