package ordered_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
	"github.com/orderedq/ordered/policy"
)

// contiguous is a config whose keys are all contiguous from seq 1, with the gap policy given.
func contiguous(action policy.GapAction, timeout time.Duration, p policy.Decision) *ordered.Config {
	return &ordered.Config{
		Lease:  time.Minute,
		Policy: policy.Always(p),
		Sequence: policy.AllKeys(policy.Sequence{Contiguous: true, First: 1,
			Gap: policy.Gap{Action: action, Timeout: timeout}}),
	}
}

// gapOf returns the key's entry in Gaps.
func gapOf(t *testing.T, b *testBundle, key string) ordered.GapKey {
	t.Helper()
	gaps, err := b.client.Gaps(b.ctx, ordered.GapsParams{Key: key})
	require.NoError(t, err)
	require.Len(t, gaps, 1)
	return gaps[0]
}

// dueGaps makes every open gap's timeout pass now, as if it had been open for that long.
func dueGaps(t *testing.T, b *testBundle) {
	t.Helper()
	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_gaps SET deadline = now() - interval '1 millisecond'
		WHERE deadline IS NOT NULL`)
	require.NoError(t, err)
}

// A contiguous key runs a job only once every lower seq has finished: a seq that arrives
// early waits on the gap below it, is never refused, and runs when the gap fills.
func TestContiguousKeyWaitsOnGap(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapWait, 0, policy.Block))

	b.enqueue(t, "k", 3)
	b.claimNone(t, b.client)
	g := gapOf(t, b, "k")
	require.True(t, g.Waiting)
	require.Equal(t, &ordered.SeqRange{From: 1, To: 2}, g.Missing)
	require.EqualValues(t, 1, g.NextSeq)
	require.True(t, g.Deadline.IsZero(), "wait never acts")
	stats, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, stats.GapKeys)
	require.Positive(t, stats.OldestGap)

	b.enqueue(t, "k", 2)
	b.claimNone(t, b.client)
	b.enqueue(t, "k", 1)
	for seq := int64(1); seq <= 3; seq++ {
		j := b.claimOne(t, b.client)
		require.Equal(t, seq, j.Seq)
		b.claimNone(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	gaps, err := b.client.Gaps(b.ctx, ordered.GapsParams{})
	require.NoError(t, err)
	require.Empty(t, gaps)

	// Below the first seq, and below the next seq once it moved: late. A stored one is a
	// duplicate, as ever.
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "other", Seq: 0})
	var late *ordered.LateEventError
	require.ErrorAs(t, err, &late)
	require.Equal(t, ordered.LateEventError{Key: "other", Seq: 0, LaterSeq: 1, Contiguous: true}, *late)
	require.EqualError(t, err, `ordered: late event: key "other" seq 0 is below the key's next seq 1 `+
		`(every seq before it has finished, was passed as a gap, or is below the key's first seq)`)
	res, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 2, Kind: "test", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	b.enqueue(t, "k", 5)
	b.claimNone(t, b.client)
	require.Equal(t, &ordered.SeqRange{From: 4, To: 4}, gapOf(t, b, "k").Missing)

	// The maintenance never acts on a gap of the wait policy.
	n, err := b.client.ExpireGaps(b.ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n)
}

// A gap that stays open past its timeout under the proceed policy is passed: recorded, the
// key goes on, and the missing seq arriving afterwards is late.
func TestGapTimeoutProceeds(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapProceed, time.Hour, policy.Block))
	b.enqueue(t, "k", 3, 4)
	b.claimNone(t, b.client)
	n, err := b.client.ExpireGaps(b.ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n, "the gap is within its timeout")
	g := gapOf(t, b, "k")
	require.WithinDuration(t, g.Since.Add(time.Hour), g.Deadline, time.Second)
	// Within the timeout the missing seq is accepted.
	b.enqueue(t, "k", 2)

	dueGaps(t, b)
	n, err = b.client.ExpireGaps(b.ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	passed, err := b.client.PassedGaps(b.ctx, "k", 0)
	require.NoError(t, err)
	require.Len(t, passed, 1)
	require.Equal(t, ordered.SeqRange{From: 1, To: 1}, passed[0].Range)
	require.Equal(t, "timeout", passed[0].Reason)
	timeline, err := b.client.KeyTimeline(b.ctx, "k", ordered.KeyTimelineParams{})
	require.NoError(t, err)
	require.Equal(t, passed, timeline.Passed)

	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 1})
	require.ErrorIs(t, err, ordered.ErrLateEvent)
	for _, seq := range []int64{2, 3, 4} {
		j := b.claimOne(t, b.client)
		require.Equal(t, seq, j.Seq)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	stats, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, stats.GapKeys)
}

