package ordered_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

func blockPolicyCfg() *ordered.Config { return &ordered.Config{Policy: policy.Always(policy.Block)} }
func skipPolicyCfg() *ordered.Config  { return &ordered.Config{Policy: policy.Always(policy.Skip)} }

// failNextHead claims the next job, which must be key/seq, and fails it for good with cause.
func (b *testBundle) failNextHead(t *testing.T, key string, seq int64, cause error) (*ordered.Job, ordered.Outcome) {
	t.Helper()
	j := b.claimOne(t, b.client)
	require.Equal(t, key, j.Key)
	require.Equal(t, seq, j.Seq)
	out, err := b.client.Fail(b.ctx, j, cause)
	require.NoError(t, err)
	return j, out
}

// ---------------------------------------------------------------------------------------------
// 8. Block policy.

func TestBlockPolicyHoldsTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t, blockPolicyCfg())
	ids := b.enqueue(t, "k", 1, 2)

	j, out := b.failNextHead(t, "k", 1, errors.New("boom"))
	require.Equal(t, ordered.OutcomeBlocked, out)
	require.Equal(t, "blocked", b.jobStatus(t, ids[0]))

	blocked, err := b.client.BlockedKeys(b.ctx, 0)
	require.NoError(t, err)
	require.Len(t, blocked, 1)
	require.Equal(t, "k", blocked[0].Key)
	require.Equal(t, j.ID, blocked[0].JobID)
	require.EqualValues(t, 1, blocked[0].Seq)
	require.Equal(t, "boom", blocked[0].LastError)
	require.False(t, blocked[0].Since.IsZero())

	failed, err := b.client.FailedJobs(b.ctx, ordered.FailedJobsParams{})
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, j.ID, failed[0].ID)
	require.Equal(t, "k", failed[0].Key)
	require.EqualValues(t, 1, failed[0].Seq)
	require.True(t, failed[0].Blocking)
	require.Equal(t, 1, failed[0].Attempts)
	require.Equal(t, "boom", failed[0].LastError)
	require.False(t, failed[0].FinishedAt.IsZero())

	b.claimNone(t, b.client) // k/2 waits behind the blocked k/1
	require.Equal(t, "queued", b.jobStatus(t, ids[1]))

	st, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, st.Failed)
	require.EqualValues(t, 1, st.Blocked)
	require.EqualValues(t, 1, st.BlockedKeys)
	require.EqualValues(t, 1, st.Queued)
	require.Zero(t, st.Running)
	require.Zero(t, st.Done)
}

// ---------------------------------------------------------------------------------------------
// 9. Skip.

func TestSkipReleasesABlockedKey(t *testing.T) {
	t.Parallel()
	b := setup(t, blockPolicyCfg())
	ids := b.enqueue(t, "k", 1, 2, 3)
	j1, out := b.failNextHead(t, "k", 1, errors.New("boom"))
	require.Equal(t, ordered.OutcomeBlocked, out)
	b.claimNone(t, b.client)

	// Skipping a job that has not failed is refused, says why, and changes nothing.
	_, err := b.client.Skip(b.ctx, ids[1]) // queued
	require.ErrorIs(t, err, ordered.ErrNotFailed)
	require.EqualError(t, err, fmt.Sprintf("ordered: job %d is queued, not failed", ids[1]))
	require.Equal(t, "queued", b.jobStatus(t, ids[1]))
	_, err = b.client.Skip(b.ctx, 1<<40) // no such job
	require.ErrorIs(t, err, ordered.ErrNotFailed)
	require.EqualError(t, err, fmt.Sprintf("ordered: job %d does not exist", int64(1<<40)))
	b.claimNone(t, b.client)
	require.Equal(t, "blocked", b.jobStatus(t, j1.ID))

	released, err := b.client.Skip(b.ctx, j1.ID)
	require.NoError(t, err)
	require.True(t, released)
	require.Equal(t, "failed", b.jobStatus(t, j1.ID))

	j2 := b.claimOne(t, b.client)
	require.EqualValues(t, 2, j2.Seq)
	_, err = b.client.Skip(b.ctx, j2.ID) // running
	require.ErrorIs(t, err, ordered.ErrNotFailed)
	require.EqualError(t, err, fmt.Sprintf("ordered: job %d is running, not failed", j2.ID), "its status as shown")
	require.Equal(t, "running", b.jobStatus(t, j2.ID))

	failed, err := b.client.FailedJobs(b.ctx, ordered.FailedJobsParams{Key: "k"})
	require.NoError(t, err)
	require.Len(t, failed, 1, "the skipped job stays on record")
	require.Equal(t, j1.ID, failed[0].ID)
	require.False(t, failed[0].Blocking)
	require.Equal(t, "boom", failed[0].LastError)

	blocked, err := b.client.BlockedKeys(b.ctx, 0)
	require.NoError(t, err)
	require.Empty(t, blocked)
	st, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Failed)
	require.Zero(t, st.Blocked)
	require.Zero(t, st.BlockedKeys)

	// Skipping it again is a no-op that says so: it does not release the key a second time.
	released, err = b.client.Skip(b.ctx, j1.ID)
	require.NoError(t, err)
	require.False(t, released)
	require.Equal(t, "failed", b.jobStatus(t, j1.ID))
	b.claimNone(t, b.client) // k/3 still waits for the running k/2
	require.NoError(t, b.client.Complete(b.ctx, j2))
	j3 := b.claimOne(t, b.client)
	require.EqualValues(t, 3, j3.Seq)
}

