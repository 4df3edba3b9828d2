package ordered_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// Archive deletes done jobs in bounded batches, keeps failed ones, and a re-sent archived
// event is a no-op, not run again.
func TestArchiveDeletesDoneJobsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for k := range 5 {
		b.enqueue(t, fmt.Sprintf("k%d", k), 1, 2)
	}
	for range 5 {
		j := b.claimOne(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	failed := b.claimOne(t, b.client)
	_, err := b.client.Fail(b.ctx, failed, errors.New("poison"))
	require.NoError(t, err)

	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 0, b.countStatus(t, "done"))
	require.Equal(t, 1, b.countStatus(t, "blocked"))

	// Nothing recent is archived while a retention applies.
	j := b.claimOne(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{OlderThan: 1e12})
	require.NoError(t, err)
	require.Zero(t, n)

	res, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "k0", Seq: 1})
	require.NoError(t, err)
	require.Equal(t, ordered.EnqueueResult{Duplicate: true, Archived: true}, res)
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE key = 'k0'`))
}

// doneJobs enqueues one event on each of keys and completes it.
func (b *testBundle) doneJobs(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		b.enqueue(t, k, 1)
		require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	}
}

// Archive with All deletes every done job: batch after batch, going on in the keys a batch
// stopped in (a limit of one job a statement here), and waiting for another archiver's batch
// rather than passing and reporting nothing left. Its batches archive what finished before the
// walk began, not what finishes meanwhile, or a walk could go on as long as jobs finish.
func TestArchiveAllWaitsForAnotherArchiverAndDeletesEveryDoneJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.doneJobs(t, "a", "b", "c", "d", "e")

	other := b.beginTx(t) // another archiver, mid-batch: it holds the cursor
	var n int
	require.NoError(t, other.QueryRow(b.ctx, `SELECT deleted FROM ordered_archive('0', 1)`).Scan(&n))
	require.Equal(t, 1, n)
	var holder int
	require.NoError(t, other.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&holder))

	archived := make(chan int, 1)
	go func() {
		n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 1, All: true})
		assert.NoError(t, err)
		archived <- n
	}()
	waitFor(t, 30*time.Second, "the archive waiting for the other archiver", func() bool {
		return b.countRows(t, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))`, holder) > 0
	})
	b.doneJobs(t, "f") // after the walk began
	require.NoError(t, other.Commit(b.ctx))
	require.Equal(t, 4, <-archived)
	require.Equal(t, []string{"1:done:1"}, b.jobsOf(t, "f"))
	require.Equal(t, 1, b.countStatus(t, "done"))
}

// Archive with All, which waits for the archive cursor's row, fails when the row is gone
// rather than wait for ever; one batch passes, as when another archiver holds it.
func TestArchiveWithoutItsCursorRow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.doneJobs(t, "a")
	_, err := b.pool.Exec(b.ctx, `DELETE FROM ordered_archive_cursor`)
	require.NoError(t, err)
	_, err = b.client.Archive(b.ctx, ordered.ArchiveParams{All: true})
	require.ErrorContains(t, err, "the archive cursor has lost its row")
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{})
	require.NoError(t, err)
	require.Zero(t, n)
	_, err = b.pool.Exec(b.ctx, `INSERT INTO ordered_archive_cursor DEFAULT VALUES`)
	require.NoError(t, err)
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{All: true})
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// A walk from a key (ordered archive's) goes to the end of the keys whatever the workers'
// shared cursor says, and leaves it as it is: a batch stopped by its limit goes on from the
// first key of its step, one stopped after p_max_keys keys (at the end of a step of up to a
// thousand keys) from its last. The cursor's own walks go round the keys from the cursor.
func TestArchiveWalksFromAKeyApartFromTheCursor(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.doneJobs(t, "a", "b", "c")
	b.enqueue(t, "b", 2, 3)
	for range 2 {
		require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	}
	cursor := func() string {
		var after string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT after_key FROM ordered_archive_cursor`).Scan(&after))
		return after
	}
	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_archive_cursor SET after_key = 'b'`)
	require.NoError(t, err)
	walk := func(from string, limit int) []any {
		var deleted int
		var next *string
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT deleted, goes_on_after
			FROM ordered_archive('0', $1, p_from => $2, p_max_keys => 2)`, limit, from).Scan(&deleted, &next))
		return []any{deleted, next}
	}
	first, last := "", "c"
	require.Equal(t, []any{2, &first}, walk("", 2), "a/1 and b/1: the step again")
	require.Equal(t, []any{3, &last}, walk("", 5), "b/2, b/3 and c/1: past p_max_keys")
	require.Equal(t, []any{0, (*string)(nil)}, walk("c", 5), "the end")
	require.Equal(t, "b", cursor(), "the walks leave the cursor alone")
	require.Zero(t, b.countStatus(t, "done"))

	b.doneJobs(t, "d")
	var deleted int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT deleted FROM ordered_archive('0', 1000, p_max_keys => 1)`).Scan(&deleted))
	require.Equal(t, 1, deleted)
	require.Equal(t, "d", cursor(), "the cursor's walk stops after a step past p_max_keys")
}