// Under the block policy a gap past its timeout blocks the key for an operator, who releases
// it; a missing event that arrives first fills the gap instead.
func TestGapTimeoutBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapBlock, time.Hour, policy.Block))
	b.enqueue(t, "released", 3)
	b.enqueue(t, "filled", 2)
	dueGaps(t, b)
	n, err := b.client.ExpireGaps(b.ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.True(t, gapOf(t, b, "released").Blocked)
	stats, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, stats.GapKeys)
	require.EqualValues(t, 2, stats.GapBlockedKeys)
	n, err = b.client.ExpireGaps(b.ctx, 0)
	require.NoError(t, err)
	require.Zero(t, n, "a blocked gap is left to the operator")
	b.claimNone(t, b.client)

	r, err := b.client.ReleaseGap(b.ctx, "released")
	require.NoError(t, err)
	require.Equal(t, ordered.SeqRange{From: 1, To: 2}, r)
	j := b.claimOne(t, b.client)
	require.Equal(t, "released", j.Key)
	require.EqualValues(t, 3, j.Seq)
	require.NoError(t, b.client.Complete(b.ctx, j))

	b.enqueue(t, "filled", 1)
	for _, seq := range []int64{1, 2} {
		j := b.claimOne(t, b.client)
		require.Equal(t, "filled", j.Key)
		require.Equal(t, seq, j.Seq)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	stats, err = b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Zero(t, stats.GapKeys)
	require.Zero(t, stats.GapBlockedKeys)
}

// A gap released while the job before it runs: the running claim is untouched and completes
// as its own; the key then moves past the released range, and a seq of it is late.
func TestGapReleasedWhileClaimRuns(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
	b.enqueue(t, "k", 1, 3)
	j1 := b.claimOne(t, b.client)
	require.EqualValues(t, 1, j1.Seq)
	g := gapOf(t, b, "k")
	require.False(t, g.Waiting, "the key runs its job 1")
	require.Equal(t, &ordered.SeqRange{From: 2, To: 2}, g.Missing)

	r, err := b.client.ReleaseGap(b.ctx, "k")
	require.NoError(t, err)
	require.Equal(t, ordered.SeqRange{From: 2, To: 2}, r)
	b.claimNone(t, b.client)
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 2})
	require.ErrorIs(t, err, ordered.ErrLateEvent)

	// The claim is still current and fenced: renewable, and its completion hands over to 3.
	require.NoError(t, b.client.Complete(b.ctx, j1))
	j3 := b.claimOne(t, b.client)
	require.EqualValues(t, 3, j3.Seq)
	require.NoError(t, b.client.Complete(b.ctx, j3))

	// Released while the claim runs, then the claim's lease expires: the recovered claim
	// runs the job, and the key still moves past the released range.
	b.enqueue(t, "r", 1, 3)
	r1 := b.claimOne(t, b.client)
	_, err = b.client.ReleaseGap(b.ctx, "r")
	require.NoError(t, err)
	b.expireLease(t, r1.ID)
	again := b.claimOne(t, b.client)
	require.Equal(t, r1.ID, again.ID)
	require.ErrorIs(t, b.client.Complete(b.ctx, r1), ordered.ErrLeaseLost)
	b.claimNone(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, again))
	require.EqualValues(t, 3, b.claimOne(t, b.client).Seq)

	// Nothing more is missing below an open job: no gap to release.
	_, err = b.client.ReleaseGap(b.ctx, "k")
	require.ErrorIs(t, err, ordered.ErrNoGap)
	b.enqueue(t, "k", 4)
	_, err = b.client.ReleaseGap(b.ctx, "k")
	require.ErrorIs(t, err, ordered.ErrNoGap)
	_, err = b.client.ReleaseGap(b.ctx, "no-such-key")
	require.ErrorIs(t, err, ordered.ErrNotContiguous)
}