// ---------------------------------------------------------------------------------------------
// 10. Replay of a blocked head.

func TestReplayBlockedHeadRunsFirstWithFreshAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, blockPolicyCfg())
	res, err := b.client.EnqueueMany(b.ctx, []ordered.Event{
		{Key: "k", Seq: 1, MaxAttempts: 3}, {Key: "k", Seq: 2},
	})
	require.NoError(t, err)
	id1, id2 := res[0].ID, res[1].ID

	// Two attempts, then a permanent failure.
	j := b.claimOne(t, b.client)
	require.Equal(t, id1, j.ID)
	out, err := b.client.RetryAfter(b.ctx, j, 0, errors.New("first"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeRetried, out)
	j = b.claimWithin(t, b.client, 5*time.Second)
	require.Equal(t, id1, j.ID)
	require.Equal(t, 2, j.Attempt)
	out, err = b.client.Fail(b.ctx, j, errors.New("second"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeBlocked, out)
	b.claimNone(t, b.client)

	// Replaying a job that has not failed is refused.
	require.ErrorIs(t, b.client.Replay(b.ctx, id2, ordered.ReplayParams{}), ordered.ErrNotFailed)
	require.ErrorIs(t, b.client.Replay(b.ctx, 1<<40, ordered.ReplayParams{}), ordered.ErrNotFailed)

	require.NoError(t, b.client.Replay(b.ctx, id1, ordered.ReplayParams{}))
	require.Equal(t, "queued", b.jobStatus(t, id1))
	blocked, err := b.client.BlockedKeys(b.ctx, 0)
	require.NoError(t, err)
	require.Empty(t, blocked)
	failed, err := b.client.FailedJobs(b.ctx, ordered.FailedJobsParams{})
	require.NoError(t, err)
	require.Empty(t, failed)

	j = b.claimOne(t, b.client)
	require.Equal(t, id1, j.ID, "the replayed job runs before the key's later jobs")
	require.Equal(t, 1, j.Attempt, "attempts start over")
	require.Equal(t, 3, j.MaxAttempts)
	b.claimNone(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))

	j = b.claimOne(t, b.client)
	require.Equal(t, id2, j.ID)
	require.NoError(t, b.client.Complete(b.ctx, j))
	b.claimNone(t, b.client)
}

// ---------------------------------------------------------------------------------------------
// 11. Replay out of order.

// failedBelowDone enqueues k/1 and k/2 under the skip policy, fails k/1 for good and
// completes k/2: a failed job whose later job ran. It returns their IDs.
func failedBelowDone(t *testing.T) (*testBundle, []int64) {
	t.Helper()
	b := setup(t, skipPolicyCfg())
	ids := b.enqueue(t, "k", 1, 2)
	_, out := b.failNextHead(t, "k", 1, errors.New("boom"))
	require.Equal(t, ordered.OutcomeSkipped, out)
	j2 := b.claimOne(t, b.client)
	require.Equal(t, ids[1], j2.ID)
	require.NoError(t, b.client.Complete(b.ctx, j2))
	return b, ids
}

func TestReplayAfterLaterJobsRanNeedsForce(t *testing.T) {
	t.Parallel()
	b, ids := failedBelowDone(t)

	err := b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{})
	require.ErrorIs(t, err, ordered.ErrReplayOutOfOrder)
	require.NotErrorIs(t, err, ordered.ErrLaterJobRunning)
	require.Equal(t, "failed", b.jobStatus(t, ids[0]))
	require.Equal(t, "done", b.jobStatus(t, ids[1]))
	failed, err := b.client.FailedJobs(b.ctx, ordered.FailedJobsParams{})
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, 1, failed[0].Attempts)
	b.claimNone(t, b.client)

	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
	j := b.claimOne(t, b.client)
	require.Equal(t, ids[0], j.ID)
	require.Equal(t, 1, j.Attempt)
	require.NoError(t, b.client.Complete(b.ctx, j))
	require.Equal(t, "done", b.jobStatus(t, ids[0]))
}