// Archive with All deletes the done jobs of every key, those behind the workers' shared
// cursor too.
func TestArchiveAllWalksEveryKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.doneJobs(t, "a", "b", "c")
	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_archive_cursor SET after_key = 'b'`)
	require.NoError(t, err)
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{All: true})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Zero(t, b.countStatus(t, "done"))
}

// Archival passes over a key's failed jobs, however many: the done jobs above them are
// archived, in a batch smaller than the failed jobs below them.
func TestArchivePassesOverFailedJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, skipPolicyCfg())
	b.enqueue(t, "k", 1, 2, 3, 4, 5)
	for seq := range int64(3) {
		_, out := b.failNextHead(t, "k", seq+1, errors.New("poison"))
		require.Equal(t, ordered.OutcomeSkipped, out)
	}
	for range 2 {
		require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	}
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []string{"1:failed:1", "2:failed:1", "3:failed:1"}, b.jobsOf(t, "k"))
}

// An event at or below a key's archived history whose job is no longer stored is taken as
// archived: a no-op reported as Duplicate and Archived, with no id, whatever its content (it
// cannot be compared) and whether or not it was ever sent (that cannot be told), and it never
// runs. A job still stored at or below the watermark (a failed one) is compared as always. An
// event above the watermark is judged as always too: new behind a queued head, late below a
// started one, which the error names. On both forms.
func TestEnqueueAtOrBelowArchivedHistoryIsANoOp(t *testing.T) {
	t.Parallel()
	b := setup(t, skipPolicyCfg())
	ids := b.enqueue(t, "k", 1, 2, 4, 6, 9)
	require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	b.failNextHead(t, "k", 2, ordered.Permanent(errors.New("boom")))
	require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 2, n, "k/1 and k/4 archived, k/2 failed and kept")
	rows := b.jobRowCount(t)

	changed := validEvent("k", 4)
	changed.Payload, changed.Kind = json.RawMessage(`{"other":true}`), "other"
	archived := []ordered.Event{validEvent("k", 1), validEvent("k", 3), validEvent("k", 0), changed}
	archivedResults := []ordered.EnqueueResult{{Duplicate: true, Archived: true}, {Duplicate: true, Archived: true},
		{Duplicate: true, Archived: true}, {Duplicate: true, Archived: true}}
	for _, via := range b.enqueueForms(t) {
		res, err := via.many(t, archived)
		require.NoError(t, err, via.name)
		require.Equal(t, archivedResults, res, via.name)
		require.Equal(t, rows, b.jobRowCount(t), via.name)

		res, err = via.many(t, []ordered.Event{validEvent("k", 2)})
		require.NoError(t, err, via.name)
		require.Equal(t, []ordered.EnqueueResult{{ID: ids[1], Duplicate: true}}, res, "%s: a stored job is no archived one", via.name)
		other := validEvent("k", 2)
		other.Kind = "other"
		_, err = via.many(t, []ordered.Event{validEvent("k", 3), other})
		requireDuplicateConflict(t, err, 1, "k", 2, "kind", true)
	}

	// Mixed with new events, the archived ones write nothing.
	res, err := b.client.EnqueueMany(b.ctx, append([]ordered.Event{validEvent("k", 7), validEvent("j", 1)}, archived...))
	require.NoError(t, err)
	require.Equal(t, archivedResults, res[2:])
	require.False(t, res[0].Duplicate)
	require.False(t, res[1].Duplicate)
	require.Equal(t, rows+2, b.jobRowCount(t))

	// k/5, never sent, is above the watermark: below the queued k/6 it would be new; once k/6
	// has started it is late, also in a batch of archived events, and the error names k/6.
	jobs, err := b.client.Claim(b.ctx, 2)
	require.NoError(t, err)
	require.Len(t, jobs, 2)
	require.ElementsMatch(t, []int64{6, 1}, []int64{jobs[0].Seq, jobs[1].Seq})
	for _, via := range b.enqueueForms(t) {
		_, err = via.many(t, append(archived, validEvent("k", 5)))
		requireLateEvent(t, err, "k", 5, 6)
	}

	// None of the archived events ever became a job.
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE key = 'k' AND seq IN (0, 1, 3, 4)`))
}