// A release that commits while a completion of the same key waits for the key row: the
// completion sees the release, and the key moves past the range in that same completion.
func TestGapReleasedWhileCompletionWaits(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
	b.enqueue(t, "k", 1, 3)
	j1 := b.claimOne(t, b.client)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	_, err = b.client.ReleaseGapTx(b.ctx, tx, "k")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.client.Complete(b.ctx, j1) }()
	waitFor(t, 30*time.Second, "the completion to wait for the key", func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%ordered_jobs_complete%')`).Scan(&waiting))
		return waiting
	})
	require.NoError(t, tx.Commit(b.ctx))
	require.NoError(t, <-done)
	j3 := b.claimOne(t, b.client)
	require.EqualValues(t, 3, j3.Seq)
}

// Failure policies on a contiguous key: a job failed under skip moves the key on, one failed
// under block holds it until skipped; replay and lease recovery keep the order.
func TestContiguousFailurePoliciesAndAdmin(t *testing.T) {
	t.Parallel()
	t.Run("skip", func(t *testing.T) {
		t.Parallel()
		b := setup(t, contiguous(policy.GapWait, 0, policy.Skip))
		b.enqueue(t, "k", 1, 2)
		j := b.claimOne(t, b.client)
		_, err := b.client.Fail(b.ctx, j, errors.New("poison"))
		require.NoError(t, err)
		j2 := b.claimOne(t, b.client)
		require.EqualValues(t, 2, j2.Seq)
		require.NoError(t, b.client.Complete(b.ctx, j2))
		_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 0})
		require.ErrorIs(t, err, ordered.ErrLateEvent)
	})
	t.Run("block, skip, replay", func(t *testing.T) {
		t.Parallel()
		b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
		ids := b.enqueue(t, "k", 1, 2, 4)
		j := b.claimOne(t, b.client)
		_, err := b.client.Fail(b.ctx, j, errors.New("poison"))
		require.NoError(t, err)
		b.claimNone(t, b.client)
		released, err := b.client.Skip(b.ctx, ids[0])
		require.NoError(t, err)
		require.True(t, released)
		j2 := b.claimOne(t, b.client)
		require.EqualValues(t, 2, j2.Seq)
		require.NoError(t, b.client.Complete(b.ctx, j2))
		b.claimNone(t, b.client) // 3 is missing
		require.True(t, gapOf(t, b, "k").Waiting)
		// Replaying the skipped job, which ran before job 2, needs force; it then runs alone,
		// and the key still waits on its gap.
		require.ErrorIs(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{}), ordered.ErrReplayOutOfOrder)
		require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
		j1 := b.claimOne(t, b.client)
		require.EqualValues(t, 1, j1.Seq)
		require.NoError(t, b.client.Complete(b.ctx, j1))
		b.claimNone(t, b.client)
		g := gapOf(t, b, "k")
		require.True(t, g.Waiting)
		require.Equal(t, &ordered.SeqRange{From: 3, To: 3}, g.Missing)
	})
	t.Run("skip of a blocked job below a forced replay", func(t *testing.T) {
		// A forced replay heads the key below its blocked job; skipping that job then passes
		// it, so the key goes on past it once the replayed job is done, with no gap there.
		t.Parallel()
		b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
		skipping := b.newClient(t, contiguous(policy.GapWait, 0, policy.Skip))
		ids := b.enqueue(t, "k", 1, 2)
		j1 := b.claimOne(t, skipping)
		out, err := skipping.Fail(b.ctx, j1, errors.New("poison"))
		require.NoError(t, err)
		require.Equal(t, ordered.OutcomeSkipped, out)
		j2 := b.claimOne(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j2))
		id3 := b.enqueue(t, "k", 3)[0]
		j3 := b.claimOne(t, b.client)
		out, err = b.client.Fail(b.ctx, j3, errors.New("poison"))
		require.NoError(t, err)
		require.Equal(t, ordered.OutcomeBlocked, out)

		require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
		released, err := b.client.Skip(b.ctx, id3)
		require.NoError(t, err)
		require.True(t, released)
		j1 = b.claimOne(t, b.client)
		require.EqualValues(t, 1, j1.Seq)
		b.claimNone(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j1))
		b.enqueue(t, "k", 4)
		j4 := b.claimOne(t, b.client)
		require.EqualValues(t, 4, j4.Seq, "3 was skipped: no gap holds 4")
		require.NoError(t, b.client.Complete(b.ctx, j4))
		gaps, err := b.client.Gaps(b.ctx, ordered.GapsParams{})
		require.NoError(t, err)
		require.Empty(t, gaps)
	})
	t.Run("replay while the key waits on a gap", func(t *testing.T) {
		// Job 2 failed under skip and the key waits on the gap 3-4, job 5 queued above it: the
		// replay needs no force, and the gap's events are still welcome, not late.
		t.Parallel()
		b := setup(t, contiguous(policy.GapWait, 0, policy.Skip))
		ids := b.enqueue(t, "k", 1, 2, 5)
		j1 := b.claimOne(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j1))
		j2 := b.claimOne(t, b.client)
		out, err := b.client.Fail(b.ctx, j2, errors.New("poison"))
		require.NoError(t, err)
		require.Equal(t, ordered.OutcomeSkipped, out)
		b.claimNone(t, b.client)
		require.Equal(t, &ordered.SeqRange{From: 3, To: 4}, gapOf(t, b, "k").Missing)

		require.NoError(t, b.client.Replay(b.ctx, ids[1], ordered.ReplayParams{}))
		b.enqueue(t, "k", 3, 4)
		for _, seq := range []int64{2, 3, 4, 5} {
			j := b.claimOne(t, b.client)
			require.Equal(t, seq, j.Seq)
			b.claimNone(t, b.client)
			require.NoError(t, b.client.Complete(b.ctx, j))
		}
	})
	t.Run("lease recovery", func(t *testing.T) {
		t.Parallel()
		b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
		b.enqueue(t, "k", 1, 2)
		j := b.claimOne(t, b.client)
		b.expireLease(t, j.ID)
		again := b.claimOne(t, b.client)
		require.Equal(t, j.ID, again.ID)
		require.ErrorIs(t, b.client.Complete(b.ctx, j), ordered.ErrLeaseLost)
		require.NoError(t, b.client.Complete(b.ctx, again))
		j2 := b.claimOne(t, b.client)
		require.EqualValues(t, 2, j2.Seq)
	})
}

