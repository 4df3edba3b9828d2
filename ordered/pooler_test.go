package ordered_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/pgbouncer"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// poolerBundle is a queue reached through a private PgBouncer: pool goes through it with
// pgx's defaults, as a user's pool would, and client on it declares the pooler. direct reaches
// the queue without the pooler, for the test's own checks.
type poolerBundle struct {
	ctx     context.Context
	mode    pgbouncer.Mode
	bouncer *pgbouncer.PgBouncer
	url     string
	pool    *pgxpool.Pool
	direct  *pgxpool.Pool
	client  *ordered.Client
	log     *syncBuffer
}

var poolerModes = []pgbouncer.Mode{pgbouncer.Session, pgbouncer.Transaction}

func poolerOf(mode pgbouncer.Mode) ordered.Pooler {
	if mode == pgbouncer.Transaction {
		return ordered.PoolerTransaction
	}
	return ordered.PoolerSession
}

func setupPooler(t *testing.T, mode pgbouncer.Mode, cfg *ordered.Config) *poolerBundle {
	t.Helper()
	q := orderedtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	b := &poolerBundle{ctx: ctx, mode: mode, direct: q.Pool}
	b.bouncer = pgbouncer.New(t, mode, q.Schema)
	b.url = b.bouncer.URL(q.Schema)
	pcfg, err := pgxpool.ParseConfig(b.url)
	require.NoError(t, err)
	pcfg.MaxConns = 8 // with the listener, within pgbouncer.SessionPoolSize
	b.pool, err = pgxpool.NewWithConfig(ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(b.pool.Close)
	var c ordered.Config
	if cfg != nil {
		c = *cfg
	}
	c.Pooler = poolerOf(mode)
	if c.Logger == nil {
		c.Logger, b.log = testLogger(t)
	}
	b.client, err = ordered.NewClient(b.pool, &c)
	require.NoError(t, err)
	return b
}

// runLog records the runs of a workload's handlers, in the order they started.
type runLog struct {
	mu      sync.Mutex
	runs    []run
	running map[string]string // key: the job of the key running now
	overlap []string
}

type run struct {
	key              string
	seq              int64
	attempt          int
	id, claimVersion int64
}

func (l *runLog) start(j *ordered.Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running == nil {
		l.running = map[string]string{}
	}
	if other, ok := l.running[j.Key]; ok {
		l.overlap = append(l.overlap, fmt.Sprintf("%s started while %s ran", j.IdempotencyKey(), other))
	}
	l.running[j.Key] = j.IdempotencyKey()
	l.runs = append(l.runs, run{j.Key, j.Seq, j.Attempt, j.ID, j.ClaimVersion})
}

func (l *runLog) end(j *ordered.Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.running, j.Key)
}

// workload enqueues keys × seqs events and returns them by key.
func (b *poolerBundle) workload(t *testing.T, keys, seqs int) {
	t.Helper()
	var evs []ordered.Event
	for s := range seqs {
		for k := range keys {
			evs = append(evs, ordered.Event{Key: fmt.Sprintf("key-%d", k), Seq: int64(s + 1), Kind: "w",
				Payload: json.RawMessage(`{}`)})
		}
	}
	_, err := b.client.EnqueueMany(b.ctx, evs)
	require.NoError(t, err)
}

