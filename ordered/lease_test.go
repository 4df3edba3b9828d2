package ordered_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// Guarantee 3: a crashed worker's job is recovered after its lease expires, before the key's
// later jobs.
func TestLeaseExpiryRecoversJobInKeyOrder(t *testing.T) {
	t.Parallel()
	// Short, to expire for real; long enough that the claim just after the crash comes
	// within it on a busy machine.
	b := setup(t, &ordered.Config{Lease: 2 * time.Second})
	ids := b.enqueue(t, "k", 1, 2)
	crashed := b.claimOne(t, b.client) // this worker "crashes": it never settles the job
	require.Equal(t, ids[0], crashed.ID)
	b.claimNone(t, b.client) // lease live: nothing, and never seq 2

	var recovered *ordered.Job
	deadline := time.Now().Add(30 * time.Second)
	for recovered == nil && time.Now().Before(deadline) {
		jobs, err := b.client.Claim(b.ctx, 10)
		require.NoError(t, err)
		for _, j := range jobs {
			require.Equal(t, ids[0], j.ID, "a later job ran before the crashed one was recovered")
			recovered = j
		}
	}
	require.NotNil(t, recovered, "the expired job was not recovered")
	require.Equal(t, 2, recovered.Attempt)
	require.Greater(t, recovered.ClaimVersion, crashed.ClaimVersion)
	require.False(t, recovered.LeaseUntil.Before(crashed.LeaseUntil))

	require.NoError(t, b.client.Complete(b.ctx, recovered))
	require.Equal(t, ids[1], b.claimOne(t, b.client).ID)
}

// Guarantee 4: a stale worker cannot complete, renew, release or fail a newer claim.
func TestStaleWorkerIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.enqueue(t, "k", 1)[0]
	stale := b.claimOne(t, b.client)
	b.expireLease(t, id)
	current := b.claimOne(t, b.client)
	require.Equal(t, id, current.ID)

	require.ErrorIs(t, b.client.Complete(b.ctx, stale), ordered.ErrLeaseLost)
	_, err := b.client.Renew(b.ctx, stale)
	require.ErrorIs(t, err, ordered.ErrLeaseLost)
	_, err = b.client.Retry(b.ctx, stale, errors.New("boom"))
	require.ErrorIs(t, err, ordered.ErrLeaseLost)
	_, err = b.client.Fail(b.ctx, stale, errors.New("boom"))
	require.ErrorIs(t, err, ordered.ErrLeaseLost)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	require.ErrorIs(t, b.client.CompleteTx(b.ctx, tx, stale), ordered.ErrLeaseLost)
	require.NoError(t, tx.Rollback(b.ctx))

	require.Equal(t, "running", b.jobStatus(t, id))
	until, err := b.client.Renew(b.ctx, current)
	require.NoError(t, err)
	require.True(t, until.After(current.LeaseUntil) || until.Equal(current.LeaseUntil))
	require.NoError(t, b.client.Complete(b.ctx, current))
	require.Equal(t, "done", b.jobStatus(t, id))
}

// A claim whose lease expired is rejected even before anyone else reclaims the job.
func TestExpiredClaimCannotSettle(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.enqueue(t, "k", 1)[0]
	j := b.claimOne(t, b.client)
	b.expireLease(t, id)
	require.ErrorIs(t, b.client.Complete(b.ctx, j), ordered.ErrLeaseLost)
	_, err := b.client.Renew(b.ctx, j)
	require.ErrorIs(t, err, ordered.ErrLeaseLost)
	require.Equal(t, "running", b.jobStatus(t, id))
}

