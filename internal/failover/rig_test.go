package failover_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
	"github.com/orderedq/ordered/policy"
	"github.com/orderedq/ordered/schema"
)

// appTablesSQL are the application's tables: a business row that EnqueueTx commits with its
// event, and the handler's effect, which commits with the job's completion.
const appTablesSQL = `
CREATE TABLE orders (key text, seq bigint, PRIMARY KEY (key, seq));
CREATE TABLE effects (n bigserial PRIMARY KEY, key text NOT NULL, seq bigint NOT NULL,
    claim_version bigint NOT NULL);`

// rig is a primary, its standby, and what the clients on them saw.
type rig struct {
	t                *testing.T
	ctx              context.Context
	primary, standby *pgcluster.Cluster
	rec              *recorder
	logs             *syncBuffer
	logger           *slog.Logger
}

// newRig starts a primary and a standby of it (synchronous or not), migrates the queue and
// creates the application's tables on the primary.
func newRig(t *testing.T, synchronous bool) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	primary, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, primary.Close()) })
	conn, err := pgx.Connect(ctx, primary.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = schema.Migrate(ctx, conn)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, appTablesSQL)
	require.NoError(t, err)
	// The standby comes after the schema, so a synchronous one has it without waiting.
	standby, err := primary.StartStandby(ctx, pgcluster.StandbyOptions{Synchronous: synchronous})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, standby.Close()) })
	logs := &syncBuffer{}
	return &rig{
		t: t, ctx: ctx, primary: primary, standby: standby, rec: newRecorder(),
		logs: logs, logger: slog.New(slog.NewTextHandler(logs, nil)),
	}
}

// pool opens a pool on url whose statements the recorder traces.
func (r *rig) pool(url, app string, maxConns int32) *pgxpool.Pool {
	r.t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(r.t, err)
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.ConnConfig.Tracer = &tracer{rec: r.rec}
	// A server that is down is refused at once here; a bound keeps a hung one from holding a
	// statement for long.
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	p, err := pgxpool.NewWithConfig(r.ctx, cfg)
	require.NoError(r.t, err)
	r.t.Cleanup(p.Close)
	return p
}

// clientConfig is the configuration of every client of the rig: a lease short enough that a
// job whose claim the failover orphaned runs again soon, quick retries.
func (r *rig) clientConfig() *ordered.Config {
	return &ordered.Config{
		Lease:   5 * time.Second,
		Policy:  policy.Always(policy.Block),
		Backoff: policy.Exponential{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:  r.logger,
	}
}

// startWorker starts a worker with the recording transactional handler on pool; the returned
// function stops it.
func (r *rig) startWorker(pool *pgxpool.Pool) (stop func()) {
	r.t.Helper()
	client, err := ordered.NewClient(pool, r.clientConfig())
	require.NoError(r.t, err)
	w, err := client.NewWorker(ordered.TxHandlerFunc(r.handle), &ordered.WorkerConfig{
		Workers: 4, PollInterval: 100 * time.Millisecond,
	})
	require.NoError(r.t, err)
	require.NoError(r.t, w.Start(r.ctx))
	var once sync.Once
	stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			require.NoError(r.t, w.Stop(ctx))
		})
	}
	r.t.Cleanup(stop)
	return stop
}

// handle is the worker's handler: it records the start, writes the job's effect, and leaves
// the job's completion for the tracer to see acknowledged (the worker commits the effect with
// the completion after it returns).
func (r *rig) handle(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
	r.rec.started(job)
	if _, err := tx.Exec(ctx, `INSERT INTO effects (key, seq, claim_version) VALUES ($1, $2, $3)`,
		job.Key, job.Seq, job.ClaimVersion); err != nil {
		return err
	}
	r.rec.willCommit(tx.Conn(), job)
	return nil
}

// produce enqueues seqs 1, 2, … of each of keys, in order, until stop is closed: odd seqs with
// Enqueue, even ones with EnqueueTx inside a transaction that also writes the business row.
// An event that fails is sent again until it is acknowledged (an identical duplicate is a
// no-op). While more than maxBacklog acknowledged events wait for their completions, it waits,
// until the kill.
func (r *rig) produce(client *ordered.Client, pool *pgxpool.Pool, keys []string, stop <-chan struct{}) {
	const maxBacklog = 200
	next := make(map[string]int64, len(keys))
	for i := 0; ; i++ {
		key := keys[i%len(keys)]
		next[key]++
		ev := ordered.Event{Key: key, Seq: next[key], Kind: "test", Payload: []byte(`{}`)}
		for {
			select {
			case <-stop:
				return
			default:
			}
			// Not after the kill: how soon the enqueues reconnect is measured then.
			if !r.rec.killed.Load() && r.rec.backlog() > maxBacklog {
				time.Sleep(5 * time.Millisecond) // backpressure, not a correctness wait
				continue
			}
			var err error
			if ev.Seq%2 == 1 {
				_, err = client.Enqueue(r.ctx, ev)
			} else {
				err = enqueueWithOrder(r.ctx, client, pool, ev)
			}
			if err == nil {
				r.rec.enqueued(ev)
				break
			}
			if errors.Is(err, ordered.ErrLateEvent) || errors.Is(err, ordered.ErrDuplicateConflict) ||
				errors.Is(err, ordered.ErrInvalidEvent) {
				r.t.Errorf("enqueue %s/%d: %v", ev.Key, ev.Seq, err)
				return
			}
			r.rec.enqueueFailed(err)
			time.Sleep(10 * time.Millisecond) // the server is away; try again soon
		}
	}
}

