package ordered

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// Client is the handle on a queue: it enqueues events, claims jobs and settles them, and runs
// the admin operations. It is safe for concurrent use.
//
// Failover: give the pool a URL that lists every server, for the one that takes writes
// (postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write), and new sessions follow
// a promotion. A session opened before stays on its server; when a statement of the client's,
// of its workers' or of a TxHandlerFunc meets one whose server takes no writes (SQLSTATE 25006:
// a standby, or a primary demoted in place), the pool is reset (every session closes, busy
// ones when released) so the next statement connects anew. The statement is tried again
// where that is safe: a claim at the worker's next fetch, a completion batch at once, an
// Enqueue once; an EnqueueTx returns the error (try its transaction again).
type Client struct {
	pool *pgxpool.Pool
	// db is pool with every statement in mode: what the client's statements run on.
	db   store.DBTX
	mode pgx.QueryExecMode
	cfg  *Config
	// copyMinEvents: a batch part of this many events or more in the default mode is written
	// with COPY when its events are appends (enqueue_copy.go)
	copyMinEvents int
	copied        atomic.Int64 // batch parts written with COPY, for tests

	backlogMu      sync.Mutex
	backlog        int64
	backlogChecked time.Time
}

// NewClient returns a Client on pool, whose database must be migrated (schema.Migrate).
// cfg may be nil for the defaults.
//
// pool may be nil for a producer that enqueues only in transactions of its own (EnqueueTx,
// EnqueueManyTx, EnqueueSQLTx, EnqueueManySQLTx, package orderedbun) and Validate, such as
// one on database/sql alone; every method that would use the pool then returns ErrNoPool, and
// Config.MaxBacklog, which counts the queue on the pool, must be 0.
func NewClient(pool *pgxpool.Pool, cfg *Config) (*Client, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if pool == nil {
		if c.MaxBacklog > 0 {
			return nil, errors.New("ordered: Config.MaxBacklog needs a pool to count the queue on, and NewClient was given none")
		}
		// The callers' transactions may come from any pool: behind a transaction pooler their
		// statements take the mode that is safe whatever that pool's own.
		mode := execMode(c.Pooler, pgx.QueryExecModeCacheStatement, false)
		return &Client{db: noPool{}, mode: mode, cfg: c, copyMinEvents: copyMinEvents}, nil
	}
	var mode pgx.QueryExecMode
	if c.Pooler == PoolerTransaction {
		cc := pool.Config().ConnConfig
		mode = execMode(c.Pooler, cc.DefaultQueryExecMode, cc.DescriptionCacheCapacity > 0)
	}
	return &Client{pool: pool, db: store.WithExecMode(pool, mode), mode: mode, cfg: c, copyMinEvents: copyMinEvents}, nil
}

// noPool is the db of a Client given no pool: each of its statements fails with ErrNoPool.
type noPool struct{}

func (noPool) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, ErrNoPool
}

func (noPool) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, ErrNoPool }

func (noPool) QueryRow(context.Context, string, ...any) pgx.Row { return noPoolRow{} }

type noPoolRow struct{}

func (noPoolRow) Scan(...any) error { return ErrNoPool }

// in returns db (a caller's transaction) with the client's exec mode.
func (c *Client) in(db store.DBTX) store.DBTX { return store.WithExecMode(db, c.mode) }

// Config returns the client's configuration, with defaults filled in.
func (c *Client) Config() Config { return *c.cfg }

// admit enforces Config.MaxBacklog for batch b. A batch whose every event the queue holds
// already (re-sent duplicates) adds no job, and is admitted however full the backlog.
func (c *Client) admit(ctx context.Context, b *encodedBatch) error {
	if c.cfg.MaxBacklog == 0 {
		return nil
	}
	err := c.admitCount(ctx, len(b.unique))
	if !errors.Is(err, ErrBacklogFull) {
		return err
	}
	var keys []string
	var seqs []int64
	for _, p := range b.parts {
		keys, seqs = append(keys, p.columns.Keys...), append(seqs, p.columns.Seqs...)
	}
	switch held, herr := store.QueueHoldsAll(ctx, c.db, keys, seqs); {
	case herr != nil:
		return fmt.Errorf("ordered: check backlog: %w", herr)
	case held:
		return nil
	}
	return err
}

// admitCount admits n more queued jobs if the backlog, counted at most every
// BacklogCheckInterval, has room for them, and counts them in.
func (c *Client) admitCount(ctx context.Context, n int) error {
	c.backlogMu.Lock()
	defer c.backlogMu.Unlock()
	if time.Since(c.backlogChecked) >= BacklogCheckInterval ||
		c.backlog+int64(n) > c.cfg.MaxBacklog {
		count, err := store.QueueBacklog(ctx, c.db)
		if err != nil {
			return fmt.Errorf("ordered: count backlog: %w", err)
		}
		c.backlog, c.backlogChecked = count, time.Now()
	}
	if c.backlog+int64(n) > c.cfg.MaxBacklog {
		return fmt.Errorf("%w: %d jobs queued, %d more would pass the limit of %d",
			ErrBacklogFull, c.backlog, n, c.cfg.MaxBacklog)
	}
	c.backlog += int64(n)
	return nil
}
