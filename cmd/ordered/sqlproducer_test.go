package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// sqlScripts holds the psql producers that docs/sql.md shows.
const sqlScripts = "../../testdata/sql"

// runPsql runs a script with the real psql, stopping at the first error it does not expect,
// and returns its stderr.
func runPsql(t *testing.T, url, script string) string {
	t.Helper()
	psql, err := exec.LookPath("psql")
	require.NoError(t, err, "the psql producer test needs psql on PATH")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", filepath.Join(sqlScripts, script), url)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "psql -f %s: %s", script, stderr.String())
	return stderr.String()
}

// A producer in psql enqueues in its own transactions: the business rows and the events
// commit together, a rollback leaves neither, and a savepoint keeps the transaction through a
// refused (late) event. A Go worker then runs each key's events in seq order.
func TestPsqlProducerEnqueuesWithItsBusinessRows(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := q.Client(t, nil)
	drain := func(t *testing.T) {
		t.Helper()
		w, err := c.NewWorker(ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, job *ordered.Job) error {
			_, err := tx.Exec(ctx, `INSERT INTO processed (key, seq) VALUES ($1, $2)`, job.Key, job.Seq)
			return err
		}), &ordered.WorkerConfig{Workers: 4})
		require.NoError(t, err)
		require.NoError(t, w.Start(ctx))
		d, err := q.WaitDrained(ctx)
		require.NoError(t, w.Stop(ctx))
		require.NoError(t, err)
		require.Empty(t, d.Failed)
	}
	strs := func(t *testing.T, sql string) []string {
		t.Helper()
		rows, err := q.Pool.Query(ctx, sql)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	// Every invoice has its job and every job its invoice; processed lists what ran, by key in
	// the order it ran.
	invoices := `SELECT i.customer || '/' || i.seq || ' ' || coalesce(j.payload->>'invoice', 'no job')
		FROM invoices AS i FULL JOIN ordered_jobs_now AS j ON j.key = i.customer AND j.seq = i.seq
		ORDER BY 1`
	processed := `SELECT key || ' ' || string_agg(seq::text, ',' ORDER BY n) FROM processed GROUP BY key ORDER BY key`

	require.Empty(t, runPsql(t, q.URL, "producer.sql"))
	require.Equal(t, []string{"cust-1/1 in_1", "cust-1/2 in_2", "cust-1/3 in_4", "cust-2/1 in_3", "cust-2/2 in_5"},
		strs(t, invoices), "the committed invoices and their events, and nothing of the rolled-back one")
	require.Equal(t, []string{"5"}, strs(t, `SELECT max_attempts::text FROM ordered_jobs_now WHERE key = 'cust-2' AND seq = 2`))
	drain(t)
	require.Equal(t, []string{"cust-1 1,2,3", "cust-2 1,2"}, strs(t, processed))

	stderr := runPsql(t, q.URL, "producer_late.sql")
	require.Contains(t, stderr, "ordered: late event: key cust-1 seq 0", "psql showed the refusal")
	require.Equal(t, []string{"cust-1 0 ORD01"}, strs(t, `SELECT key || ' ' || seq || ' ' || sqlstate FROM refused_events`))
	require.Equal(t, []string{"cust-1/1 in_1", "cust-1/2 in_2", "cust-1/3 in_4", "cust-1/4 in_7", "cust-2/1 in_3", "cust-2/2 in_5"},
		strs(t, invoices), "the transaction went on past the refused event and committed")
	drain(t)
	require.Equal(t, []string{"cust-1 1,2,3,4", "cust-2 1,2"}, strs(t, processed))
}
