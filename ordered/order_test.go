package ordered_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// Guarantee 2: a later event never runs while an earlier one of its key is queued, retrying,
// running or blocked; under skip it proceeds after the failure.
func TestLaterEventWaitsForEarlier(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := []struct {
		name string
		// hold leaves seq 1 of key k in the state under test.
		hold func(t *testing.T, b *testBundle)
		// release moves seq 1 out of the way; seq 2 must then run.
		release func(t *testing.T, b *testBundle)
	}{{
		name: "queued",
		hold: func(t *testing.T, b *testBundle) {
			_, err := b.client.EnqueueMany(b.ctx, []ordered.Event{
				{Key: "k", Seq: 1, RunAt: time.Now().Add(time.Hour)}, {Key: "k", Seq: 2},
			})
			require.NoError(t, err)
		},
		release: func(t *testing.T, b *testBundle) {
			// k/1 is its key's head: its head row says when it is due.
			tag, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET available_at = now() WHERE key = 'k' AND seq = 1`)
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected())
			require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
		},
	}, {
		name: "retrying",
		hold: func(t *testing.T, b *testBundle) {
			b.enqueue(t, "k", 1, 2)
			out, err := b.client.RetryAfter(b.ctx, b.claimOne(t, b.client), time.Hour, boom)
			require.NoError(t, err)
			require.Equal(t, ordered.OutcomeRetried, out)
		},
		release: func(t *testing.T, b *testBundle) {
			// The retry's backoff is in k/1's head row.
			tag, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET available_at = now() WHERE key = 'k' AND seq = 1`)
			require.NoError(t, err)
			require.EqualValues(t, 1, tag.RowsAffected())
			j := b.claimOne(t, b.client)
			require.Equal(t, int64(1), j.Seq)
			require.Equal(t, 2, j.Attempt)
			require.Equal(t, "boom", j.LastError)
			require.NoError(t, b.client.Complete(b.ctx, j))
		},
	}, {
		name: "running",
		hold: func(t *testing.T, b *testBundle) {
			b.enqueue(t, "k", 1, 2)
			b.claimOne(t, b.client)
		},
		release: func(t *testing.T, b *testBundle) {
			var j ordered.Job
			require.NoError(t, b.pool.QueryRow(b.ctx,
				`SELECT id, claim_version FROM ordered_jobs_now WHERE seq = 1`).Scan(&j.ID, &j.ClaimVersion))
			require.NoError(t, b.client.Complete(b.ctx, &j))
		},
	}, {
		name: "blocked",
		hold: func(t *testing.T, b *testBundle) {
			b.enqueue(t, "k", 1, 2)
			out, err := b.client.Fail(b.ctx, b.claimOne(t, b.client), boom)
			require.NoError(t, err)
			require.Equal(t, ordered.OutcomeBlocked, out)
		},
		release: func(t *testing.T, b *testBundle) {
			var id int64
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id FROM ordered_jobs_now WHERE seq = 1`).Scan(&id))
			released, err := b.client.Skip(b.ctx, id)
			require.NoError(t, err)
			require.True(t, released)
		},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			tc.hold(t, b)
			b.claimNone(t, b.client)
			tc.release(t, b)
			require.Equal(t, int64(2), b.claimOne(t, b.client).Seq)
		})
	}

	t.Run("skip policy proceeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, &ordered.Config{Policy: policy.Always(policy.Skip)})
		b.enqueue(t, "k", 1, 2)
		out, err := b.client.Fail(b.ctx, b.claimOne(t, b.client), boom)
		require.NoError(t, err)
		require.Equal(t, ordered.OutcomeSkipped, out)
		require.Equal(t, int64(2), b.claimOne(t, b.client).Seq)
	})
}

// Commit-order safety: T1 enqueues (K,1) and stays open while T2 enqueues (K,2). T2 cannot
// commit ahead of T1, and once both commit (K,1) runs first, whatever the commit order.
func TestEnqueueCommitOrderInterleaving(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		firstSeq       int64 // enqueued by T1, which stays open
		secondSeq      int64 // enqueued by T2 meanwhile
		rollbackFirst  bool
		wantFirstClaim int64
	}{
		{name: "lower seq in the open transaction", firstSeq: 1, secondSeq: 2, wantFirstClaim: 1},
		{name: "higher seq in the open transaction", firstSeq: 2, secondSeq: 1, wantFirstClaim: 1},
		{name: "open transaction rolls back", firstSeq: 1, secondSeq: 2, rollbackFirst: true, wantFirstClaim: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			t1, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer t1.Rollback(b.ctx) //nolint:errcheck
			_, err = b.client.EnqueueTx(b.ctx, t1, ordered.Event{Key: "K", Seq: tc.firstSeq})
			require.NoError(t, err)

			t2, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			defer t2.Rollback(b.ctx) //nolint:errcheck
			var t2pid int
			require.NoError(t, t2.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&t2pid))
			t2done := make(chan error, 1)
			go func() {
				_, err := b.client.EnqueueTx(b.ctx, t2, ordered.Event{Key: "K", Seq: tc.secondSeq})
				if err == nil {
					err = t2.Commit(b.ctx)
				}
				t2done <- err
			}()

			waitForLockWait(t, b, t2pid)
			b.claimNone(t, b.client)
			if tc.rollbackFirst {
				require.NoError(t, t1.Rollback(b.ctx))
			} else {
				require.NoError(t, t1.Commit(b.ctx))
			}
			require.NoError(t, <-t2done)

			j := b.claimOne(t, b.client)
			require.Equal(t, tc.wantFirstClaim, j.Seq)
			b.claimNone(t, b.client)
			require.NoError(t, b.client.Complete(b.ctx, j))
			if !tc.rollbackFirst {
				require.Equal(t, int64(2), b.claimOne(t, b.client).Seq)
			}
		})
	}
}

// waitForLockWait waits until backend pid is blocked on a lock.
func waitForLockWait(t *testing.T, b *testBundle, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting bool
		err := b.pool.QueryRow(b.ctx, `SELECT coalesce(wait_event_type = 'Lock', false)
			FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			require.NoError(t, err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("backend %d never waited for the key lock", pid)
}

// An enqueue that would demote a head which a concurrent claim has just taken is refused as
// late rather than running two jobs of the key out of order.
func TestEnqueueBelowHeadRacingClaimIsLate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 5)

	// Hold the key's head row locked, claimed as an in-flight claim would write it, while an
	// enqueue of seq 3 runs.
	claimTx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer claimTx.Rollback(b.ctx) //nolint:errcheck
	var headID int64
	require.NoError(t, claimTx.QueryRow(b.ctx,
		`UPDATE ordered_heads SET state = 'running', attempts = attempts + 1,
		   claim_version = claim_version + 1, lease_until = now() + interval '1 minute', attempted_at = now()
		 WHERE key = 'k' AND seq = 5 AND state = 'queued' RETURNING job_id`).Scan(&headID))

	enqTx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer enqTx.Rollback(b.ctx) //nolint:errcheck
	var pid int
	require.NoError(t, enqTx.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan error, 1)
	go func() {
		_, err := b.client.EnqueueTx(b.ctx, enqTx, ordered.Event{Key: "k", Seq: 3})
		done <- err
	}()
	waitForLockWait(t, b, pid)
	require.NoError(t, claimTx.Commit(b.ctx)) // the claim wins
	err = <-done
	require.ErrorIs(t, err, ordered.ErrLateEvent)
	var late *ordered.LateEventError
	require.ErrorAs(t, err, &late)
	require.Equal(t, ordered.LateEventError{Key: "k", Seq: 3, LaterSeq: 5}, *late)
	require.NoError(t, enqTx.Rollback(b.ctx))

	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now WHERE key = 'k'`).Scan(&n))
	require.Equal(t, 1, n)
}
