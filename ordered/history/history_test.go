package history_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/history"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func id(key string, seq int64) history.ID { return history.ID{Key: key, Seq: seq} }

// clean is a history of key k, seqs 1..3, each started, applied and done in turn.
func clean() history.History {
	h := history.History{}
	for s := int64(1); s <= 3; s++ {
		h.Enqueued = append(h.Enqueued, id("k", s))
		h.Starts = append(h.Starts, history.Start{ID: id("k", s), ClaimVersion: 1, At: at(int(s) * 10)})
		h.Effects = append(h.Effects, history.Effect{ID: id("k", s), ClaimVersion: 1, Order: s})
		h.Jobs = append(h.Jobs, history.Job{ID: id("k", s), Status: "done", FinishedAt: at(int(s)*10 + 5)})
	}
	return h
}

func TestCleanHistory(t *testing.T) {
	t.Parallel()
	r := history.Check(clean())
	require.True(t, r.Clean(true), "%v", r.Problems)
	require.Equal(t, history.Report{Enqueued: 3, Completed: 3}, r)
}

func TestLostJob(t *testing.T) {
	t.Parallel()
	h := clean()
	h.Jobs = h.Jobs[:2] // k/3 has no job row
	r := history.Check(h)
	require.Equal(t, 1, r.Lost)
	require.False(t, r.Clean(false))

	h = clean()
	h.Jobs[2].Status = "queued" // never finished, nothing holds it
	r = history.Check(h)
	require.Equal(t, 1, r.Lost)

	h = clean()
	h.Effects = h.Effects[:2] // done, but its effect never took hold
	r = history.Check(h)
	require.Equal(t, 1, r.Lost)
}

func TestDuplicateEffect(t *testing.T) {
	t.Parallel()
	h := clean()
	h.Starts = append(h.Starts, history.Start{ID: id("k", 2), ClaimVersion: 2, At: at(22)})
	h.Effects = append(h.Effects, history.Effect{ID: id("k", 2), ClaimVersion: 2, Order: 2})
	r := history.Check(h)
	require.Equal(t, 1, r.DuplicateEffects)
	require.Equal(t, 1, r.ReExecutions)
	require.False(t, r.Clean(true), "a duplicate effect breaks a transactional run")
	require.True(t, r.Clean(false), "an at-least-once run may duplicate")
}

func TestReExecutionIsCountedNotAnError(t *testing.T) {
	t.Parallel()
	h := clean()
	h.Starts = append(h.Starts, history.Start{ID: id("k", 1), ClaimVersion: 2, At: at(12)})
	r := history.Check(h)
	require.Equal(t, 1, r.ReExecutions)
	require.True(t, r.Clean(true))
}

func TestLaterStartedBeforeEarlierFinished(t *testing.T) {
	t.Parallel()
	h := clean()
	h.Starts[2].At = at(24) // k/3 starts before k/2 finished at 25
	r := history.Check(h)
	require.Equal(t, 1, r.OrderInversions)
	require.False(t, r.Clean(false))
}

func TestConcurrentAttemptsOfOneKey(t *testing.T) {
	t.Parallel()
	h := clean()
	// k/2 retried, its second attempt overlapping k/3's.
	h.Starts = append(h.Starts, history.Start{ID: id("k", 2), ClaimVersion: 2, At: at(26)})
	h.Jobs[1].FinishedAt = at(40)
	r := history.Check(h)
	require.Equal(t, 1, r.OrderInversions) // k/3 started at 30, before k/2 finished at 40
}

func TestEffectsOutOfOrder(t *testing.T) {
	t.Parallel()
	h := clean()
	h.Effects[1].Order, h.Effects[2].Order = 3, 2
	r := history.Check(h)
	require.Equal(t, 1, r.OrderInversions)
}