// doneCount counts the done jobs, through the direct pool.
func (b *poolerBundle) doneCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.direct.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now WHERE status = 'done'`).Scan(&n))
	return n
}

// checkDrained checks a drained workload: every job done and none left running; each key's
// jobs ran one at a time, in seq order; a job ran again only in a later attempt.
func (b *poolerBundle) checkDrained(t *testing.T, l *runLog, keys, seqs int) {
	t.Helper()
	var states []string
	rows, err := b.direct.Query(b.ctx, `SELECT status || ' ' || count(*) FROM ordered_jobs_now GROUP BY status ORDER BY 1`)
	require.NoError(t, err)
	states, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{fmt.Sprintf("done %d", keys*seqs)}, states)

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.overlap, "jobs of one key ran at once")
	last := map[string]int64{}
	attempts := map[string][]int{}
	for _, r := range l.runs {
		require.GreaterOrEqual(t, r.seq, last[r.key], "%s/%d started after %s/%d", r.key, r.seq, r.key, last[r.key])
		last[r.key] = r.seq
		id := fmt.Sprintf("%s/%d", r.key, r.seq)
		require.NotContains(t, attempts[id], r.attempt, "%s ran twice in attempt %d", id, r.attempt)
		attempts[id] = append(attempts[id], r.attempt)
	}
	require.Len(t, attempts, keys*seqs, "every job ran")
}

// The worker drains a workload through PgBouncer in each mode, each key's jobs one at a time
// and in order, no job run twice in one attempt, none left running.
func TestPoolerWorkerDrains(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setupPooler(t, mode, nil)
			const keys, seqs = 8, 25
			b.workload(t, keys, seqs)
			l := &runLog{}
			startPoolerWorker(t, b, l, nil)
			waitFor(t, time.Minute, "the workload done", func() bool { return b.doneCount(t) == keys*seqs })
			b.checkDrained(t, l, keys, seqs)
			require.Equal(t, mode == pgbouncer.Transaction, strings.Contains(b.log.String(), "not listening for notifications"),
				"a worker behind a declared transaction pooler polls")
		})
	}
}

// PgBouncer killed and restarted mid-drain: the connections through it break mid-statement,
// and the worker completes the workload all the same, in order.
func TestPoolerRestartMidDrain(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setupPooler(t, mode, &ordered.Config{Lease: 2 * time.Second})
			const keys, seqs = 6, 40
			b.workload(t, keys, seqs)
			l := &runLog{}
			startPoolerWorker(t, b, l, nil)
			waitFor(t, time.Minute, "a third of the workload done", func() bool { return b.doneCount(t) >= keys*seqs/3 })
			b.bouncer.Restart()
			waitFor(t, time.Minute, "the workload done", func() bool { return b.doneCount(t) == keys*seqs })
			b.checkDrained(t, l, keys, seqs)
		})
	}
}

func startPoolerWorker(t *testing.T, b *poolerBundle, l *runLog, cfg *ordered.WorkerConfig) *ordered.Worker {
	t.Helper()
	if cfg == nil {
		cfg = &ordered.WorkerConfig{Workers: 8, PollInterval: 20 * time.Millisecond}
	}
	w, err := b.client.NewWorker(ordered.HandlerFunc(func(_ context.Context, j *ordered.Job) error {
		l.start(j)
		defer l.end(j)
		return nil
	}), cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.StopAndCancel(ctx))
	})
	return w
}

const businessTableSQL = `CREATE TABLE business (id int PRIMARY KEY)`

// EnqueueTx and EnqueueSQLTx through PgBouncer, in callers' transactions that also write a
// business row, several at once: what commits has its job, what rolls back has neither. Half
// the producers use a Client given no pool, which takes its exec mode from Config.Pooler alone.
func TestPoolerEnqueueInCallersTransaction(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setupPooler(t, mode, nil)
			_, err := b.direct.Exec(b.ctx, businessTableSQL)
			require.NoError(t, err)
			cfg, err := pgx.ParseConfig(b.url)
			require.NoError(t, err)
			sdb := stdlib.OpenDB(*cfg)
			sdb.SetMaxOpenConns(4)
			t.Cleanup(func() { require.NoError(t, sdb.Close()) })
			withoutPool, err := ordered.NewClient(nil, &ordered.Config{Pooler: poolerOf(mode)})
			require.NoError(t, err)

			const perPath, goroutines = 12, 4
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for gr := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					client := b.client
					if gr%2 == 1 {
						client = withoutPool
					}
					errs <- func() error {
						for i := range perPath {
							id := gr*1000 + i
							ev := ordered.Event{Key: fmt.Sprintf("k%d", id%3), Seq: int64(id), Kind: "tx", Payload: json.RawMessage(`{}`)}
							commit := i%2 == 0
							if err := enqueueWithPgx(b, client, id, ev, commit); err != nil {
								return fmt.Errorf("pgx %d: %w", id, err)
							}
							ev.Seq, ev.Key = int64(id+500), "sql"+ev.Key
							if err := enqueueWithSQL(b.ctx, client, sdb, id+500, ev, commit); err != nil {
								return fmt.Errorf("sql %d: %w", id+500, err)
							}
						}
						return nil
					}()
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}

			var want []int64
			for gr := range goroutines {
				for i := 0; i < perPath; i += 2 {
					want = append(want, int64(gr*1000+i), int64(gr*1000+i+500))
				}
			}
			slices.Sort(want)
			rows, err := b.direct.Query(b.ctx, `SELECT id FROM business ORDER BY id`)
			require.NoError(t, err)
			business, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			require.NoError(t, err)
			require.Equal(t, want, business, "business rows: the committed ones")
			rows, err = b.direct.Query(b.ctx, `SELECT seq FROM ordered_jobs_now ORDER BY seq`)
			require.NoError(t, err)
			jobs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			require.NoError(t, err)
			require.Equal(t, want, jobs, "jobs: those of the committed transactions")
		})
	}
}

// A TxHandlerFunc worker through PgBouncer: each handler writes a business row in its
// transaction, and the worker completes the job in the same one (CompleteTx, in the client's
// exec mode, on a pool with pgx's defaults). Every job commits with its row on its first
// attempt: no completion meets a statement prepared on another server connection.
func TestPoolerTxHandlerCompletesInItsTransaction(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setupPooler(t, mode, nil)
			_, err := b.direct.Exec(b.ctx, `CREATE TABLE business (key text, seq bigint, PRIMARY KEY (key, seq))`)
			require.NoError(t, err)
			const keys, seqs = 6, 30
			b.workload(t, keys, seqs)
			w, err := b.client.NewWorker(ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
				// The handler's own statement names a mode safe behind any pooler.
				_, err := tx.Exec(ctx, `INSERT INTO business (key, seq) VALUES ($1, $2)`, pgx.QueryExecModeCacheDescribe, j.Key, j.Seq)
				return err
			}), &ordered.WorkerConfig{Workers: 6, PollInterval: 20 * time.Millisecond})
			require.NoError(t, err)
			require.NoError(t, w.Start(b.ctx))
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				require.NoError(t, w.StopAndCancel(ctx))
			})
			waitFor(t, time.Minute, "the workload done", func() bool { return b.doneCount(t) == keys*seqs })

			var business, firstAttempt int
			require.NoError(t, b.direct.QueryRow(b.ctx, `SELECT count(*) FROM business`).Scan(&business))
			require.NoError(t, b.direct.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now
				WHERE status = 'done' AND attempts = 1`).Scan(&firstAttempt))
			require.Equal(t, keys*seqs, business, "a business row a job")
			require.Equal(t, keys*seqs, firstAttempt, "jobs done on their first attempt; the log: %s", b.log.String())
		})
	}
}