// Beyond MaxBacklog queued jobs, enqueue fails with ErrBacklogFull and writes nothing.
func TestAdmissionLimitRefusesBeyondMaxBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.newClient(t, &ordered.Config{MaxBacklog: 5})
	_, err := c.EnqueueMany(b.ctx, []ordered.Event{{Key: "a", Seq: 1}, {Key: "a", Seq: 2}, {Key: "b", Seq: 1}})
	require.NoError(t, err)
	_, err = c.EnqueueMany(b.ctx, []ordered.Event{{Key: "c", Seq: 1}, {Key: "c", Seq: 2}, {Key: "c", Seq: 3}})
	require.ErrorIs(t, err, ordered.ErrBacklogFull)
	require.Equal(t, 3, b.countStatus(t, "queued"))
	_, err = c.EnqueueMany(b.ctx, []ordered.Event{{Key: "c", Seq: 1}, {Key: "c", Seq: 2}})
	require.NoError(t, err)
	_, err = c.Enqueue(b.ctx, ordered.Event{Key: "d", Seq: 1})
	require.ErrorIs(t, err, ordered.ErrBacklogFull)

	// Draining makes room again.
	j := b.claimOne(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))
	_, err = c.Enqueue(b.ctx, ordered.Event{Key: "d", Seq: 1})
	require.NoError(t, err)
}

// An event the queue already holds adds no job, so a full backlog admits it: a re-sent
// duplicate returns its job, an archived one its archived result, one that conflicts its
// conflict error, on every enqueue path. A batch with one new event among them is refused
// whole, and writes nothing.
func TestAdmissionLimitAdmitsEventsTheQueueHolds(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ids := b.enqueue(t, "a", 1, 2, 3)
	require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, n, "a/1 archived")
	require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	// a/2 done, a/3 queued: the backlog is full at one queued job.
	full := b.newClient(t, &ordered.Config{MaxBacklog: 1})
	db := b.openSQLDB(t)
	held := []ordered.Event{validEvent("a", 1), validEvent("a", 2), validEvent("a", 3)}
	heldResults := []ordered.EnqueueResult{{Duplicate: true, Archived: true}, {ID: ids[1], Duplicate: true}, {ID: ids[2], Duplicate: true}}
	conflicting := validEvent("a", 3)
	conflicting.Kind = "other"
	rows := b.jobRowCount(t)
	for name, enqueue := range map[string]func([]ordered.Event) ([]ordered.EnqueueResult, error){
		"pool": func(events []ordered.Event) ([]ordered.EnqueueResult, error) { return full.EnqueueMany(b.ctx, events) },
		"pgx transaction": func(events []ordered.Event) ([]ordered.EnqueueResult, error) {
			tx := b.beginTx(t)
			res, err := full.EnqueueManyTx(b.ctx, tx, events)
			if err != nil {
				return nil, err
			}
			return res, tx.Commit(b.ctx)
		},
		"database/sql transaction": func(events []ordered.Event) ([]ordered.EnqueueResult, error) {
			tx, err := db.BeginTx(b.ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback() //nolint:errcheck // a no-op after commit
			res, err := full.EnqueueManySQLTx(b.ctx, tx, events)
			if err != nil {
				return nil, err
			}
			return res, tx.Commit()
		},
	} {
		res, err := enqueue(held)
		require.NoError(t, err, name)
		require.Equal(t, heldResults, res, name)
		for _, ev := range held {
			res, err := enqueue([]ordered.Event{ev})
			require.NoError(t, err, "%s: %s/%d alone", name, ev.Key, ev.Seq)
			require.Len(t, res, 1)
			require.True(t, res[0].Duplicate, "%s: %s/%d alone", name, ev.Key, ev.Seq)
		}

		_, err = enqueue([]ordered.Event{validEvent("a", 2), conflicting})
		requireDuplicateConflict(t, err, 1, "a", 3, "kind", true)

		_, err = enqueue(append([]ordered.Event{validEvent("a", 4)}, held...))
		require.ErrorIs(t, err, ordered.ErrBacklogFull, name)
		_, err = enqueue([]ordered.Event{validEvent("b", 1)})
		require.ErrorIs(t, err, ordered.ErrBacklogFull, name)
		require.Equal(t, rows, b.jobRowCount(t), "%s: nothing written", name)
	}
}