func TestBlockedKeyHoldsLaterEvents(t *testing.T) {
	t.Parallel()
	h := clean()
	h.Effects = h.Effects[:1]
	h.Starts = h.Starts[:2]
	h.Jobs[1] = history.Job{ID: id("k", 2), Status: "blocked", FinishedAt: at(25)}
	h.Jobs[2] = history.Job{ID: id("k", 3), Status: "queued"}
	h.ExpectedFailures = []history.ID{id("k", 2)}
	r := history.Check(h)
	require.True(t, r.Clean(true), "%v", r.Problems)
	require.Equal(t, 1, r.Failed)
	require.Equal(t, 1, r.Held)
	require.Zero(t, r.Lost)

	// ... and a later event that ran anyway is an inversion.
	h.Starts = append(h.Starts, history.Start{ID: id("k", 3), ClaimVersion: 1, At: at(30)})
	r = history.Check(h)
	require.Equal(t, 1, r.OrderInversions)
}

func TestUnexpectedFailure(t *testing.T) {
	t.Parallel()
	h := clean()
	h.Effects = append(h.Effects[:1], h.Effects[2])
	h.Jobs[1] = history.Job{ID: id("k", 2), Status: "failed", FinishedAt: at(25)}
	r := history.Check(h)
	require.Equal(t, 1, r.UnexpectedFailures)
	require.False(t, r.Clean(true))
	h.ExpectedFailures = []history.ID{id("k", 2)}
	r = history.Check(h)
	require.True(t, r.Clean(true), "%v", r.Problems)
}

// Duplicates of one event are not out of order with each other, but a duplicate of an earlier
// event landing after a later event's effect is.
func TestDuplicateEffectLandingLate(t *testing.T) {
	t.Parallel()
	h := clean()
	h.Effects = append(h.Effects, history.Effect{ID: id("k", 2), ClaimVersion: 2, Order: 1}) // same event, earlier order
	h.Effects[1].Order = 2
	r := history.Check(h)
	require.Zero(t, r.OrderInversions, "%v", r.Problems)

	h = clean()
	h.Effects = append(h.Effects, history.Effect{ID: id("k", 1), ClaimVersion: 2, Order: 10}) // k/1 again, after k/3
	r = history.Check(h)
	require.Equal(t, 2, r.OrderInversions, "k/2 and k/3 both landed before k/1's duplicate")
}

// batchRun is key k, seqs 1..3, run by batch A (all three, its completion lost) and again by
// batch B, which completed them: starts and effects in seq order within each batch.
func batchRun() history.History {
	h := history.History{}
	for s := int64(1); s <= 3; s++ {
		h.Enqueued = append(h.Enqueued, id("k", s))
		h.Starts = append(h.Starts,
			history.Start{ID: id("k", s), ClaimVersion: 1, At: at(int(s)), Batch: "A"},
			history.Start{ID: id("k", s), ClaimVersion: 2, At: at(100 + int(s)), Batch: "B"})
		h.Effects = append(h.Effects,
			history.Effect{ID: id("k", s), ClaimVersion: 1, Order: s, Batch: "A"},
			history.Effect{ID: id("k", s), ClaimVersion: 2, Order: 10 + s, Batch: "B"})
		h.Jobs = append(h.Jobs, history.Job{ID: id("k", s), Status: "done", FinishedAt: at(200)})
	}
	return h
}

// A batch's jobs start before the earlier ones finish (they complete together), and a batch
// run again after its lost completion replays effects: neither is an inversion. A start or
// an effect outside the batch that ran the earlier event is.
func TestBatchesAreNotInversions(t *testing.T) {
	t.Parallel()
	r := history.Check(batchRun())
	require.True(t, r.Clean(false), "%v", r.Problems)
	require.Equal(t, 3, r.DuplicateEffects)

	h := batchRun()
	h.Starts[2].Batch = "C" // k/2's first start is not in A, where k/1 ran before it
	r = history.Check(h)
	require.Equal(t, 2, r.OrderInversions, "k/2 and k/3 (whose k/2 did not run in A): %v", r.Problems)

	h = batchRun()
	h.Effects[2].Batch = "" // k/2's first effect, before k/1's replay, was in no batch
	r = history.Check(h)
	require.Equal(t, 2, r.OrderInversions, "k/2 and k/3 (whose k/2 was not in A): %v", r.Problems)
}
