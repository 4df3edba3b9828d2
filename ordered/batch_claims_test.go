package ordered_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// The later jobs of a batch are claimed through its first job and not written. These tests
// check that every way a batch ends other than by completing fences the claims of its later
// jobs, so that no later claim hands the same claim version out again.

// A batch given back whole: another worker claims its jobs afresh, and the first worker's
// claims of them are lost.
func TestBatchGivenBackIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2, 3)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 3)
	require.NoError(t, err)
	stale := batches[0]
	require.NoError(t, b.client.ReleaseBatch(b.ctx, stale))

	other := b.newClient(t, nil)
	require.NoError(t, other.Complete(b.ctx, b.claimOne(t, other)))
	two := b.claimOne(t, other)
	require.Equal(t, int64(2), two.Seq)
	require.NotEqual(t, stale[1].ClaimVersion, two.ClaimVersion, "a claim version handed out twice")
	lost, err := b.client.CompleteMany(b.ctx, stale[1:2])
	require.NoError(t, err)
	require.Len(t, lost, 1, "a given-back claim was accepted")
	require.NoError(t, other.Complete(b.ctx, two))
	require.Equal(t, []string{"1:done:1", "2:done:1", "3:queued:0"}, b.jobsOf(t, "k"))
}

// A batch's rest given back after a failure ends the batch at the last job it keeps: an event
// that arrives in the hole above it goes behind the batch as any event, to be claimed.
func TestBatchCutBackLeavesNoHoleInside(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 3, 5)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	batch := batches[0]
	require.Equal(t, []int64{1, 3, 5}, seqsOf(batch))
	require.NoError(t, b.client.ReleaseBatch(b.ctx, batch[1:]))
	b.enqueue(t, "k", 2)
	lost, err := b.client.CompleteMany(b.ctx, batch[:1])
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Equal(t, []string{"1:done:1", "2:queued:0", "3:queued:0", "5:queued:0"}, b.jobsOf(t, "k"))
	jobs, err := b.newClient(t, nil).Claim(b.ctx, 5)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, int64(2), jobs[0].Seq)
	lost, err = b.client.CompleteMany(b.ctx, batch[1:])
	require.NoError(t, err)
	require.Len(t, lost, 2, "a given-back claim was accepted")
}

// A failed job cannot be replayed into the middle of a running batch: the batch's later jobs
// would run before it.
func TestReplayRefusedInsideARunningBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Policy: policy.Always(policy.Skip)})
	ids := b.enqueue(t, "k", 1, 2, 3, 4, 5)
	for range 2 {
		_, err := b.client.Fail(b.ctx, b.claimOne(t, b.client), errors.New("boom"))
		require.NoError(t, err)
	}
	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
	batches, err := b.client.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3, 4, 5}, seqsOf(batches[0]))
	require.ErrorIs(t, b.client.Replay(b.ctx, ids[1], ordered.ReplayParams{Force: true}), ordered.ErrLaterJobRunning)
	lost, err := b.client.CompleteMany(b.ctx, batches[0])
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Equal(t, []string{"1:done:1", "2:failed:1", "3:done:1", "4:done:1", "5:done:1"}, b.jobsOf(t, "k"))
}

// A batch's first job failed for good, or retried, before the rest was given back: the batch
// ends with it, so its claims of the rest are lost, and another worker's claims of them are
// new versions.
func TestBatchEndsWithItsFirstJobsFailureOrRetry(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{false, true} {
		b := setup(t, &ordered.Config{Policy: policy.Always(policy.Skip)})
		b.enqueue(t, "k", 1, 2, 3)
		batches, err := b.client.ClaimBatch(b.ctx, 1, 3)
		require.NoError(t, err)
		stale := batches[0]
		if retry {
			outcome, err := b.client.RetryAfter(b.ctx, stale[0], 0, errors.New("boom"))
			require.NoError(t, err)
			require.Equal(t, ordered.OutcomeRetried, outcome)
		} else {
			_, err = b.client.Fail(b.ctx, stale[0], errors.New("boom"))
			require.NoError(t, err)
		}
		require.ErrorIs(t, b.client.RenewBatch(b.ctx, stale[1:2]), ordered.ErrLeaseLost)

		other := b.newClient(t, nil)
		next, err := other.ClaimBatch(b.ctx, 1, 3)
		require.NoError(t, err)
		require.Len(t, next, 1)
		fresh := next[0]
		if retry {
			require.Equal(t, []int64{1, 2, 3}, seqsOf(fresh))
		} else {
			require.Equal(t, []int64{2, 3}, seqsOf(fresh))
		}
		for _, j := range fresh {
			for _, s := range stale {
				if s.ID == j.ID {
					require.NotEqual(t, s.ClaimVersion, j.ClaimVersion, "retry %v: claim of %d handed out twice", retry, j.Seq)
				}
			}
		}
		lost, err := b.client.CompleteMany(b.ctx, stale[1:])
		require.NoError(t, err)
		require.Len(t, lost, 2, "retry %v: the stale batch settled jobs another worker holds", retry)
		lost, err = other.CompleteMany(b.ctx, fresh)
		require.NoError(t, err)
		require.Empty(t, lost)
	}
}

// A completion completes only a prefix of a batch: a later job above one the call leaves out
// stays open, and the batch goes on from the job left out.
func TestBatchCompletesOnlyAPrefix(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2, 3, 4)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 4)
	require.NoError(t, err)
	batch := batches[0]
	lost, err := b.client.CompleteMany(b.ctx, []*ordered.Job{batch[0], batch[2]})
	require.NoError(t, err)
	require.Equal(t, []*ordered.Job{batch[2]}, lost, "a job completed before the one below it")
	require.Equal(t, []string{"1:done:1", "2:running:1", "3:running:1", "4:running:1"}, b.jobsOf(t, "k"),
		"2 is handed the batch's claim, and the batch goes on over 3 and 4")
	lost, err = b.client.CompleteMany(b.ctx, batch[1:])
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Equal(t, []string{"1:done:1", "2:done:1", "3:done:1", "4:done:1"}, b.jobsOf(t, "k"))
}

// A job that once led a batch and is claimed again by a completion's claim of the next job
// leads nothing: the jobs after it stay claimable as soon as it is completed.
func TestReclaimedJobLeadsNoOldBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Policy: policy.Always(policy.Skip)})
	ids := b.enqueue(t, "k", 1, 2, 3)
	_, err := b.client.Fail(b.ctx, b.claimOne(t, b.client), errors.New("boom"))
	require.NoError(t, err)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 3)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3}, seqsOf(batches[0]))
	require.NoError(t, b.client.ReleaseBatch(b.ctx, batches[0]))
	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{}))

	one := b.claimOne(t, b.client)
	require.Equal(t, int64(1), one.Seq)
	// The worker's completion, which claims the key's next job in the same statement.
	two := &ordered.Job{Key: "k"}
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT id, seq, claim_version
		FROM ordered_jobs_complete(ARRAY[$1::bigint], ARRAY[$2::bigint], 1, '1 minute') WHERE NOT completed`,
		one.ID, one.ClaimVersion).Scan(&two.ID, &two.Seq, &two.ClaimVersion))
	require.Equal(t, int64(2), two.Seq)
	require.NoError(t, b.client.Complete(b.ctx, two))
	require.Equal(t, []string{"1:done:1", "2:done:1", "3:queued:0"}, b.jobsOf(t, "k"))
	three := b.claimOne(t, b.client)
	require.Equal(t, int64(3), three.Seq)
}
