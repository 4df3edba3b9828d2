package ordered_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
)

// TestEnqueueByCopy runs the enqueue guarantees' tests again with clients that write every batch
// of appends with COPY, however small (setup sees the test's name), so that both ways of writing
// a batch keep every guarantee: duplicates and late events found (a batch that is not all
// appends goes the other way), one head per key, the lowest, under concurrent enqueues and at
// every isolation level, and the caller's transaction followed.
func TestEnqueueByCopy(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"TestEnqueueDuplicateReturnsExistingJob", TestEnqueueDuplicateReturnsExistingJob},
		{"TestEnqueueIdenticalDuplicateIsANoOp", TestEnqueueIdenticalDuplicateIsANoOp},
		{"TestEnqueueDuplicateWithDifferentContentIsAnError", TestEnqueueDuplicateWithDifferentContentIsAnError},
		{"TestEnqueueTxDuplicateConflictAbortsTheTransaction", TestEnqueueTxDuplicateConflictAbortsTheTransaction},
		{"TestConcurrentEnqueuesOfTheSameEventsStoreEachOnce", TestConcurrentEnqueuesOfTheSameEventsStoreEachOnce},
		{"TestConcurrentEnqueuesOfTheSameEventsWithDifferentContentOneWins", TestConcurrentEnqueuesOfTheSameEventsWithDifferentContentOneWins},
		{"TestEnqueueTxSameEventAtOnceTheSecondMeetsTheFirst", TestEnqueueTxSameEventAtOnceTheSecondMeetsTheFirst},
		{"TestHeadIsTheLowestOpenJobUnderConcurrentEnqueues", TestHeadIsTheLowestOpenJobUnderConcurrentEnqueues},
		{"TestEnqueueLateEventAfterLaterJobStarted", TestEnqueueLateEventAfterLaterJobStarted},
		{"TestEnqueueLateEventAfterLaterJobDone", TestEnqueueLateEventAfterLaterJobDone},
		{"TestEnqueueBatchWithLateEventWritesNothing", TestEnqueueBatchWithLateEventWritesNothing},
		{"TestEnqueueBelowQueuedJobIsNotLate", TestEnqueueBelowQueuedJobIsNotLate},
		{"TestEnqueueBatchWithFinishedDuplicateAndNewEventIsNotLate", TestEnqueueBatchWithFinishedDuplicateAndNewEventIsNotLate},
		{"TestEnqueueBelowAHeadThatStartedMeanwhileIsLate", TestEnqueueBelowAHeadThatStartedMeanwhileIsLate},
		{"TestEnqueueOutOfOrderArrivalRunsInSeqOrder", TestEnqueueOutOfOrderArrivalRunsInSeqOrder},
		{"TestEnqueueTxFollowsTheCallersTransaction", TestEnqueueTxFollowsTheCallersTransaction},
		{"TestEnqueueBothFormsStoreTheSameColumns", TestEnqueueBothFormsStoreTheSameColumns},
		{"TestEnqueueNotifiesOnlyWhenAJobBecameClaimable", TestEnqueueNotifiesOnlyWhenAJobBecameClaimable},
		{"TestEnqueueLargeBatchOneHeadPerKey", TestEnqueueLargeBatchOneHeadPerKey},
		{"TestEnqueueRunAtInFutureHoldsBackTheKey", TestEnqueueRunAtInFutureHoldsBackTheKey},
		{"TestEnqueueRepeatedEventWithinBatch", TestEnqueueRepeatedEventWithinBatch},
		{"TestEnqueueBelowReplayedJobIsLate", TestEnqueueBelowReplayedJobIsLate},
		{"TestEnqueueBelowFinishedJobIsLateAfterForcedReplay", TestEnqueueBelowFinishedJobIsLateAfterForcedReplay},
		{"TestEnqueueCommitOrderInterleaving", TestEnqueueCommitOrderInterleaving},
		{"TestEnqueueTxRepeatableReadAfterCompletion", TestEnqueueTxRepeatableReadAfterCompletion},
		{"TestEnqueueTxRepeatableReadMissesStartedLaterJob", TestEnqueueTxRepeatableReadMissesStartedLaterJob},
		{"TestRepeatableReadAfterReplay", TestRepeatableReadAfterReplay},
		{"TestArchiveAndEnqueueDoNotDeadlock", TestArchiveAndEnqueueDoNotDeadlock},
	} {
		t.Run(test.name, test.run)
	}
}