// enqueueWithPgx writes business row id and enqueues ev in one pgx transaction. The caller's
// own statement names a mode safe behind any pooler: the pool has pgx's defaults.
func enqueueWithPgx(b *poolerBundle, c *ordered.Client, id int, ev ordered.Event, commit bool) error {
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // a no-op after commit
	if _, err := tx.Exec(b.ctx, `INSERT INTO business (id) VALUES ($1)`, pgx.QueryExecModeCacheDescribe, id); err != nil {
		return err
	}
	if _, err := c.EnqueueTx(b.ctx, tx, ev); err != nil {
		return err
	}
	if commit {
		return tx.Commit(b.ctx)
	}
	return tx.Rollback(b.ctx)
}

// enqueueWithSQL does what enqueueWithPgx does, in a database/sql transaction on pgx's stdlib
// driver, which reads the exec mode from a statement's first argument as pgx does.
func enqueueWithSQL(ctx context.Context, c *ordered.Client, db *sql.DB, id int, ev ordered.Event, commit bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO business (id) VALUES ($1)`, pgx.QueryExecModeCacheDescribe, id); err != nil {
		return err
	}
	if _, err := c.EnqueueSQLTx(ctx, tx, ev); err != nil {
		return err
	}
	if commit {
		return tx.Commit()
	}
	return tx.Rollback()
}

// A worker whose pooler is not declared finds out that its LISTEN receives nothing behind a
// transaction pooler, says so once and polls; in session mode it listens and wakes on an
// enqueue with no poll due for an hour.
func TestPoolerUndeclaredListenerFallsBackToPolling(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			q := orderedtest.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			bouncer := pgbouncer.New(t, mode, q.Schema)
			// The exec mode the URL can name, as users did before Config.Pooler.
			pool, err := pgxpool.New(ctx, bouncer.URL(q.Schema)+"&default_query_exec_mode=cache_describe")
			require.NoError(t, err)
			defer pool.Close()
			logger, log := testLogger(t)
			c, err := ordered.NewClient(pool, &ordered.Config{Logger: logger})
			require.NoError(t, err)
			started := make(chan string, 10)
			poll := 500 * time.Millisecond
			if mode == pgbouncer.Session {
				poll = time.Hour
			}
			w, err := c.NewWorker(ordered.HandlerFunc(func(_ context.Context, j *ordered.Job) error {
				started <- j.Key
				return nil
			}), &ordered.WorkerConfig{PollInterval: poll})
			require.NoError(t, err)
			require.NoError(t, w.Start(ctx))
			defer func() { require.NoError(t, w.StopAndCancel(ctx)) }()

			const fallback = "the notification listener receives no notifications"
			if mode == pgbouncer.Transaction {
				waitFor(t, time.Minute, "the fallback's warning", func() bool { return strings.Contains(log.String(), fallback) })
			} else {
				// Once the listener's session has run its LISTEN, an enqueue's notification
				// reaches it.
				waitFor(t, 30*time.Second, "the listener's session", func() bool {
					var n int
					require.NoError(t, q.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
						WHERE usename = $1 AND query = 'LISTEN ordered_jobs'`, q.Schema).Scan(&n))
					return n > 0
				})
			}
			_, err = c.Enqueue(ctx, ordered.Event{Key: "a", Seq: 1, Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("the job never started")
			}
			require.Equal(t, mode == pgbouncer.Transaction, strings.Contains(log.String(), fallback))
			require.LessOrEqual(t, strings.Count(log.String(), fallback), 1, "warned once")
		})
	}
}