// Guarantee 5: retrying after a side effect does not repeat the business operation.
func TestRetryDoesNotRepeatBusinessEffect(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.pool.Exec(b.ctx, `CREATE TABLE effects (idempotency_key text PRIMARY KEY, amount int NOT NULL)`)
	require.NoError(t, err)
	effect := func(tx pgx.Tx, j *ordered.Job) {
		_, err := tx.Exec(b.ctx, `INSERT INTO effects VALUES ($1, 10) ON CONFLICT (idempotency_key) DO NOTHING`, j.IdempotencyKey())
		require.NoError(t, err)
	}
	count := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM effects`).Scan(&n))
		return n
	}

	// 1. A stale worker's effect and completion commit together or not at all.
	id := b.enqueue(t, "acct", 1)[0]
	stale := b.claimOne(t, b.client)
	b.expireLease(t, id)
	current := b.claimOne(t, b.client)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	effect(tx, stale)
	require.ErrorIs(t, b.client.CompleteTx(b.ctx, tx, stale), ordered.ErrLeaseLost)
	require.NoError(t, tx.Rollback(b.ctx))
	require.Equal(t, 0, count())

	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	effect(tx, current)
	require.NoError(t, b.client.CompleteTx(b.ctx, tx, current))
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, 1, count())
	require.Equal(t, "done", b.jobStatus(t, id))

	// 2. A worker that commits its effect and crashes before completing: the retry finds the
	// effect under the same idempotency key and does not apply it again.
	id = b.enqueue(t, "acct", 2)[0]
	first := b.claimOne(t, b.client)
	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	effect(tx, first)
	require.NoError(t, tx.Commit(b.ctx)) // ... and the worker dies here
	b.expireLease(t, id)
	retry := b.claimOne(t, b.client)
	require.Equal(t, first.IdempotencyKey(), retry.IdempotencyKey())
	require.NotEqual(t, first.ClaimVersion, retry.ClaimVersion)
	tx, err = b.pool.Begin(b.ctx)
	require.NoError(t, err)
	effect(tx, retry)
	require.NoError(t, b.client.CompleteTx(b.ctx, tx, retry))
	require.NoError(t, tx.Commit(b.ctx))
	require.Equal(t, 2, count())
}

// Guarantee 6: a job whose attempts were all eaten by crashes becomes failed, and never while
// its current lease is valid.
func TestExhaustedByCrashesBecomesFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		decision policy.Decision
		status   string
	}{{policy.Block, "blocked"}, {policy.Skip, "failed"}} {
		t.Run(tc.decision.String(), func(t *testing.T) {
			t.Parallel()
			b := setup(t, &ordered.Config{Policy: policy.Always(tc.decision)})
			res, err := b.client.EnqueueMany(b.ctx, []ordered.Event{
				{Key: "poison", Seq: 1, MaxAttempts: 3}, {Key: "poison", Seq: 2},
			})
			require.NoError(t, err)
			id, next := res[0].ID, res[1].ID

			for attempt := 1; attempt <= 3; attempt++ {
				j := b.claimOne(t, b.client)
				require.Equal(t, id, j.ID)
				require.Equal(t, attempt, j.Attempt)
				if attempt == 3 {
					n, err := b.client.FailExhausted(b.ctx, 10)
					require.NoError(t, err)
					require.Zero(t, n, "failed a job whose lease is still valid")
					require.Equal(t, "running", b.jobStatus(t, id))
				}
				b.expireLease(t, id) // the worker crashed
			}
			b.claimNone(t, b.client) // exhausted: never claimed again

			n, err := b.client.FailExhausted(b.ctx, 10)
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, tc.status, b.jobStatus(t, id))
			n, err = b.client.FailExhausted(b.ctx, 10)
			require.NoError(t, err)
			require.Zero(t, n)

			if tc.decision == policy.Skip {
				require.Equal(t, next, b.claimOne(t, b.client).ID)
			} else {
				b.claimNone(t, b.client)
			}
		})
	}
}

// A handler's job tells its fence: when the worker cancels the handler unless a renewal
// succeeds first, StopGrace and a tenth of the lease before the lease could run out. Each
// renewal moves it on. A job claimed by hand has none.
func TestJobFenceMovesOnWithRenewals(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	b := setup(t, &ordered.Config{Lease: lease})
	b.enqueue(t, "k", 1)
	claimed := b.claimOne(t, b.client)
	require.True(t, claimed.Fence().IsZero())
	require.NoError(t, b.client.Complete(b.ctx, claimed))

	b.enqueue(t, "k", 2)
	type seen struct{ before, first, later time.Time }
	fences := make(chan seen, 1)
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		s := seen{before: time.Now(), first: j.Fence()}
		for s.later = j.Fence(); !s.later.After(s.first) && ctx.Err() == nil; s.later = j.Fence() {
			time.Sleep(10 * time.Millisecond)
		}
		fences <- s
		return nil
	}), &ordered.WorkerConfig{HeartbeatInterval: 200 * time.Millisecond, StopGrace: 500 * time.Millisecond})
	s := <-fences
	require.True(t, s.first.Before(s.before.Add(lease-lease/10-500*time.Millisecond)),
		"the fence is counted from the claim, sent before the handler started: %v, %v", s.first, s.before)
	require.True(t, s.later.After(s.first), "a renewal moved the fence on")
}

// A handler that its worker cancels at the fence (its renewals kept failing: here they wait on
// a lock of the head row) and that returns nil anyway has done its work: the worker still
// completes the job, which succeeds because the database's lease has not run out, so the job
// is not run again for nothing. The completion is fenced by the claim's version and lease, as
// always.
func TestHandlerThatFinishesAfterItsFenceIsCompletedWhileTheClaimHolds(t *testing.T) {
	t.Parallel()
	// Renewals every 2s; the fence 20s - 2s - 9s = 9s after the claim; the lease 11s later.
	b := setup(t, &ordered.Config{Lease: 20 * time.Second})
	id := b.enqueue(t, "k", 1)[0]
	var runs atomic.Int64
	causes := make(chan error, 1)
	w := startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		runs.Add(1)
		lock, err := b.pool.Begin(b.ctx)
		if err != nil {
			return err
		}
		defer func() { _ = lock.Rollback(b.ctx) }()
		if _, err := lock.Exec(b.ctx, `SELECT FROM ordered_heads WHERE key = 'k' FOR UPDATE`); err != nil {
			return err
		}
		<-ctx.Done() // no renewal gets through the lock
		select {
		case causes <- context.Cause(ctx):
		default: // a run after the first, had the job been taken again
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 1, HeartbeatInterval: 2 * time.Second, StopGrace: 9 * time.Second,
		PollInterval: 100 * time.Millisecond})
	require.ErrorIs(t, <-causes, ordered.ErrLeaseLost)
	waitFor(t, time.Minute, "k/1 completed", func() bool { return b.jobStatus(t, id) == "done" })
	require.NoError(t, w.Stop(b.ctx))
	require.EqualValues(t, 1, runs.Load())
}

// The same for a batch handler that finishes its whole batch after its fence: the batch is
// completed while the claim holds, not run again.
func TestBatchThatFinishesAfterItsFenceIsCompletedWhileTheClaimHolds(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Lease: 20 * time.Second})
	ids := b.enqueue(t, "k", 1, 2)
	var runs atomic.Int64
	causes := make(chan error, 1)
	w, err := b.client.NewBatchWorker(func(ctx context.Context, jobs []*ordered.Job) (int, error) {
		runs.Add(1)
		lock, err := b.pool.Begin(b.ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = lock.Rollback(b.ctx) }()
		if _, err := lock.Exec(b.ctx, `SELECT FROM ordered_heads WHERE key = 'k' FOR UPDATE`); err != nil {
			return 0, err
		}
		<-ctx.Done() // no renewal gets through the lock
		select {
		case causes <- context.Cause(ctx):
		default:
		}
		return len(jobs), nil
	}, &ordered.WorkerConfig{Workers: 1, BatchSize: 2, HeartbeatInterval: 2 * time.Second, StopGrace: 9 * time.Second,
		PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	defer func() { require.NoError(t, w.Stop(b.ctx)) }()
	require.ErrorIs(t, <-causes, ordered.ErrLeaseLost)
	waitFor(t, time.Minute, "the batch completed", func() bool {
		return b.jobStatus(t, ids[0]) == "done" && b.jobStatus(t, ids[1]) == "done"
	})
	require.EqualValues(t, 1, runs.Load())
}
