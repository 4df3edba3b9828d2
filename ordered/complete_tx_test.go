package ordered_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
)

// jobSnapshot is the whole state of a job, to show that a call changed nothing: its row and
// its key's head row (ordered_heads), which holds the claim while the job is the running head.
func (b *testBundle) jobSnapshot(t *testing.T, id int64) string {
	t.Helper()
	var row string
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT jsonb_build_object('job', to_jsonb(j), 'head', to_jsonb(h))::text
		FROM ordered_jobs AS j LEFT JOIN ordered_heads AS h ON h.key = j.key
		WHERE j.id = $1`, id).Scan(&row))
	return row
}

func (b *testBundle) effectsTable(t *testing.T) (count func() int) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `CREATE TABLE effects (idempotency_key text PRIMARY KEY)`)
	require.NoError(t, err)
	return func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM effects`).Scan(&n))
		return n
	}
}

// Guarantees 4 and 5: a stale CompleteTx aborts the caller's transaction, so its effect cannot
// commit without the completion even when the caller ignores the error and commits.
func TestStaleCompleteTxAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// staleClaim returns a claim of the job that is no longer current.
		staleClaim func(t *testing.T, b *testBundle, id int64) *ordered.Job
	}{{
		name: "lease expired",
		staleClaim: func(t *testing.T, b *testBundle, id int64) *ordered.Job {
			j := b.claimOne(t, b.client)
			b.expireLease(t, id)
			return j
		},
	}, {
		name: "claimed again",
		staleClaim: func(t *testing.T, b *testBundle, id int64) *ordered.Job {
			j := b.claimOne(t, b.client)
			b.expireLease(t, id)
			require.Greater(t, b.claimOne(t, b.client).ClaimVersion, j.ClaimVersion)
			return j
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			effects := b.effectsTable(t)
			id := b.enqueue(t, "acct", 1)[0]
			stale := tc.staleClaim(t, b, id)
			before := b.jobSnapshot(t, id)

			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			_, err = tx.Exec(b.ctx, `INSERT INTO effects VALUES ($1)`, stale.IdempotencyKey())
			require.NoError(t, err)
			err = b.client.CompleteTx(b.ctx, tx, stale)
			require.ErrorIs(t, err, ordered.ErrLeaseLost)
			// The caller ignores the error and commits: the database rolls back instead.
			require.ErrorIs(t, tx.Commit(b.ctx), pgx.ErrTxCommitRollback)

			require.Zero(t, effects(), "the stale attempt's effect committed without its completion")
			require.Equal(t, before, b.jobSnapshot(t, id))
		})
	}
}

// Guarantee 4: a stale Fail, Retry or RetryAfter reports the lost claim and no outcome (the
// zero Outcome is not OutcomeRetried), and changes nothing.
func TestStaleSettleReportsNoOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.client.EnqueueMany(b.ctx, []ordered.Event{{Key: "a", Seq: 1}, {Key: "b", Seq: 1, MaxAttempts: 1}})
	require.NoError(t, err)
	jobs, err := b.client.Claim(b.ctx, 2)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	stale := map[int64]*ordered.Job{}
	for _, j := range jobs {
		stale[j.ID] = j
		b.expireLease(t, j.ID)
	}
	// a/1 is claimed again: its claim moved on. b/1, on its last attempt, is not (its
	// attempts are used up): its lease expired. A Retry of it takes the path of a failure.
	again, err := b.client.Claim(b.ctx, 2)
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, res[0].ID, again[0].ID)
	a, last := stale[res[0].ID], stale[res[1].ID]
	before := map[int64]string{a.ID: b.jobSnapshot(t, a.ID), last.ID: b.jobSnapshot(t, last.ID)}

	boom := errors.New("boom")
	for name, settle := range map[string]func(*ordered.Job) (ordered.Outcome, error){
		"Fail":       func(j *ordered.Job) (ordered.Outcome, error) { return b.client.Fail(b.ctx, j, boom) },
		"Retry":      func(j *ordered.Job) (ordered.Outcome, error) { return b.client.Retry(b.ctx, j, boom) },
		"RetryAfter": func(j *ordered.Job) (ordered.Outcome, error) { return b.client.RetryAfter(b.ctx, j, time.Second, boom) },
	} {
		for _, j := range []*ordered.Job{a, last} {
			out, err := settle(j)
			require.ErrorIs(t, err, ordered.ErrLeaseLost, "%s of %s", name, j.IdempotencyKey())
			require.Equal(t, ordered.OutcomeNone, out, "%s of %s", name, j.IdempotencyKey())
			require.NotEqual(t, ordered.OutcomeRetried, out)
			require.Equal(t, before[j.ID], b.jobSnapshot(t, j.ID), "%s of %s changed the job", name, j.IdempotencyKey())
		}
	}
	require.Equal(t, "none", ordered.OutcomeNone.String())
}

// TxHandlerFunc begins its transaction at READ COMMITTED, whatever the server's default.
func TestTxHandlerRunsAtReadCommitted(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cfg, err := pgxpool.ParseConfig(b.queue.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "serializable"
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var dflt string
	require.NoError(t, pool.QueryRow(b.ctx, `SELECT current_setting('transaction_isolation')`).Scan(&dflt))
	require.Equal(t, "serializable", dflt, "the pool's default")

	c, err := ordered.NewClient(pool, nil)
	require.NoError(t, err)
	b.enqueue(t, "k", 1)
	levels := make(chan string, 1)
	startWorker(t, b, c, ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
		var level string
		if err := tx.QueryRow(ctx, `SELECT current_setting('transaction_isolation')`).Scan(&level); err != nil {
			return err
		}
		levels <- level
		return nil
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond})
	select {
	case level := <-levels:
		require.Equal(t, "read committed", level)
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not run")
	}
}

// A TxHandlerFunc attempt whose claim is lost before it completes rolls back its effect, and
// the worker counts lost ownership, not a failure or a retry.
func TestTxHandlerStaleAttemptRollsBackAsLostOwnership(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	effects := b.effectsTable(t)
	id := b.enqueue(t, "acct", 1)[0]
	reg := prometheus.NewRegistry()
	inHandler, reclaimed := make(chan struct{}), make(chan struct{})
	// A long lease: no heartbeat finds the claim lost first; the completion does.
	c := b.newClient(t, &ordered.Config{Lease: time.Minute})
	startWorker(t, b, c, ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, j.IdempotencyKey()); err != nil {
			return err
		}
		close(inHandler)
		<-reclaimed
		return nil
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, Registerer: reg})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(reclaimed) }) }) // before the worker stops

	select {
	case <-inHandler:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler did not run")
	}
	// Another claim of the job, as a claim after the lease expired makes it, but with a live
	// lease: the worker cannot take the job back itself.
	var current int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `UPDATE ordered_heads SET claim_version = claim_version + 1
		WHERE job_id = $1 AND state = 'running' RETURNING claim_version`, id).Scan(&current))
	release.Do(func() { close(reclaimed) })

	waitFor(t, 30*time.Second, "the lost claim counted", func() bool {
		return metricValue(t, reg, "ordered_lost_ownership_total") == 1
	})
	require.Zero(t, effects())
	require.Zero(t, metricValue(t, reg, "ordered_retries_total"))
	require.Zero(t, metricValue(t, reg, "ordered_failures_total"))
	require.Zero(t, metricValue(t, reg, "ordered_completions_total"))
	j := b.job(t, id)
	require.Equal(t, "running", j.Status)
	require.Equal(t, current, j.ClaimVersion)
	require.Equal(t, 1, j.Attempts)
}