// Archival deletes a key's done jobs above a failed one: the key's archived seq still tells
// that a later job ran, so the replay needs force as before. A forced one runs the job alone,
// and an event at or below the archived seq sent again is still a no-op.
func TestReplayAfterLaterJobsWereArchivedNeedsForce(t *testing.T) {
	t.Parallel()
	b, ids := failedBelowDone(t)
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, 1, n, "job 2 archived, the failed job 1 kept")

	err = b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{})
	require.ErrorIs(t, err, ordered.ErrReplayOutOfOrder)
	require.Equal(t, "failed", b.jobStatus(t, ids[0]))
	b.claimNone(t, b.client)

	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
	j := b.claimOne(t, b.client)
	require.Equal(t, ids[0], j.ID)
	require.NoError(t, b.client.Complete(b.ctx, j))
	require.Equal(t, "done", b.jobStatus(t, ids[0]))
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 2, Payload: json.RawMessage(`{}`)})
	require.NoError(t, err, "an archived event sent again is a no-op")
	b.claimNone(t, b.client)
}

// The replay checks the key's later jobs, then queues the job again and moves the head, and
// claims do not wait for the key row it holds. So the replay holds the key's head (its first
// later open job) from the check on: had a claim taken it in between, and a retry given it
// back, it would have started and the unforced replay would run before it; had it still been
// running, the replay would fail as a late event rather than ErrLaterJobRunning.
func TestReplayInFlightKeepsTheHeadFromBeingClaimed(t *testing.T) {
	t.Parallel()
	b := setup(t, skipPolicyCfg())
	ids := b.enqueue(t, "k", 1, 2)
	_, out := b.failNextHead(t, "k", 1, errors.New("boom"))
	require.Equal(t, ordered.OutcomeSkipped, out)
	gate := b.holdJobWrites(t, "UPDATE", "OLD.status = 'failed' AND NEW.status = 'queued'")

	replayed := make(chan error, 1)
	go func() { replayed <- b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{}) }()
	waitFor(t, 10*time.Second, "the replay held in its update, after its checks", func() bool {
		return b.statementsBlockedBy(t, gate, "ordered_job_replay") == 1
	})
	b.claimNone(t, b.client)
	require.NoError(t, gate.Rollback(b.ctx))

	require.NoError(t, <-replayed)
	j := b.claimOne(t, b.client)
	require.Equal(t, ids[0], j.ID, "the replayed job runs first")
	require.Equal(t, 1, j.Attempt)
	require.NoError(t, b.client.Complete(b.ctx, j))
	j = b.claimOne(t, b.client)
	require.Equal(t, ids[1], j.ID)
	require.Equal(t, 1, j.Attempt, "k/2 started before the replayed job")
	require.NoError(t, b.client.Complete(b.ctx, j))
}

