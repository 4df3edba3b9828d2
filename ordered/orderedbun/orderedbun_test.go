package orderedbun_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"
	"go.uber.org/goleak"

	"github.com/orderedq/ordered/internal/testdb"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedbun"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func event(key string, seq int64) ordered.Event {
	return ordered.Event{Key: key, Seq: seq, Kind: "test", Payload: json.RawMessage(`{}`)}
}

// drivers are the database/sql drivers bun runs on: pgx's, and bun's own (which puts the
// arguments into the statement's text itself).
var drivers = map[string]func(t *testing.T, q *testdb.Queue) driver.Connector{
	"pgx stdlib": func(t *testing.T, q *testdb.Queue) driver.Connector {
		cfg, err := pgx.ParseConfig(q.URL)
		require.NoError(t, err)
		return stdlib.GetConnector(*cfg)
	},
	"bun pgdriver": func(t *testing.T, q *testdb.Queue) driver.Connector {
		// pgdriver takes the schema as a connection parameter, not libpq's options.
		u, err := url.Parse(q.URL)
		require.NoError(t, err)
		params := u.Query()
		params.Del("options")
		u.RawQuery = params.Encode()
		return pgdriver.NewConnector(pgdriver.WithDSN(u.String()),
			pgdriver.WithConnParams(map[string]any{"search_path": q.Schema}))
	},
}

// setup returns a client on a fresh queue and a bun.DB on the same schema, through the
// database/sql driver connector makes.
func setup(t *testing.T, connector func(t *testing.T, q *testdb.Queue) driver.Connector) (*testdb.Queue, *ordered.Client, *bun.DB) {
	t.Helper()
	q := testdb.New(t)
	c, err := ordered.NewClient(q.Pool, nil)
	require.NoError(t, err)
	db := bun.NewDB(sql.OpenDB(connector(t, q)), pgdialect.New())
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, db.PingContext(context.Background()))
	return q, c, db
}

func jobCount(t *testing.T, q *testdb.Queue) int {
	t.Helper()
	var n int
	require.NoError(t, q.Pool.QueryRow(context.Background(), "SELECT count(*) FROM ordered_jobs_now").Scan(&n))
	return n
}

func TestEnqueueBunFollowsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	for name, connector := range drivers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			enqueueFollowsTheCallersTransaction(t, connector)
		})
	}
}

func enqueueFollowsTheCallersTransaction(t *testing.T, connector func(t *testing.T, q *testdb.Queue) driver.Connector) {
	ctx := context.Background()
	q, c, db := setup(t, connector)

	// A transaction that fails: nothing enqueued.
	errAbort := errors.New("abort")
	var rolledBack ordered.EnqueueResult
	err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		rolledBack, err = orderedbun.Enqueue(ctx, c, tx, event("k", 1))
		require.NoError(t, err)
		return errAbort
	})
	require.ErrorIs(t, err, errAbort)
	require.NotZero(t, rolledBack.ID)
	require.Zero(t, jobCount(t, q))

	// Through a *bun.Tx, rolled back by the caller: nothing enqueued either.
	btx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = btx.Rollback() })
	_, err = orderedbun.EnqueueMany(ctx, c, &btx, []ordered.Event{event("k", 1), event("k", 2)})
	require.NoError(t, err)
	require.NoError(t, btx.Rollback())
	require.Zero(t, jobCount(t, q))

	// A transaction that commits: enqueued.
	var committed ordered.EnqueueResult
	err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		var err error
		committed, err = orderedbun.Enqueue(ctx, c, tx, event("k", 1))
		return err
	})
	require.NoError(t, err)
	require.False(t, committed.Duplicate)
	require.Equal(t, 1, jobCount(t, q))

	// The *bun.DB itself, not a transaction: enqueued in a transaction of its own.
	direct, err := orderedbun.Enqueue(ctx, c, db, event("k", 2))
	require.NoError(t, err)
	require.False(t, direct.Duplicate)
	dup, err := orderedbun.Enqueue(ctx, c, db, event("k", 1))
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, committed.ID, dup.ID)
	require.Equal(t, 2, jobCount(t, q))

	jobs, err := c.Claim(ctx, 10)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, committed.ID, jobs[0].ID)

	// Errors from the database come back typed through bun too, and a bad batch writes none
	// of itself.
	_, err = orderedbun.Enqueue(ctx, c, db, event("k", 0))
	var late *ordered.LateEventError
	require.ErrorAs(t, err, &late)
	require.Equal(t, "k", late.Key)
	require.EqualValues(t, 1, late.LaterSeq)
	_, err = orderedbun.EnqueueMany(ctx, c, db, []ordered.Event{event("other", 1), {Key: ""}})
	require.ErrorIs(t, err, ordered.ErrInvalidEvent)
	require.Equal(t, 2, jobCount(t, q))
}