// enqueueWithOrder is a business transaction: the order row and its event commit together.
func enqueueWithOrder(ctx context.Context, client *ordered.Client, pool *pgxpool.Pool, ev ordered.Event) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (key, seq) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
			ev.Key, ev.Seq); err != nil {
			return err
		}
		_, err := client.EnqueueTx(ctx, tx, ev)
		return err
	})
}

// waitFor polls cond until it holds, or fails the test after timeout.
func (r *rig) waitFor(timeout time.Duration, what string, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("gave up waiting for %s after %v; the clients logged:\n%s", what, timeout, r.logs.tail(30))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// jobState is a job as the server has it.
type jobState struct {
	ID           int64
	Status       string
	ClaimVersion int64
	FinishedAt   *time.Time
}

// readJobs reads every job of the server at url.
func readJobs(ctx context.Context, t *testing.T, url string) map[history.ID]jobState {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT key, seq, id, status, claim_version, finished_at FROM ordered_jobs_now`)
	require.NoError(t, err)
	jobs := map[history.ID]jobState{}
	for rows.Next() {
		var id history.ID
		var j jobState
		require.NoError(t, rows.Scan(&id.Key, &id.Seq, &j.ID, &j.Status, &j.ClaimVersion, &j.FinishedAt))
		jobs[id] = j
	}
	require.NoError(t, rows.Err())
	return jobs
}

// listening reports whether a session of app listens for notifications on the server at url.
func listening(ctx context.Context, t *testing.T, url, app string) bool {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND query = 'LISTEN ordered_jobs'`, app).Scan(&n))
	return n > 0
}

// readEffects reads the handler's effects of the server at url, in the order they committed.
func readEffects(ctx context.Context, t *testing.T, url string) []history.Effect {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT key, seq, claim_version, n FROM effects ORDER BY n`)
	require.NoError(t, err)
	effects, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (history.Effect, error) {
		var e history.Effect
		return e, row.Scan(&e.Key, &e.Seq, &e.ClaimVersion, &e.Order)
	})
	require.NoError(t, err)
	return effects
}

// ordersWithoutEvents counts business rows whose event is missing, and events of EnqueueTx
// (even seqs) whose business row is missing, on the server at url.
func ordersWithoutEvents(ctx context.Context, t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM orders o
		        WHERE NOT EXISTS (SELECT FROM ordered_jobs_now j WHERE j.key = o.key AND j.seq = o.seq))
		     + (SELECT count(*) FROM ordered_jobs_now j
		        WHERE j.seq % 2 = 0
		          AND NOT EXISTS (SELECT FROM orders o WHERE o.key = j.key AND o.seq = j.seq))`).Scan(&n))
	return n
}

// start is an attempt the handler began.
type start struct {
	history.Start
	began time.Time // by this process's clock
}

// completionAck is a completion whose commit the server acknowledged.
type completionAck struct {
	history.ID
	ClaimVersion int64
	at           time.Time
}

// statement is a claim or an enqueue statement and how it ended.
type statement struct {
	kind string // "claim" or "enqueue"
	port int    // the server's
	// began and at are when it was sent and when it ended.
	began, at time.Time
	code      string // SQLSTATE of its error; "" when it succeeded, "-" for an error without one
	err       error
}

// recorder keeps what the clients saw acknowledged, and every claim and enqueue statement.
type recorder struct {
	mu          sync.Mutex
	enqAcked    map[history.ID]time.Time
	enqFailures int
	lastEnqErr  error
	starts      []start
	pending     map[*pgx.Conn]completionAck // a handler's job, until its transaction ends
	// compAcked holds each event's first acknowledged completion.
	compAcked map[history.ID]completionAck
	// ports counts the statements that ended, by the port of their server.
	ports map[int]int
	// killed is set when the primary is killed.
	killed     atomic.Bool
	statements []statement
}

func newRecorder() *recorder {
	return &recorder{
		enqAcked:  map[history.ID]time.Time{},
		pending:   map[*pgx.Conn]completionAck{},
		compAcked: map[history.ID]completionAck{},
		ports:     map[int]int{},
	}
}