// A batch that crashed leaves its later jobs marked as it left them (an attempt counted,
// shown running under its expired lease) until each becomes the head. When the batch's first
// job, recovered alone, then fails for good under the block policy, nothing runs: the later
// jobs started in the crashed batch, so the replay needs force (not "a later job is running",
// which would hold the key for ever), and a forced one runs the job first, then the later
// jobs, each recovered alone in turn.
func TestReplayOfABlockedJobBelowACrashedBatchNeedsForce(t *testing.T) {
	t.Parallel()
	b := setup(t, blockPolicyCfg()) // the crash ends the batch's lease by hand
	ids := b.enqueue(t, "k", 1, 2, 3)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 3)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3}, seqsOf(batches[0]))
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_heads SET lease_until = now() - interval '1 millisecond' WHERE state = 'running'`)
	require.NoError(t, err)
	j := b.claimOne(t, b.client)
	require.Equal(t, ids[0], j.ID, "the crashed batch's first job is recovered alone")
	out, err := b.client.Fail(b.ctx, j, errors.New("poison"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeBlocked, out)
	b.claimNone(t, b.client)

	err = b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{})
	require.ErrorIs(t, err, ordered.ErrReplayOutOfOrder, "jobs 2 and 3 started in the crashed batch")
	require.NotErrorIs(t, err, ordered.ErrLaterJobRunning)
	require.Equal(t, "blocked", b.jobStatus(t, ids[0]))

	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
	for _, id := range ids {
		j := b.claimOne(t, b.client)
		require.Equal(t, id, j.ID, "in seq order")
		b.claimNone(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	require.Equal(t, []string{"1:done:1", "2:done:2", "3:done:2"}, b.jobsOf(t, "k"))
}

func TestReplayWhileLaterJobRunsIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, skipPolicyCfg())
	ids := b.enqueue(t, "k", 1, 2)

	_, out := b.failNextHead(t, "k", 1, errors.New("boom"))
	require.Equal(t, ordered.OutcomeSkipped, out)
	j2 := b.claimOne(t, b.client)
	require.Equal(t, ids[1], j2.ID)

	for _, force := range []bool{true, false} {
		err := b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: force})
		require.ErrorIs(t, err, ordered.ErrLaterJobRunning, "force=%v", force)
		require.Equal(t, "failed", b.jobStatus(t, ids[0]))
		require.Equal(t, "running", b.jobStatus(t, j2.ID))
	}
	b.claimNone(t, b.client)

	// Once k/2 finished, a forced replay goes through.
	require.NoError(t, b.client.Complete(b.ctx, j2))
	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
	j := b.claimOne(t, b.client)
	require.Equal(t, ids[0], j.ID)
}

// ---------------------------------------------------------------------------------------------
// 12. Retry until attempts run out.

func checkRetryExhausts(t *testing.T, p policy.Policy, wantOutcome ordered.Outcome, wantStatus string) {
	b := setup(t, &ordered.Config{
		Policy:  p,
		Backoff: policy.Exponential{Base: time.Millisecond, Max: time.Millisecond},
	})
	res, err := b.client.EnqueueMany(b.ctx, []ordered.Event{
		{Key: "k", Seq: 1, MaxAttempts: 2}, {Key: "k", Seq: 2},
	})
	require.NoError(t, err)
	id1, id2 := res[0].ID, res[1].ID

	j := b.claimOne(t, b.client)
	require.Equal(t, id1, j.ID)
	require.Equal(t, 1, j.Attempt)
	require.Equal(t, 2, j.MaxAttempts)
	out, err := b.client.Retry(b.ctx, j, errors.New("attempt 1 failed"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeRetried, out)
	require.Equal(t, "queued", b.jobStatus(t, id1))

	j = b.claimWithin(t, b.client, 5*time.Second)
	require.Equal(t, id1, j.ID, "the retried job keeps its key: k/2 waits")
	require.Equal(t, 2, j.Attempt)
	require.Equal(t, "attempt 1 failed", j.LastError)
	out, err = b.client.Retry(b.ctx, j, errors.New("attempt 2 failed"))
	require.NoError(t, err)
	require.Equal(t, wantOutcome, out)
	require.Equal(t, wantStatus, b.jobStatus(t, id1))

	failed, err := b.client.FailedJobs(b.ctx, ordered.FailedJobsParams{})
	require.NoError(t, err)
	require.Len(t, failed, 1)
	require.Equal(t, 2, failed[0].Attempts)
	require.Equal(t, "attempt 2 failed", failed[0].LastError)

	if wantOutcome == ordered.OutcomeBlocked {
		b.claimNone(t, b.client)
	} else {
		j = b.claimOne(t, b.client)
		require.Equal(t, id2, j.ID)
	}
}

func TestRetryExhaustingAttemptsBlocksUnderBlockPolicy(t *testing.T) {
	t.Parallel()
	checkRetryExhausts(t, policy.Always(policy.Block), ordered.OutcomeBlocked, "blocked")
}

func TestRetryExhaustingAttemptsFailsUnderSkipPolicy(t *testing.T) {
	t.Parallel()
	checkRetryExhausts(t, policy.Always(policy.Skip), ordered.OutcomeSkipped, "failed")
}

// ---------------------------------------------------------------------------------------------
// 13. A per-key policy.

func TestByKeyPrefixPolicyDecidesPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{
		Policy: policy.ByKeyPrefix(policy.Skip, map[string]policy.Decision{"acct-": policy.Block}),
	})
	acct := b.enqueue(t, "acct-1", 1, 2)
	notify := b.enqueue(t, "notify-1", 1, 2)

	jobs, err := b.client.Claim(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, jobs, 2, "the two keys' heads")
	for _, j := range jobs {
		require.EqualValues(t, 1, j.Seq)
		out, err := b.client.Fail(b.ctx, j, errors.New("boom"))
		require.NoError(t, err)
		switch j.Key {
		case "acct-1":
			require.Equal(t, ordered.OutcomeBlocked, out)
		case "notify-1":
			require.Equal(t, ordered.OutcomeSkipped, out)
		default:
			t.Fatalf("unexpected key %q", j.Key)
		}
	}
	require.Equal(t, "blocked", b.jobStatus(t, acct[0]))
	require.Equal(t, "failed", b.jobStatus(t, notify[0]))

	j := b.claimOne(t, b.client)
	require.Equal(t, notify[1], j.ID, "notify-1/2 runs after its failed head")
	b.claimNone(t, b.client) // acct-1/2 stays behind the blocked acct-1/1

	blocked, err := b.client.BlockedKeys(b.ctx, 0)
	require.NoError(t, err)
	require.Len(t, blocked, 1)
	require.Equal(t, "acct-1", blocked[0].Key)
	require.Equal(t, acct[0], blocked[0].JobID)
}
