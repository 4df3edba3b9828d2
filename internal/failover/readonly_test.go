package failover_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/pgcluster"
	"github.com/orderedq/ordered/ordered"
)

// A worker and producers whose URL lists the standby first, with
// target_session_attrs=read-write, never run a statement on it. Then the primary is demoted
// in place (default_transaction_read_only, as a failover tool fences it) and the standby
// promoted: every pooled session on the old primary now fails its writes with SQLSTATE 25006
// (read_only_sql_transaction). The worker, never restarted, claims on the new primary by
// itself, an Enqueue that meets such a session succeeds on the new primary, and an EnqueueTx
// that meets one fails with 25006 and succeeds when its transaction is tried again.
func TestReadOnlyServerIsNeverUsedToClaim(t *testing.T) {
	t.Parallel()
	r := newRig(t, true)
	ctx := r.ctx
	url := pgcluster.MultiHostURL(r.standby, r.primary)
	enqPool := r.pool(url, "readonly-enqueue", 4)
	txPool := r.pool(url, "readonly-enqueue-tx", 4)
	enq, err := ordered.NewClient(enqPool, r.clientConfig())
	require.NoError(t, err)
	enqTx, err := ordered.NewClient(txPool, r.clientConfig())
	require.NoError(t, err)
	r.startWorker(r.pool(url, "readonly-worker", 8))

	event := func(key string, seq int64) ordered.Event {
		return ordered.Event{Key: key, Seq: seq, Kind: "test", Payload: []byte(`{}`)}
	}
	enqueueTx := func(ev ordered.Event) error {
		return pgx.BeginFunc(ctx, txPool, func(tx pgx.Tx) error {
			_, err := enqTx.EnqueueTx(ctx, tx, ev)
			return err
		})
	}
	allDone := func(url string, want int) func() bool {
		return func() bool {
			jobs := readJobs(ctx, t, url)
			done := 0
			for _, j := range jobs {
				if j.Status == "done" {
					done++
				}
			}
			return done == want
		}
	}

	const keys, perPhase = 8, 10
	for seq := int64(1); seq <= perPhase; seq++ {
		for k := range keys {
			_, err := enq.Enqueue(ctx, event(fmt.Sprintf("k%d", k), seq))
			require.NoError(t, err)
		}
		require.NoError(t, enqueueTx(event("tx", seq)))
	}
	r.waitFor(time.Minute, "the first jobs done on the primary", allDone(r.primary.URL(), perPhase*(keys+1)))
	require.Zero(t, r.rec.statementsOn(r.standby.Port()), "statements ran on the standby listed first")
	require.Positive(t, r.rec.statementsOn(r.primary.Port()))
	for _, s := range r.rec.allStatements() {
		require.NoError(t, s.err, "a %s failed on port %d", s.kind, s.port)
		require.Equal(t, r.primary.Port(), s.port, "a %s ran elsewhere than on the primary", s.kind)
	}
	require.Zero(t, r.logs.count("claim failed"))

	// The demotion: new sessions of the old primary are refused by target_session_attrs, the
	// pooled ones stay and are read-only at their next statement.
	demoting := time.Now()
	demote, err := pgx.Connect(ctx, r.primary.URL())
	require.NoError(t, err)
	defer demote.Close(ctx)
	_, err = demote.Exec(ctx, `ALTER SYSTEM SET default_transaction_read_only = on`)
	require.NoError(t, err)
	_, err = demote.Exec(ctx, `SELECT pg_reload_conf()`)
	require.NoError(t, err)
	r.waitFor(time.Minute, "the primary read-only", func() bool {
		conn, err := pgx.Connect(ctx, r.primary.URL())
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		var ro string
		return conn.QueryRow(ctx, `SHOW default_transaction_read_only`).Scan(&ro) == nil && ro == "on"
	})
	// Every session has been told by now, and reads the setting before its next statement.
	demoted := time.Now()
	require.NoError(t, r.standby.Promote(ctx))

	err = enqueueTx(event("tx", perPhase+1))
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "EnqueueTx on a read-only session: %v", err)
	require.Equal(t, "25006", pgErr.Code)
	require.NoError(t, enqueueTx(event("tx", perPhase+1)), "EnqueueTx tried again")
	for seq := int64(perPhase + 1); seq <= 2*perPhase; seq++ {
		for k := range keys {
			_, err := enq.Enqueue(ctx, event(fmt.Sprintf("k%d", k), seq))
			require.NoError(t, err, "Enqueue after the demotion")
		}
		if seq > perPhase+1 {
			require.NoError(t, enqueueTx(event("tx", seq)))
		}
	}
	r.waitFor(time.Minute, "every job done on the new primary", allDone(r.standby.URL(), 2*perPhase*(keys+1)))

	var readOnly = map[string]int{}
	for _, s := range r.rec.allStatements() {
		if s.at.Before(demoting) {
			continue
		}
		if s.code == "25006" {
			readOnly[s.kind]++
		}
		if s.port == r.primary.Port() && s.began.After(demoted) {
			require.Error(t, s.err, "a %s succeeded on the demoted primary", s.kind)
		}
	}
	t.Logf("after the demotion, statements refused with 25006: %v; claims failed %d", readOnly, r.logs.count("claim failed"))
	require.Positive(t, readOnly["claim"], "no claim met a read-only session: the test did not test it; the clients logged:\n%s", r.logs.tail(20))
	require.Positive(t, readOnly["enqueue"], "no Enqueue met a read-only session: the test did not test it")
	// The first statement to meet a read-only session closes its pool's sessions.
	require.Equal(t, 2, readOnly["enqueue"], "a pool met a read-only session more than once")
}
