package ordered_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
)

// settleTx is one of the fenced settles that run in a caller's transaction.
type settleTx struct {
	name string
	call func(b *testBundle, tx pgx.Tx, j *ordered.Job) (ordered.Outcome, error)
	// want is the outcome of a current claim (default policy: block); status the job's after
	// the commit.
	want   ordered.Outcome
	status string
}

var errSettleTx = errors.New("boom")

var settleTxForms = []settleTx{
	{"RetryTx", func(b *testBundle, tx pgx.Tx, j *ordered.Job) (ordered.Outcome, error) {
		return b.client.RetryTx(b.ctx, tx, j, errSettleTx)
	}, ordered.OutcomeRetried, "queued"},
	{"RetryAfterTx", func(b *testBundle, tx pgx.Tx, j *ordered.Job) (ordered.Outcome, error) {
		return b.client.RetryAfterTx(b.ctx, tx, j, time.Hour, errSettleTx)
	}, ordered.OutcomeRetried, "queued"},
	{"FailTx", func(b *testBundle, tx pgx.Tx, j *ordered.Job) (ordered.Outcome, error) {
		return b.client.FailTx(b.ctx, tx, j, errSettleTx)
	}, ordered.OutcomeBlocked, "blocked"},
}

// RetryTx, RetryAfterTx and FailTx settle the job with the caller's transaction: rolled back,
// the job is as it was, still running under its claim; committed, it is settled together with
// the caller's effect.
func TestSettleTxFollowsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	for _, form := range settleTxForms {
		t.Run(form.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			effects := b.effectsTable(t)
			id := b.enqueue(t, "acct", 1)[0]
			j := b.claimOne(t, b.client)
			before := b.jobSnapshot(t, id)

			tx, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			_, err = tx.Exec(b.ctx, `INSERT INTO effects VALUES ($1)`, j.IdempotencyKey())
			require.NoError(t, err)
			out, err := form.call(b, tx, j)
			require.NoError(t, err)
			require.Equal(t, form.want, out)
			require.NoError(t, tx.Rollback(b.ctx))
			require.Zero(t, effects())
			require.Equal(t, before, b.jobSnapshot(t, id), "a rolled-back %s changed the job", form.name)

			tx, err = b.pool.Begin(b.ctx)
			require.NoError(t, err)
			_, err = tx.Exec(b.ctx, `INSERT INTO effects VALUES ($1)`, j.IdempotencyKey())
			require.NoError(t, err)
			out, err = form.call(b, tx, j)
			require.NoError(t, err)
			require.Equal(t, form.want, out)
			require.Equal(t, "running", b.jobStatus(t, id), "settled before the caller's commit")
			require.NoError(t, tx.Commit(b.ctx))
			require.Equal(t, 1, effects())
			require.Equal(t, form.status, b.jobStatus(t, id))
		})
	}
}

// Guarantee 4 in a caller's transaction: a stale RetryTx, RetryAfterTx or FailTx reports the
// lost claim with no outcome and aborts the transaction, so the caller's effect cannot commit
// even when the caller ignores the error and commits; the job is untouched. Both ways a claim
// is lost: claimed again, and expired on its last attempt (where a retry takes the path of a
// failure).
func TestStaleSettleTxAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	for _, form := range settleTxForms {
		t.Run(form.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			effects := b.effectsTable(t)
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
			again, err := b.client.Claim(b.ctx, 2)
			require.NoError(t, err)
			require.Len(t, again, 1) // a/1; b/1 has no attempts left
			require.Equal(t, res[0].ID, again[0].ID)

			for _, j := range []*ordered.Job{stale[res[0].ID], stale[res[1].ID]} {
				before := b.jobSnapshot(t, j.ID)
				tx, err := b.pool.Begin(b.ctx)
				require.NoError(t, err)
				_, err = tx.Exec(b.ctx, `INSERT INTO effects VALUES ($1)`, j.IdempotencyKey())
				require.NoError(t, err)
				out, err := form.call(b, tx, j)
				require.ErrorIs(t, err, ordered.ErrLeaseLost, "%s of %s", form.name, j.IdempotencyKey())
				require.Equal(t, ordered.OutcomeNone, out)
				// The caller ignores the error and commits: the database rolls back instead.
				require.ErrorIs(t, tx.Commit(b.ctx), pgx.ErrTxCommitRollback)
				require.Zero(t, effects(), "the stale %s's effect committed", form.name)
				require.Equal(t, before, b.jobSnapshot(t, j.ID), "a stale %s changed the job", form.name)
			}
		})
	}
}

// ReplayTx and SkipTx act with the caller's transaction: rolled back, the blocked job still
// holds its key; committed, the replay queues it again and the skip releases its key. An error
// (no such failed job) aborts the transaction.
func TestReplayTxAndSkipTxFollowTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	effects := b.effectsTable(t)
	ids := b.enqueue(t, "r", 1, 2)
	skipIDs := b.enqueue(t, "s", 1, 2)
	for range 2 {
		j := b.claimOne(t, b.client)
		out, err := b.client.Fail(b.ctx, j, errSettleTx)
		require.NoError(t, err)
		require.Equal(t, ordered.OutcomeBlocked, out)
	}
	inTx := func(commit bool, act func(tx pgx.Tx) error) error {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.WithoutCancel(b.ctx)) }()
		_, err = tx.Exec(b.ctx, `INSERT INTO effects VALUES (gen_random_uuid()::text)`)
		require.NoError(t, err)
		if err := act(tx); err != nil {
			return err
		}
		if commit {
			return tx.Commit(b.ctx)
		}
		return tx.Rollback(b.ctx)
	}
	replay := func(tx pgx.Tx) error { return b.client.ReplayTx(b.ctx, tx, ids[0], ordered.ReplayParams{}) }
	skip := func(tx pgx.Tx) error {
		released, err := b.client.SkipTx(b.ctx, tx, skipIDs[0])
		require.True(t, released || err != nil)
		return err
	}

	require.NoError(t, inTx(false, replay))
	require.NoError(t, inTx(false, skip))
	require.Zero(t, effects())
	require.Equal(t, "blocked", b.jobStatus(t, ids[0]))
	require.Equal(t, "blocked", b.jobStatus(t, skipIDs[0]))
	b.claimNone(t, b.client)

	require.NoError(t, inTx(true, replay))
	require.NoError(t, inTx(true, skip))
	require.Equal(t, 2, effects())
	require.Equal(t, "queued", b.jobStatus(t, ids[0]))
	require.Equal(t, "failed", b.jobStatus(t, skipIDs[0]))
	claimed := map[int64]bool{}
	for range 2 {
		claimed[b.claimOne(t, b.client).ID] = true
	}
	require.Equal(t, map[int64]bool{ids[0]: true, skipIDs[1]: true}, claimed, "the replayed job and the skipped key's next")

	// No such failed job: the error aborts the caller's transaction.
	for name, act := range map[string]func(tx pgx.Tx) error{
		"ReplayTx": func(tx pgx.Tx) error { return b.client.ReplayTx(b.ctx, tx, ids[1], ordered.ReplayParams{}) },
		"SkipTx": func(tx pgx.Tx) error {
			_, err := b.client.SkipTx(b.ctx, tx, ids[1])
			return err
		},
	} {
		tx, err := b.pool.Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, `INSERT INTO effects VALUES ($1)`, name)
		require.NoError(t, err)
		require.ErrorIs(t, act(tx), ordered.ErrNotFailed, name)
		require.ErrorIs(t, tx.Commit(b.ctx), pgx.ErrTxCommitRollback, name)
	}
	require.Equal(t, 2, effects())
}