// A large batch of appends, to new keys and behind open jobs, is written with COPY and stores
// what the statement path stores: one head per key, its lowest open job; available_at the
// transaction's time or the event's run_at; the defaults of kind, payload and max_attempts.
func TestEnqueueLargeBatchOfAppendsIsCopied(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{MaxAttempts: 9})
	b.enqueue(t, "busy", 1) // an open head the batch appends behind
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	var events []ordered.Event
	for k := range 20 {
		for s := range 10 {
			ev := ordered.Event{Key: fmt.Sprintf("new-%02d", k), Seq: int64(100 - s)}
			if k == 0 && s == 9 {
				ev.RunAt = later // the head of new-00 waits
			}
			events = append(events, ev)
		}
	}
	events = append(events, ordered.Event{Key: "busy", Seq: 5, Kind: "k", Payload: json.RawMessage(`{"a":1}`), MaxAttempts: 3})
	before := ordered.BatchesCopied(b.client)
	res, err := b.client.EnqueueMany(b.ctx, events)
	require.NoError(t, err)
	require.Equal(t, before+1, ordered.BatchesCopied(b.client), "the batch is written with COPY")
	for i, r := range res {
		require.False(t, r.Duplicate, "event %d", i)
		require.Positive(t, r.ID, "event %d", i)
	}

	require.EqualValues(t, 21, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE head`))
	require.EqualValues(t, 20, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE head AND seq = 91`))
	require.EqualValues(t, 1, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE head AND key = 'busy' AND seq = 1`))
	require.EqualValues(t, 1, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now
		WHERE key = 'busy' AND seq = 5 AND kind = 'k' AND payload = '{"a":1}' AND max_attempts = 3 AND NOT head`))
	require.EqualValues(t, 199, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now
		WHERE key LIKE 'new-%' AND kind = '' AND payload = 'null' AND max_attempts = 9 AND run_at IS NULL
		  AND available_at = created_at`))
	require.EqualValues(t, 1, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now
		WHERE key = 'new-00' AND seq = 91 AND run_at = $1 AND available_at = $1`, later))
	require.EqualValues(t, 1, b.countRows(t, `SELECT count(*) FROM ordered_keys WHERE key = 'new-05' AND seq_max = 100`))

	jobs, err := b.client.Claim(b.ctx, 100)
	require.NoError(t, err)
	require.Len(t, jobs, 20, "every key's head but the delayed one")
	for _, j := range jobs {
		if j.Key == "busy" {
			require.EqualValues(t, 1, j.Seq)
		} else {
			require.EqualValues(t, 91, j.Seq, "key %s", j.Key)
		}
	}
}

// A large batch that is not all appends (one event is below a queued job of its key, one
// repeats a stored event) goes the statement's way and gets its answers: the repeat reported
// as a duplicate, the lower event made the head.
func TestEnqueueLargeBatchWithAnEventBelowItsKeyIsNotCopied(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ids := b.enqueue(t, "K", 5)
	events := []ordered.Event{{Key: "K", Seq: 5, Kind: "test", Payload: json.RawMessage(`{}`)}, {Key: "K", Seq: 3}}
	for s := range 200 {
		events = append(events, ordered.Event{Key: "other", Seq: int64(s)})
	}
	before := ordered.BatchesCopied(b.client)
	res, err := b.client.EnqueueMany(b.ctx, events)
	require.NoError(t, err)
	require.Equal(t, before, ordered.BatchesCopied(b.client))
	require.Equal(t, ordered.EnqueueResult{ID: ids[0], Duplicate: true}, res[0])
	require.False(t, res[1].Duplicate)
	require.Equal(t, int64(3), b.claimOne(t, b.client).Seq)
	require.EqualValues(t, 202, b.jobRowCount(t))
}