func (r *recorder) enqueued(ev ordered.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.enqAcked[history.ID{Key: ev.Key, Seq: ev.Seq}] = time.Now()
}

func (r *recorder) enqueueFailed(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.enqFailures++
	r.lastEnqErr = err
}

// backlog is how many acknowledged events have no acknowledged completion.
func (r *recorder) backlog() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.enqAcked) - len(r.compAcked)
}

func (r *recorder) started(job *ordered.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.starts = append(r.starts, start{
		Start: history.Start{ID: history.ID{Key: job.Key, Seq: job.Seq}, ClaimVersion: job.ClaimVersion, At: job.AttemptedAt},
		began: time.Now(),
	})
}

func (r *recorder) willCommit(conn *pgx.Conn, job *ordered.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending[conn] = completionAck{ID: history.ID{Key: job.Key, Seq: job.Seq}, ClaimVersion: job.ClaimVersion}
}

// statement records what the tracer saw end on conn.
func (r *recorder) statement(conn *pgx.Conn, q traced, data pgx.TraceQueryEndData) {
	now, sql := time.Now(), q.sql
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ports[serverPort(conn)]++
	switch {
	case sql == "commit" || sql == "rollback":
		ack, ok := r.pending[conn]
		if !ok {
			return
		}
		delete(r.pending, conn)
		// The first acknowledgement of an event's completion is kept: one that comes later
		// is of an attempt that ran again.
		if _, seen := r.compAcked[ack.ID]; !seen && sql == "commit" && data.Err == nil &&
			data.CommandTag.String() == "COMMIT" {
			ack.at = now
			r.compAcked[ack.ID] = ack
		}
	case strings.Contains(sql, "ordered_jobs_claim("), isEnqueue(sql):
		kind := "claim"
		if isEnqueue(sql) {
			kind = "enqueue"
		}
		s := statement{kind: kind, port: serverPort(conn), began: q.began, at: now, err: data.Err}
		if data.Err != nil {
			s.code = "-"
			var pgErr *pgconn.PgError
			if errors.As(data.Err, &pgErr) {
				s.code = pgErr.Code
			}
		}
		r.statements = append(r.statements, s)
	}
}

// enqueuesAcked returns a copy of the acknowledged enqueues.
func (r *recorder) enqueuesAcked() map[history.ID]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[history.ID]time.Time, len(r.enqAcked))
	for id, at := range r.enqAcked {
		out[id] = at
	}
	return out
}

// completionsAcked returns a copy of the acknowledged completions.
func (r *recorder) completionsAcked() map[history.ID]completionAck {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[history.ID]completionAck, len(r.compAcked))
	for id, a := range r.compAcked {
		out[id] = a
	}
	return out
}

func (r *recorder) allStarts() []start {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]start(nil), r.starts...)
}

// statementsOn is how many statements of any kind ended on the server at port.
func (r *recorder) statementsOn(port int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ports[port]
}

func (r *recorder) allStatements() []statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]statement(nil), r.statements...)
}

// isEnqueue reports whether sql is an enqueue statement: one event's append, which writes its
// key row itself, or a statement that calls a function named ordered_enqueue… (a batch, an
// event that is no append, the COPY path's preparation).
func isEnqueue(sql string) bool {
	return strings.Contains(sql, "INSERT INTO ordered_keys") || strings.Contains(sql, "ordered_enqueue")
}

// firstOn is the first statement of kind that succeeded on the server at port, and whether
// there is one.
func (r *recorder) firstOn(kind string, port int) (statement, bool) {
	for _, s := range r.allStatements() {
		if s.kind == kind && s.err == nil && s.port == port {
			return s, true
		}
	}
	return statement{}, false
}

// tracer hands every statement's end to the recorder, with its SQL.
type tracer struct{ rec *recorder }

type sqlKey struct{}

// traced is what TraceQueryStart passes on to TraceQueryEnd.
type traced struct {
	sql   string
	began time.Time
}

func (tr *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlKey{}, traced{sql: data.SQL, began: time.Now()})
}

func (tr *tracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	q, _ := ctx.Value(sqlKey{}).(traced)
	tr.rec.statement(conn, q, data)
}

// serverPort is the port of the server conn is connected to (0 if unknown).
func serverPort(conn *pgx.Conn) int {
	if nc := conn.PgConn().Conn(); nc != nil {
		if a, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
			return a.Port
		}
	}
	return 0
}

// syncBuffer is a log sink for several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count is how many log lines contain s.
func (b *syncBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Count(b.buf.String(), s)
}

// tail is the last n lines.
func (b *syncBuffer) tail(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(b.buf.String()), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// keyNames are n keys for producer p.
func keyNames(p, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("p%d-k%d", p, i)
	}
	return keys
}