// The gauges' counts read the whole table, so the workers of a queue share one count per
// interval: younger counts are returned as they are, and a caller that finds another one
// counting takes the last counts instead of waiting or counting again.
func TestSharedStatsCountOncePerInterval(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	shared := func(ctx context.Context, maxAge string) (queued int64, at time.Time) {
		t.Helper()
		require.NoError(t, b.pool.QueryRow(ctx,
			`SELECT queued, counted_at FROM ordered_stats_shared($1::interval)`, maxAge).Scan(&queued, &at))
		return queued, at
	}

	// Never counted, and another caller is at it: no counts yet, and no error.
	locker := b.beginTx(t)
	_, err := locker.Exec(b.ctx, `SELECT 1 FROM ordered_stats FOR UPDATE`)
	require.NoError(t, err)
	stats, err := store.QueueStatsShared(b.ctx, b.pool, 0)
	require.NoError(t, err)
	require.Nil(t, stats.CountedAt)
	require.NoError(t, locker.Rollback(b.ctx))

	b.enqueue(t, "a", 1, 2, 3)
	queued, first := shared(b.ctx, "1 hour")
	require.EqualValues(t, 3, queued, "never counted: counts now")

	b.enqueue(t, "b", 1, 2)
	queued, at := shared(b.ctx, "1 hour")
	require.EqualValues(t, 3, queued, "counts younger than the max age are shared")
	require.Equal(t, first, at)
	queued, at = shared(b.ctx, "0")
	require.EqualValues(t, 5, queued, "older ones are counted anew")
	require.True(t, at.After(first))

	// Another caller is counting: the last counts come back at once.
	tx := b.beginTx(t)
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM ordered_stats FOR UPDATE`)
	require.NoError(t, err)
	b.enqueue(t, "c", 1)
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	queued, _ = shared(ctx, "0")
	require.EqualValues(t, 5, queued)
	require.NoError(t, tx.Rollback(b.ctx))

	// A caller that cannot write (a read-only transaction) gets the last counts too.
	ro, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	var roQueued int64
	require.NoError(t, ro.QueryRow(b.ctx, `SELECT queued FROM ordered_stats_shared('0')`).Scan(&roQueued))
	require.EqualValues(t, 5, roQueued)
	require.NoError(t, ro.Rollback(b.ctx))

	queued, _ = shared(b.ctx, "0")
	require.EqualValues(t, 6, queued)

	// Client.Stats (ordered status) always counts now.
	now, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.EqualValues(t, 6, now.Queued)
}

// A worker's gauges show the shared counts, not a count of its own.
func TestWorkerGaugesShowSharedStats(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1)
	// Counts that stay young for an hour, and that no real count could give.
	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_stats SET queued = 777, blocked_keys = 5,
		counted_at = now() + interval '1 hour'`)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	startWorker(t, b, b.client, ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{PollInterval: 20 * time.Millisecond, MaintenanceInterval: 50 * time.Millisecond, Registerer: reg})
	waitFor(t, 10*time.Second, "queued gauge", func() bool {
		return metricValue(t, reg, "ordered_jobs", "status", "queued") == 777
	})
	require.Equal(t, 5.0, metricValue(t, reg, "ordered_blocked_keys"))
	var countedAt float64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT extract(epoch FROM counted_at)::float8 FROM ordered_stats`).Scan(&countedAt))
	require.InDelta(t, countedAt, metricValue(t, reg, "ordered_jobs_counted_timestamp_seconds"), 0.001)
}