// A seq of a gap that was passed never ran: it stays late once the jobs around it are
// archived, while a seq that ran and was archived is still a no-op.
func TestPassedGapStaysLateAfterArchival(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
	b.enqueue(t, "k", 1, 3)
	_, err := b.client.ReleaseGap(b.ctx, "k")
	require.NoError(t, err)
	for _, seq := range []int64{1, 3} {
		j := b.claimOne(t, b.client)
		require.Equal(t, seq, j.Seq)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 2})
	require.ErrorIs(t, err, ordered.ErrLateEvent)
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, 2, n)

	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 2})
	require.ErrorIs(t, err, ordered.ErrLateEvent, "seq 2 was passed, not run")
	res, err := b.client.EnqueueMany(b.ctx, []ordered.Event{{Key: "k", Seq: 1}, {Key: "k", Seq: 3}})
	require.NoError(t, err)
	for _, r := range res {
		require.True(t, r.Duplicate && r.Archived, "seqs 1 and 3 ran and were archived")
	}
	b.claimNone(t, b.client)
}

// A key keeps the mode it was created with: an enqueue of the other mode is refused and
// writes nothing.
func TestSequenceModeMismatchRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
	plain := b.newClient(t, nil)
	b.enqueue(t, "cont", 2)
	_, err := plain.Enqueue(b.ctx, ordered.Event{Key: "plain", Seq: 5})
	require.NoError(t, err)

	_, err = plain.Enqueue(b.ctx, ordered.Event{Key: "cont", Seq: 3})
	require.ErrorIs(t, err, ordered.ErrSequenceMismatch)
	var mismatch *ordered.SequenceMismatchError
	require.ErrorAs(t, err, &mismatch)
	require.Equal(t, ordered.SequenceMismatchError{Key: "cont", Contiguous: true}, ordered.SequenceMismatchError{Key: mismatch.Key, Contiguous: mismatch.Contiguous})
	_, err = plain.EnqueueMany(b.ctx, []ordered.Event{{Key: "cont", Seq: 4}, {Key: "cont", Seq: 1}})
	require.ErrorIs(t, err, ordered.ErrSequenceMismatch)
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "plain", Seq: 6})
	require.ErrorIs(t, err, ordered.ErrSequenceMismatch)
	require.Contains(t, err.Error(), `plain`)
	var n int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now`).Scan(&n))
	require.Equal(t, 2, n)

	// A batch whose keys get different sequences from Config.Sequence is sent as one
	// statement per mode, in one transaction: all of it or nothing.
	mixed := b.newClient(t, &ordered.Config{Sequence: policy.SequenceFunc(func(key string) policy.Sequence {
		if key == "plain" || key == "plain-2" {
			return policy.Sequence{}
		}
		return policy.Sequence{Contiguous: true, First: 1}
	})})
	res, err := mixed.EnqueueMany(b.ctx, []ordered.Event{{Key: "cont", Seq: 3}, {Key: "plain", Seq: 7},
		{Key: "new", Seq: 1}, {Key: "plain", Seq: 7}, {Key: "cont", Seq: 3}})
	require.NoError(t, err)
	require.Len(t, res, 5)
	require.False(t, res[0].Duplicate || res[1].Duplicate || res[2].Duplicate)
	require.Equal(t, res[1].ID, res[3].ID)
	require.Equal(t, res[0].ID, res[4].ID)
	require.True(t, res[3].Duplicate && res[4].Duplicate)
	var key string
	var seq int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT key, seq FROM ordered_jobs_now WHERE id = $1`, res[2].ID).Scan(&key, &seq))
	require.Equal(t, "new/1", fmt.Sprintf("%s/%d", key, seq))
	// A refusal in one mode's statement undoes the other's; the error names the event by its
	// index in the batch.
	_, err = mixed.EnqueueMany(b.ctx, []ordered.Event{{Key: "plain-2", Seq: 1}, {Key: "cont", Seq: 4},
		{Key: "cont", Seq: 0}})
	require.ErrorIs(t, err, ordered.ErrLateEvent)
	_, err = mixed.EnqueueMany(b.ctx, []ordered.Event{{Key: "plain-2", Seq: 1}, {Key: "cont", Seq: 5},
		{Key: "cont", Seq: 3, Payload: json.RawMessage(`{"other":1}`)}})
	var dup *ordered.DuplicateConflictError
	require.ErrorAs(t, err, &dup)
	require.Equal(t, 2, dup.Index)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now WHERE key = 'plain-2' OR (key = 'cont' AND seq IN (4, 5))`).Scan(&n))
	require.Zero(t, n, "nothing of a refused batch was written")
	bad := b.newClient(t, &ordered.Config{Sequence: policy.AllKeys(policy.Sequence{Contiguous: true,
		Gap: policy.Gap{Action: policy.GapProceed}})})
	_, err = bad.Enqueue(b.ctx, ordered.Event{Key: "x", Seq: 0})
	require.ErrorIs(t, err, ordered.ErrInvalidEvent)
	require.Contains(t, err.Error(), "Timeout")
}

// The SQL API creates contiguous keys through its trailing parameters, and refuses bad ones.
func TestSQLEnqueueContiguous(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.pool.Exec(b.ctx, `SELECT * FROM ordered_enqueue('[{"key": "k", "seq": 12}]', p_first_seq => 10,
		p_gap_action => 'proceed', p_gap_timeout => '5 minutes')`)
	require.NoError(t, err)
	var next int64
	var action, timeout string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT next_seq, gap_action, gap_timeout::text FROM ordered_keys
		WHERE key = 'k'`).Scan(&next, &action, &timeout))
	require.Equal(t, []any{int64(10), "proceed", "00:05:00"}, []any{next, action, timeout})
	b.claimNone(t, b.client)
	_, err = b.pool.Exec(b.ctx, `SELECT * FROM ordered_enqueue_events(ARRAY[ROW('k', 10, '', '{}', NULL, NULL)::ordered_event],
		p_first_seq => 10, p_gap_action => 'proceed', p_gap_timeout => '5 minutes')`)
	require.NoError(t, err)
	require.EqualValues(t, 10, b.claimOne(t, b.client).Seq)

	for _, bad := range []string{
		`p_first_seq => -1`,
		`p_first_seq => 1, p_gap_action => 'later'`,
		`p_first_seq => 1, p_gap_action => 'proceed'`,
		`p_first_seq => 1, p_gap_timeout => '1 minute'`,
		// A gap policy without p_first_seq, which would leave the key in the default mode.
		`p_gap_timeout => '1 minute'`,
		`p_gap_action => 'block', p_gap_timeout => '1 minute'`,
		`p_gap_action => 'bogus'`,
		`p_gap_action => NULL`,
	} {
		for _, call := range []string{`ordered_enqueue('[{"key": "z", "seq": 1}]', `,
			`ordered_enqueue_events(ARRAY[ROW('z', 1, '', '{}', NULL, NULL)::ordered_event], `} {
			_, err = b.pool.Exec(b.ctx, `SELECT * FROM `+call+bad+`)`)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr, bad)
			require.Equal(t, "22023", pgErr.Code, bad)
			require.Contains(t, pgErr.Message, "ordered: p_", bad)
		}
	}
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_keys WHERE key = 'z'`))
}

// Many producers, each on its own connection, enqueue the same contiguous keys' events in
// random order while workers drain them: every key runs in seq order, no event is refused
// (every gap closes within its timeout), and the history checker finds nothing.
func TestContiguousManyProducersRandomOrder(t *testing.T) {
	t.Parallel()
	cfg := contiguous(policy.GapProceed, time.Hour, policy.Block)
	cfg.Lease = 5 * time.Second
	b := setup(t, cfg)
	_, err := b.pool.Exec(b.ctx, `CREATE TABLE starts (key text, seq bigint, version bigint, at timestamptz);
		CREATE TABLE effects (n bigserial, key text, seq bigint, version bigint)`)
	require.NoError(t, err)
	const keys, perKey, producers = 12, 25, 6

	var all []ordered.Event
	for k := range keys {
		for s := 1; s <= perKey; s++ {
			all = append(all, ordered.Event{Key: fmt.Sprintf("k%02d", k), Seq: int64(s), Payload: json.RawMessage(`{}`)})
		}
	}
	rand.New(rand.NewPCG(7, 7)).Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })

	// Each attempt records its start in a statement of its own, and its effect in the
	// transaction that completes the job.
	startWorker(t, b, b.client, ordered.TxHandlerFunc(func(ctx context.Context, tx pgx.Tx, j *ordered.Job) error {
		if _, err := b.pool.Exec(ctx, `INSERT INTO starts VALUES ($1, $2, $3, clock_timestamp())`,
			j.Key, j.Seq, j.ClaimVersion); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (key, seq, version) VALUES ($1, $2, $3)`, j.Key, j.Seq, j.ClaimVersion)
		return err
	}), &ordered.WorkerConfig{
		Workers: 4, PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond,
	})

	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.newClient(t, cfg)
			for i := p; i < len(all); i += producers {
				batch := []ordered.Event{all[i]}
				if i+producers < len(all) && i%3 == 0 { // some batches of two
					i += producers
					batch = append(batch, all[i])
				}
				if _, err := c.EnqueueMany(b.ctx, batch); err != nil {
					errs <- fmt.Errorf("enqueue %v: %w", batch, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	waitFor(t, 90*time.Second, "every job to finish", func() bool {
		var open int
		require.NoError(t, b.pool.QueryRow(b.ctx,
			`SELECT count(*) FROM ordered_jobs_now WHERE status NOT IN ('done', 'failed')`).Scan(&open))
		return open == 0
	})

	h := history.History{}
	for _, e := range all {
		h.Enqueued = append(h.Enqueued, history.ID{Key: e.Key, Seq: e.Seq})
	}
	rows, err := b.pool.Query(b.ctx, `SELECT key, seq, status, finished_at FROM ordered_jobs_now`)
	require.NoError(t, err)
	for rows.Next() {
		var j history.Job
		require.NoError(t, rows.Scan(&j.Key, &j.Seq, &j.Status, &j.FinishedAt))
		h.Jobs = append(h.Jobs, j)
	}
	require.NoError(t, rows.Err())
	rows, err = b.pool.Query(b.ctx, `SELECT key, seq, version, at FROM starts`)
	require.NoError(t, err)
	for rows.Next() {
		var s history.Start
		require.NoError(t, rows.Scan(&s.Key, &s.Seq, &s.ClaimVersion, &s.At))
		h.Starts = append(h.Starts, s)
	}
	require.NoError(t, rows.Err())
	rows, err = b.pool.Query(b.ctx, `SELECT key, seq, version, n FROM effects`)
	require.NoError(t, err)
	for rows.Next() {
		var e history.Effect
		require.NoError(t, rows.Scan(&e.Key, &e.Seq, &e.ClaimVersion, &e.Order))
		h.Effects = append(h.Effects, e)
	}
	require.NoError(t, rows.Err())
	// The events did arrive out of order: some seq was enqueued after a higher one of its key.
	var early int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now AS j
		WHERE EXISTS (SELECT 1 FROM ordered_jobs_now AS h WHERE h.key = j.key AND h.seq > j.seq AND h.id < j.id)`).Scan(&early))
	require.Positive(t, early)
	report := history.Check(h)
	require.True(t, report.Clean(true), "%+v", report)
	require.Equal(t, keys*perKey, report.Completed)
	passed, err := b.client.PassedGaps(b.ctx, "", 0)
	require.NoError(t, err)
	require.Empty(t, passed)
}

// A worker's maintenance applies gap timeouts: a proceed key's gap is passed and its later
// job runs, a block key stays held, and the gauges count the keys waiting and blocked.
func TestWorkerMaintenanceAppliesGapPolicies(t *testing.T) {
	t.Parallel()
	cfg := &ordered.Config{Sequence: policy.SequenceFunc(func(key string) policy.Sequence {
		action := policy.GapProceed
		if key == "b" {
			action = policy.GapBlock
		}
		return policy.Sequence{Contiguous: true, First: 1, Gap: policy.Gap{Action: action, Timeout: 50 * time.Millisecond}}
	})}
	b := setup(t, cfg)
	b.enqueue(t, "p", 3)
	b.enqueue(t, "b", 2)
	reg := prometheus.NewRegistry()
	var ran sync.Map
	startWorker(t, b, b.client, ordered.HandlerFunc(func(_ context.Context, j *ordered.Job) error {
		ran.Store(j.IdempotencyKey(), true)
		return nil
	}), &ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond, Registerer: reg})
	waitFor(t, 30*time.Second, "p's gap passed and its job run, b blocked, the gauges counted", func() bool {
		_, pRan := ran.Load("p/3")
		return pRan && metricValue(t, reg, "ordered_gap_keys") == 1 && metricValue(t, reg, "ordered_gap_blocked_keys") == 1 &&
			metricValue(t, reg, "ordered_oldest_gap_age_seconds") > 0
	})
	_, bRan := ran.Load("b/2")
	require.False(t, bRan, "a blocked gap holds its key")
	require.True(t, gapOf(t, b, "b").Blocked)
}

// A REPEATABLE READ enqueue whose snapshot predates the completion that moved a contiguous
// key's next seq cannot leave the key holding a job it could run: it fails with a
// serialization error, and the enqueue is retried on a fresh snapshot.
func TestContiguousEnqueueRepeatableReadAfterCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
	b.enqueue(t, "k", 1)
	j1 := b.claimOne(t, b.client)
	tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback(b.ctx)                                         //nolint:errcheck
	_, err = tx.Exec(b.ctx, `SELECT count(*) FROM ordered_jobs_now`) // takes the snapshot
	require.NoError(t, err)
	require.NoError(t, b.client.Complete(b.ctx, j1))

	_, err = b.client.EnqueueTx(b.ctx, tx, ordered.Event{Key: "k", Seq: 2})
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "40001", pgErr.Code)
	require.NoError(t, tx.Rollback(b.ctx))
	b.enqueue(t, "k", 2)
	require.EqualValues(t, 2, b.claimOne(t, b.client).Seq)
}
