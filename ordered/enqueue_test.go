package ordered_test

import (
	"context"
	crand "crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/sourcegraph/conc/pool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// ---------------------------------------------------------------------------------------------
// Helpers of the enqueue and admin tests.

// overInt32 is math.MaxInt32 + 1 where int has 64 bits (and wraps to a negative elsewhere).
func overInt32() int {
	n := math.MaxInt32
	return n + 1
}

// validEvent is a valid event of key/seq with an empty JSON object as payload.
func validEvent(key string, seq int64) ordered.Event {
	return ordered.Event{Key: key, Seq: seq, Kind: "test", Payload: json.RawMessage(`{}`)}
}

// countRows runs a count(*) query on the bundle's schema.
func (b *testBundle) countRows(t *testing.T, query string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(b.ctx, query, args...).Scan(&n))
	return n
}

// jobRowCount is the number of rows of ordered_jobs.
func (b *testBundle) jobRowCount(t *testing.T) int64 {
	t.Helper()
	return b.countRows(t, `SELECT count(*) FROM ordered_jobs`)
}

// requireQueueEmpty asserts that neither queue table holds a row.
func (b *testBundle) requireQueueEmpty(t *testing.T, msgAndArgs ...any) {
	t.Helper()
	require.Zero(t, b.jobRowCount(t), msgAndArgs...)
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_keys`), msgAndArgs...)
}

// storedPayload reads a job's payload straight from the table.
func (b *testBundle) storedPayload(t *testing.T, id int64) string {
	t.Helper()
	var p string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT payload::text FROM ordered_jobs WHERE id = $1`, id).Scan(&p))
	return p
}

// claimWithin polls Claim until it returns a job or the deadline passes: for a job whose
// retry makes it available after a short backoff.
func (b *testBundle) claimWithin(t *testing.T, c *ordered.Client, within time.Duration) *ordered.Job {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		jobs, err := c.Claim(b.ctx, 1)
		require.NoError(t, err)
		if len(jobs) == 1 {
			return jobs[0]
		}
		require.Empty(t, jobs)
		if time.Now().After(deadline) {
			require.FailNow(t, "no job became claimable", "waited %v", within)
		}
		time.Sleep(time.Millisecond) // poll interval, not a wait for a race
	}
}

// beginTx begins a transaction on the bundle's pool that is rolled back when the test ends
// if it is still open, so a failed assertion never leaves a connection checked out (which would
// hang the pool's Close).
func (b *testBundle) beginTx(t *testing.T) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// requireLateEvent asserts that err is a late-event error naming key, seq and laterSeq.
func requireLateEvent(t *testing.T, err error, key string, seq, laterSeq int64) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ordered.ErrLateEvent)
	var late *ordered.LateEventError
	require.ErrorAs(t, err, &late)
	require.Equal(t, key, late.Key)
	require.Equal(t, seq, late.Seq)
	require.Equal(t, laterSeq, late.LaterSeq)
}

// openSQLDB opens a database/sql DB on the bundle's schema through pgx's database/sql driver
// and closes it when the test ends.
func (b *testBundle) openSQLDB(t *testing.T) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(b.queue.URL)
	require.NoError(t, err)
	db := sql.OpenDB(stdlib.GetConnector(*cfg))
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	require.NoError(t, db.PingContext(b.ctx))
	return db
}

// enqueueManySQL enqueues events with EnqueueManySQLTx in a database/sql transaction of its
// own, committed unless the enqueue fails.
func (b *testBundle) enqueueManySQL(db *sql.DB, events []ordered.Event) ([]ordered.EnqueueResult, error) {
	tx, err := db.BeginTx(b.ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after commit
	results, err := b.client.EnqueueManySQLTx(b.ctx, tx, events)
	if err != nil {
		return nil, err
	}
	return results, tx.Commit()
}

// ---------------------------------------------------------------------------------------------
// 1. Validation.

func TestEnqueueInvalidEventsAreRejectedAndWriteNothing(t *testing.T) {
	t.Parallel()
	const maxKey, maxPayload = 8, 32
	b := setup(t, &ordered.Config{MaxKeyBytes: maxKey, MaxPayloadBytes: maxPayload})

	bigPayload := json.RawMessage(`{"p":"` + strings.Repeat("x", maxPayload) + `"}`)
	require.True(t, json.Valid(bigPayload))

	cases := []struct {
		name  string
		ev    ordered.Event
		field string
	}{
		{"empty key", ordered.Event{Key: "", Seq: 1, Payload: json.RawMessage(`{}`)}, "key"},
		{"key over MaxKeyBytes", ordered.Event{Key: strings.Repeat("k", maxKey+1), Seq: 1}, "key"},
		// 5 runes but 10 bytes: the limit is in bytes.
		{"multibyte key over MaxKeyBytes", ordered.Event{Key: "ééééé", Seq: 1}, "key"},
		{"negative seq", ordered.Event{Key: "k", Seq: -1}, "seq"},
		// The seq after a key's last must fit a bigint.
		{"seq over MaxSeq", ordered.Event{Key: "k", Seq: ordered.MaxSeq + 1}, "seq"},
		{"payload not JSON", ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`{"a":`)}, "payload"},
		{"payload over MaxPayloadBytes", ordered.Event{Key: "k", Seq: 1, Payload: bigPayload}, "payload"},
		{"negative max_attempts", ordered.Event{Key: "k", Seq: 1, MaxAttempts: -1}, "max_attempts"},
		{"max_attempts over int32", ordered.Event{Key: "k", Seq: 1, MaxAttempts: overInt32()}, "max_attempts"},
		{"run_at after year 9999", ordered.Event{Key: "k", Seq: 1, RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "run_at"},
		// The years are UTC's, whatever offset the time is written with.
		{"run_at in year 9999 at its offset, 10000 in UTC", ordered.Event{Key: "k", Seq: 1, RunAt: time.Date(9999, 12, 31, 23, 30, 0, 0, time.FixedZone("", -3600))}, "run_at"},
		{"run_at in year 1 at its offset, 1 BC in UTC", ordered.Event{Key: "k", Seq: 1, RunAt: time.Date(1, 1, 1, 0, 30, 0, 0, time.FixedZone("", 3600))}, "run_at"},
	}

	requireInvalid := func(t *testing.T, name string, err error, index int, ev ordered.Event, field string) {
		t.Helper()
		require.Error(t, err, name)
		require.ErrorIs(t, err, ordered.ErrInvalidEvent, name)
		var inv *ordered.InvalidEventError
		require.ErrorAs(t, err, &inv, name)
		require.Equal(t, index, inv.Index, name)
		require.Equal(t, field, inv.Field, name)
		require.Equal(t, ev.Key, inv.Key, name)
		require.Equal(t, ev.Seq, inv.Seq, name)
		require.NotEmpty(t, inv.Reason, name)
		require.Contains(t, err.Error(), field, name)
	}

	for _, tc := range cases {
		// Alone.
		_, err := b.client.Enqueue(b.ctx, tc.ev)
		requireInvalid(t, tc.name+" (alone)", err, 0, tc.ev, tc.field)
		b.requireQueueEmpty(t, tc.name+" (alone)")

		// At index 2 of a batch of otherwise good events.
		batch := []ordered.Event{validEvent("good-a", 1), validEvent("good-a", 2), tc.ev, validEvent("good-b", 1), validEvent("good-b", 2), validEvent("good-c", 1)}
		res, err := b.client.EnqueueMany(b.ctx, batch)
		requireInvalid(t, tc.name+" (batch)", err, 2, tc.ev, tc.field)
		require.Nil(t, res, tc.name)
		b.requireQueueEmpty(t, tc.name+" (batch)")

		// Inside a caller's transaction the batch is refused the same way, and the transaction
		// is aborted, as by the database's refusals: the caller's own change cannot commit.
		tx := b.beginTx(t)
		_, err = tx.Exec(b.ctx, `CREATE TABLE app_effects (n int)`)
		require.NoError(t, err)
		_, err = b.client.EnqueueManyTx(b.ctx, tx, batch)
		requireInvalid(t, tc.name+" (tx)", err, 2, tc.ev, tc.field)
		require.Error(t, tx.Commit(b.ctx), "%s: the transaction is aborted", tc.name)
		require.Zero(t, b.countRows(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass('app_effects')`), tc.name)
		b.requireQueueEmpty(t, tc.name+" (tx)")
	}

	// An empty batch names the problem. (There is no event to point at, so it is not an
	// *InvalidEventError: only the sentinel is checked.)
	for _, empty := range [][]ordered.Event{nil, {}} {
		res, err := b.client.EnqueueMany(b.ctx, empty)
		require.ErrorIs(t, err, ordered.ErrInvalidEvent)
		require.Contains(t, err.Error(), "empty batch")
		require.Nil(t, res)
	}
	b.requireQueueEmpty(t, "empty batch")

	// The limits themselves are allowed: exactly MaxKeyBytes of key, MaxPayloadBytes of payload
	// as sent and as PostgreSQL writes it.
	atLimit := json.RawMessage(`{"p": "` + strings.Repeat("x", maxPayload-9) + `"}`)
	require.Len(t, atLimit, maxPayload)
	_, err := b.client.Enqueue(b.ctx, ordered.Event{Key: strings.Repeat("k", maxKey), Seq: 0, Payload: atLimit})
	require.NoError(t, err)
	require.EqualValues(t, 1, b.jobRowCount(t))
}

// ---------------------------------------------------------------------------------------------
// 2. Duplicates.

func TestEnqueueDuplicateReturnsExistingJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	orig := ordered.Event{Key: "k", Seq: 1, Kind: "orig", Payload: json.RawMessage(`{"v":1}`)}
	first, err := b.client.Enqueue(b.ctx, orig)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	require.NotZero(t, first.ID)

	again, err := b.client.Enqueue(b.ctx, orig)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.False(t, again.Archived)
	require.Equal(t, first.ID, again.ID)
	require.EqualValues(t, 1, b.jobRowCount(t))
	require.JSONEq(t, `{"v":1}`, b.storedPayload(t, first.ID))

	// A batch mixing new events and the existing one (its payload written otherwise).
	batch := []ordered.Event{
		{Key: "k", Seq: 2, Payload: json.RawMessage(`{"v":"k2"}`)},
		{Key: "k", Seq: 1, Kind: "orig", Payload: json.RawMessage(`{ "v": 1.0 }`)},
		{Key: "j", Seq: 1, Payload: json.RawMessage(`{"v":"j1"}`)},
		{Key: "k", Seq: 3, Payload: json.RawMessage(`{"v":"k3"}`)},
	}
	res, err := b.client.EnqueueMany(b.ctx, batch)
	require.NoError(t, err)
	require.Len(t, res, 4)
	require.Equal(t, []bool{false, true, false, false},
		[]bool{res[0].Duplicate, res[1].Duplicate, res[2].Duplicate, res[3].Duplicate})
	require.Equal(t, first.ID, res[1].ID)
	ids := map[int64]bool{res[0].ID: true, res[1].ID: true, res[2].ID: true, res[3].ID: true}
	require.Len(t, ids, 4, "every event has its own job")
	require.EqualValues(t, 4, b.jobRowCount(t))
	require.JSONEq(t, `{"v":1}`, b.storedPayload(t, first.ID))
	require.JSONEq(t, `{"v":"k2"}`, b.storedPayload(t, res[0].ID), "results follow the batch's order")
	require.JSONEq(t, `{"v":"j1"}`, b.storedPayload(t, res[2].ID))
	require.JSONEq(t, `{"v":"k3"}`, b.storedPayload(t, res[3].ID))

	// The same batch again is all duplicates, with the same ids.
	res2, err := b.client.EnqueueMany(b.ctx, batch)
	require.NoError(t, err)
	require.Len(t, res2, 4)
	for i := range res2 {
		require.True(t, res2[i].Duplicate, "event %d", i)
		require.Equal(t, res[i].ID, res2[i].ID, "event %d", i)
	}
	require.EqualValues(t, 4, b.jobRowCount(t))

	// The claimed job carries the original kind and payload.
	j := b.claimOne(t, b.client)
	if j.Key == "j" { // both heads are ready; take k's
		require.NoError(t, b.client.Complete(b.ctx, j))
		j = b.claimOne(t, b.client)
	}
	require.Equal(t, first.ID, j.ID)
	require.Equal(t, "orig", j.Kind)
	require.JSONEq(t, `{"v":1}`, string(j.Payload))
	require.NoError(t, b.client.Complete(b.ctx, j))

	// Enqueuing a finished event again is still a duplicate, not a late event, and changes nothing.
	again, err = b.client.Enqueue(b.ctx, orig)
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, "done", b.jobStatus(t, first.ID))
	require.EqualValues(t, 4, b.jobRowCount(t))
}

// enqueueVia is one of the two forms of an enqueue: pgx (typed arrays) or database/sql
// (JSON).
type enqueueVia struct {
	name string
	many func(t *testing.T, events []ordered.Event) ([]ordered.EnqueueResult, error)
}

// enqueueForms returns both forms of an enqueue on the bundle's queue.
func (b *testBundle) enqueueForms(t *testing.T) []enqueueVia {
	t.Helper()
	db := b.openSQLDB(t)
	return []enqueueVia{
		{"pgx", func(t *testing.T, events []ordered.Event) ([]ordered.EnqueueResult, error) {
			return b.client.EnqueueMany(b.ctx, events)
		}},
		{"sql", func(t *testing.T, events []ordered.Event) ([]ordered.EnqueueResult, error) {
			return b.enqueueManySQL(db, events)
		}},
	}
}

// requireDuplicateConflict asserts that err is a duplicate conflict naming index, key, seq,
// field and where the other event is.
func requireDuplicateConflict(t *testing.T, err error, index int, key string, seq int64, field string, stored bool) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ordered.ErrDuplicateConflict)
	var dup *ordered.DuplicateConflictError
	require.ErrorAs(t, err, &dup)
	require.Equal(t, ordered.DuplicateConflictError{Index: index, Key: key, Seq: seq, Field: field, Stored: stored}, *dup)
	require.True(t, strings.HasPrefix(err.Error(), "ordered: "), err.Error())
}

// dupBase is the event that the duplicate tests send again: every field set, run_at with
// nanoseconds (stored to the microsecond) and in the past, so that it can be claimed.
func dupBase(key string) ordered.Event {
	return ordered.Event{Key: key, Seq: 1, Kind: "orig", Payload: json.RawMessage(`{"a":1,"b":[true,null,"x"],"c":{"d":"é"}}`),
		RunAt: time.Date(2020, 1, 2, 3, 4, 5, 123456789, time.UTC)}
}

// sameAsDupBase are dupBase as other producers write it, all the same event: payload keys in
// another order, other whitespace and escapes, numbers written otherwise (jsonb equality);
// run_at in another zone and below PostgreSQL's microsecond; max_attempts as its default.
func sameAsDupBase(key string) map[string]ordered.Event {
	same := map[string]ordered.Event{"itself": dupBase(key)}
	ev := dupBase(key)
	ev.Payload = json.RawMessage("{ \"c\" : {\"d\":\"\\u00e9\"},\n \"b\": [ true, null, \"x\" ], \"a\": 10E-1 }")
	same["payload written otherwise"] = ev
	ev = dupBase(key)
	ev.RunAt = ev.RunAt.Add(-789).In(time.FixedZone("UTC+5", 5*3600))
	same["run_at in another zone"] = ev
	ev = dupBase(key)
	ev.MaxAttempts = ordered.MaxAttemptsDefault
	same["max_attempts as its default"] = ev
	return same
}

// differentFromDupBase are events with dupBase's (key, seq) whose content differs, each with
// the first field that differs.
func differentFromDupBase(key string) []dupDiff {
	with := func(field string, change func(ev *ordered.Event)) dupDiff {
		ev := dupBase(key)
		change(&ev)
		return dupDiff{field, ev}
	}
	return []dupDiff{
		with("payload", func(ev *ordered.Event) { ev.Payload = json.RawMessage(`{"a":2,"b":[true,null,"x"],"c":{"d":"é"}}`) }),
		with("payload", func(ev *ordered.Event) { ev.Payload = json.RawMessage(`{"a":1,"b":[null,true,"x"],"c":{"d":"é"}}`) }),
		with("payload", func(ev *ordered.Event) { ev.Payload = nil }), // JSON null
		with("kind", func(ev *ordered.Event) { ev.Kind = "other" }),
		with("run_at", func(ev *ordered.Event) { ev.RunAt = ev.RunAt.Add(time.Microsecond) }),
		with("run_at", func(ev *ordered.Event) { ev.RunAt = time.Time{} }), // now
		with("max_attempts", func(ev *ordered.Event) { ev.MaxAttempts = 7 }),
		with("kind", func(ev *ordered.Event) { ev.Kind, ev.MaxAttempts = "other", 7 }),
	}
}

// dupDiff is an event and the first field in which it differs from dupBase.
type dupDiff struct {
	field string
	ev    ordered.Event
}

// An identical duplicate is a no-op reported as Duplicate, whether it repeats an earlier
// event of its batch or a stored one in any state (queued, retried, running, done, failed,
// blocked): the same content by jsonb equality and after defaults, on both forms.
func TestEnqueueIdenticalDuplicateIsANoOp(t *testing.T) {
	t.Parallel()
	b := setup(t, skipPolicyCfg())
	blocking := b.newClient(t, blockPolicyCfg())
	forms := b.enqueueForms(t)

	// Within one batch.
	for _, via := range forms {
		for name, same := range sameAsDupBase("batch-" + via.name) {
			res, err := via.many(t, []ordered.Event{dupBase(same.Key), validEvent("other-"+via.name, 1), same})
			require.NoError(t, err, "%s: %s", via.name, name)
			require.Len(t, res, 3)
			require.True(t, res[2].Duplicate, "%s: %s", via.name, name)
			require.False(t, res[2].Archived)
			require.Equal(t, res[0].ID, res[2].ID, "%s: %s", via.name, name)
			_, err = b.pool.Exec(b.ctx, `DELETE FROM ordered_jobs; DELETE FROM ordered_heads`)
			require.NoError(t, err)
		}
	}

	stored := b.storeInEveryState(t, blocking)
	rows := b.jobRowCount(t)
	for _, via := range forms {
		for state, id := range stored {
			for name, same := range sameAsDupBase(state) {
				res, err := via.many(t, []ordered.Event{same})
				require.NoError(t, err, "%s: %s, %s", via.name, state, name)
				require.Equal(t, ordered.EnqueueResult{ID: id, Duplicate: true}, res[0], "%s: %s, %s", via.name, state, name)
			}
		}
	}
	require.Equal(t, rows, b.jobRowCount(t))
}

// storeInEveryState stores dupBase under a key named after each state a job can be in (a
// retried job is queued again, its available_at moved; blocked is failed under the block
// policy, which blocking has) and returns their ids by key.
func (b *testBundle) storeInEveryState(t *testing.T, blocking *ordered.Client) map[string]int64 {
	t.Helper()
	ids := map[string]int64{}
	next := func(key string) *ordered.Job {
		res, err := b.client.Enqueue(b.ctx, dupBase(key))
		require.NoError(t, err)
		ids[key] = res.ID
		j := b.claimOne(t, b.client)
		require.Equal(t, res.ID, j.ID)
		return j
	}
	next("running")
	require.NoError(t, b.client.Complete(b.ctx, next("done")))
	_, err := b.client.Fail(b.ctx, next("failed"), ordered.Permanent(errors.New("boom")))
	require.NoError(t, err)
	_, err = blocking.Fail(b.ctx, next("blocked"), ordered.Permanent(errors.New("boom")))
	require.NoError(t, err)
	_, err = b.client.RetryAfter(b.ctx, next("retried"), time.Hour, errors.New("again"))
	require.NoError(t, err)
	res, err := b.client.Enqueue(b.ctx, dupBase("queued"))
	require.NoError(t, err)
	ids["queued"] = res.ID
	for key, want := range map[string]string{"running": "running", "done": "done", "failed": "failed",
		"blocked": "blocked", "retried": "queued", "queued": "queued"} {
		require.Equal(t, want, b.jobStatus(t, ids[key]), key)
	}
	return ids
}

// A duplicate whose content differs is an error naming the event's index, key and seq, the
// first field that differs, and whether the other event is stored or earlier in the batch;
// the batch writes nothing. Within a batch and against a job in any state, on both forms.
func TestEnqueueDuplicateWithDifferentContentIsAnError(t *testing.T) {
	t.Parallel()
	b := setup(t, skipPolicyCfg())
	blocking := b.newClient(t, blockPolicyCfg())
	forms := b.enqueueForms(t)

	// Within one batch: nothing is sent.
	for _, via := range forms {
		for _, d := range differentFromDupBase("batch") {
			_, err := via.many(t, []ordered.Event{dupBase("batch"), validEvent("other", 1), d.ev})
			requireDuplicateConflict(t, err, 2, "batch", 1, d.field, false)
			require.Contains(t, err.Error(), "earlier in the same batch")
			b.requireQueueEmpty(t, "%s: %+v", via.name, d)
		}
	}
	err := b.client.Validate([]ordered.Event{dupBase("batch"), differentFromDupBase("batch")[3].ev})
	requireDuplicateConflict(t, err, 1, "batch", 1, "kind", false)

	// Against a stored job. The event is at index 2 of its batch and sent second (the repeat
	// of new/1 is sent once).
	stored := b.storeInEveryState(t, blocking)
	rows := b.jobRowCount(t)
	for _, via := range forms {
		for state := range stored {
			for _, d := range differentFromDupBase(state) {
				_, err := via.many(t, []ordered.Event{validEvent("new", 1), validEvent("new", 1), d.ev})
				requireDuplicateConflict(t, err, 2, state, 1, d.field, true)
				require.Contains(t, err.Error(), "already enqueued")
				require.Equal(t, rows, b.jobRowCount(t), "%s: %s, %+v", via.name, state, d)
			}
		}
	}
	require.Equal(t, rows, b.jobRowCount(t))
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE key = 'new'`))
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_keys WHERE key = 'new'`))
	for state, id := range stored {
		var kind, payload string
		var maxAttempts int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT kind, payload::text, max_attempts FROM ordered_jobs_now WHERE id = $1`,
			id).Scan(&kind, &payload, &maxAttempts))
		require.Equal(t, "orig", kind, state)
		require.JSONEq(t, string(dupBase(state).Payload), payload, state)
		require.Equal(t, ordered.MaxAttemptsDefault, maxAttempts, state)
	}
}

// sqlEnqueued is a row of ordered_enqueue_events or ordered_enqueue.
type sqlEnqueued struct {
	Ord       int32
	ID        *int64 // null: at or below the key's archived history
	Duplicate bool
}

// A caller of the SQL functions themselves (psql, another language) gets a conflicting
// duplicate as SQLSTATE ORD05 with a DETAIL that names the event; its transaction rolls back
// whole, its own changes with it. An identical duplicate is a no-op there too.
func TestEnqueueSQLFunctionsRaiseDuplicateConflict(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	first, err := b.client.Enqueue(b.ctx, dupBase("k"))
	require.NoError(t, err)
	const payload = `{"c": {"d": "\u00e9"}, "b": [true, null, "x"], "a": 1.0}`
	calls := map[string]string{
		"ordered_enqueue_events": `SELECT ord, id, duplicate FROM ordered_enqueue_events(ARRAY[
			ROW('new', 1, '', 'null'::jsonb, NULL, 3)::ordered_event,
			ROW('k', 1, 'orig', $1::jsonb, '2020-01-02 03:04:05.123456Z', $2)::ordered_event])`,
		"ordered_enqueue": `SELECT ord, id, duplicate FROM ordered_enqueue(jsonb_build_array(
			'{"key":"new","seq":1,"max_attempts":3}'::jsonb,
			jsonb_build_object('key', 'k', 'seq', 1, 'kind', 'orig', 'payload', $1::jsonb,
				'run_at', '2020-01-02T03:04:05.123456Z', 'max_attempts', $2::integer)))`,
	}
	for name, call := range calls {
		tx := b.beginTx(t)
		_, err := tx.Exec(b.ctx, `CREATE TABLE app_effects (n int)`)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, call, payload, 7)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, name)
		require.Equal(t, "ORD05", pgErr.Code, name)
		require.Equal(t, `ordered: duplicate event with different content: key k seq 1 is already enqueued with a different max_attempts`,
			pgErr.Message, name)
		require.JSONEq(t, `{"ord": 2, "key": "k", "seq": 1, "field": "max_attempts", "stored": true}`, pgErr.Detail, name)
		_, err = tx.Exec(b.ctx, `SELECT 1`)
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "25P02", pgErr.Code, "%s: the transaction is aborted", name)
		require.NoError(t, tx.Rollback(b.ctx))
		require.Zero(t, b.countRows(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass('app_effects')`))
		require.EqualValues(t, 1, b.jobRowCount(t), name)
		require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_keys WHERE key = 'new'`), name)

		rows, err := b.pool.Query(b.ctx, call, payload, ordered.MaxAttemptsDefault)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[sqlEnqueued])
		require.NoError(t, err, name)
		require.Len(t, got, 2)
		require.Equal(t, sqlEnqueued{Ord: 2, ID: &first.ID, Duplicate: true}, got[1], name)
		_, err = b.pool.Exec(b.ctx, `DELETE FROM ordered_jobs WHERE key = 'new'; DELETE FROM ordered_heads WHERE key = 'new';
			DELETE FROM ordered_keys WHERE key = 'new'`)
		require.NoError(t, err)
	}
}

// A key of MaxKeyBytesMax bytes that do not compress is stored, by the Go client and by the
// SQL functions, and fits every index it enters; a larger limit is refused up front.
func TestLongestKeyFitsItsIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{MaxKeyBytes: ordered.MaxKeyBytesMax})
	random := func(tag string) string {
		raw := make([]byte, ordered.MaxKeyBytesMax)
		_, err := crand.Read(raw)
		require.NoError(t, err)
		return (tag + base64.StdEncoding.EncodeToString(raw))[:ordered.MaxKeyBytesMax]
	}
	_, err := b.client.Enqueue(b.ctx, ordered.Event{Key: random("go"), Seq: 1})
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `SELECT * FROM ordered_enqueue(jsonb_build_array(jsonb_build_object('key', $1::text, 'seq', 1)),
		p_max_key_bytes => $2)`, random("sql"), ordered.MaxKeyBytesMax)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `SELECT * FROM ordered_enqueue('[{"key":"k","seq":1}]', p_max_key_bytes => $1)`,
		ordered.MaxKeyBytesMax+1)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "22023", pgErr.Code)
	require.EqualValues(t, 2, b.jobRowCount(t))
	require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)), "a head and a done job with the key")
}

// Called qualified with its schema, an enqueue function enqueues to that schema's queue
// whatever the caller's search_path: with another queue first on it, or no queue on it at all.
func TestEnqueueSQLFunctionsRunInTheirQueuesSchema(t *testing.T) {
	t.Parallel()
	a, b := setup(t, nil), setup(t, nil)
	qb := pgx.Identifier{b.queue.Schema}.Sanitize()
	conn, err := a.pool.Acquire(a.ctx) // its search_path: a's schema
	require.NoError(t, err)
	defer conn.Release()
	for seq, path := range map[int64]string{1: "", 2: "pg_catalog"} {
		if path != "" {
			_, err := conn.Exec(a.ctx, `SELECT set_config('search_path', $1, false)`, path)
			require.NoError(t, err)
		}
		_, err := conn.Exec(a.ctx, `SELECT * FROM `+qb+`.ordered_enqueue($1::jsonb)`,
			fmt.Sprintf(`[{"key":"json","seq":%d}]`, seq))
		require.NoError(t, err, "search_path %q", path)
		_, err = conn.Exec(a.ctx, `SELECT * FROM `+qb+`.ordered_enqueue_events(
			ARRAY[ROW('rows', $1::bigint, NULL, NULL, NULL, NULL)::`+qb+`.ordered_event])`, seq)
		require.NoError(t, err, "search_path %q", path)
		_, err = conn.Exec(a.ctx, `RESET search_path`)
		require.NoError(t, err)
	}
	require.Zero(t, a.jobRowCount(t), "enqueued to the queue first on the search_path")
	for _, key := range []string{"json", "rows"} {
		require.Equal(t, []string{"1:queued:0", "2:queued:0"}, b.jobsOf(t, key))
	}
}

// ordered_enqueue names a number of the wrong form by its form: an integer of any length
// beyond the column's range is out of range, as the CLI says, and a number with a fraction
// is not an integer.
func TestEnqueueSQLJSONNamesNumbersOutOfRange(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct{ event, field, problem string }{
		{`{"key":"a","seq":9223372036854775807}`, "seq", "out of range (0 to 9223372036854775806)"},
		{`{"key":"a","seq":9223372036854775808}`, "seq", "out of range (0 to 9223372036854775806)"},
		{`{"key":"a","seq":123456789012345678901234567890}`, "seq", "out of range (0 to 9223372036854775806)"},
		{`{"key":"a","seq":-9223372036854775809}`, "seq", "out of range (0 to 9223372036854775806)"},
		{`{"key":"a","seq":1.5}`, "seq", "not an integer"},
		{`{"key":"a","seq":7.0}`, "seq", "not an integer"},
		{`{"key":"a","seq":1,"max_attempts":123456789012345678901234567890}`, "max_attempts",
			"123456789012345678901234567890, over the limit of 2147483647"},
		{`{"key":"a","seq":1,"max_attempts":-123456789012345678901234567890}`, "max_attempts", "negative"},
		{`{"key":"a","seq":1,"max_attempts":2.5}`, "max_attempts", "not an integer"},
	} {
		_, err := b.pool.Exec(b.ctx, `SELECT * FROM ordered_enqueue(('[' || $1 || ']')::jsonb)`, tc.event)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, tc.event)
		var detail struct{ Field, Problem string }
		require.NoError(t, json.Unmarshal([]byte(pgErr.Detail), &detail), tc.event)
		require.Equal(t, tc.field, detail.Field, tc.event)
		require.Equal(t, tc.problem, detail.Problem, tc.event)
	}
	require.Zero(t, b.jobRowCount(t))
}

// In the caller's transaction a conflicting duplicate aborts the transaction, as every
// enqueue error does: the caller's own changes roll back with the batch.
func TestEnqueueTxDuplicateConflictAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.client.Enqueue(b.ctx, dupBase("k"))
	require.NoError(t, err)
	tx := b.beginTx(t)
	_, err = tx.Exec(b.ctx, `CREATE TABLE app_effects (n int)`)
	require.NoError(t, err)
	ev := dupBase("k")
	ev.Kind = "other"
	_, err = b.client.EnqueueManyTx(b.ctx, tx, []ordered.Event{validEvent("new", 1), ev})
	requireDuplicateConflict(t, err, 1, "k", 1, "kind", true)
	_, err = tx.Exec(b.ctx, `SELECT 1`)
	require.Error(t, err, "the transaction is aborted")
	require.NoError(t, tx.Rollback(b.ctx))
	require.EqualValues(t, 1, b.jobRowCount(t))
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass('app_effects')`))
}

// Whatever refuses a batch in the caller's transaction, the client or the database, the
// transaction is aborted: a conflicting duplicate within the batch, an empty batch, a full
// backlog, a context already done; through pgx and database/sql alike. What the caller wrote
// beside the batch can then never commit without its events.
func TestEnqueueTxRefusedByTheClientAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	full := b.newClient(t, &ordered.Config{MaxBacklog: 1})
	_, err := b.client.Enqueue(b.ctx, validEvent("queued", 1))
	require.NoError(t, err)
	conflicting := validEvent("k", 1)
	conflicting.Kind = "other"
	done, cancel := context.WithCancel(b.ctx)
	cancel()
	db := b.openSQLDB(t)
	for _, tc := range []struct {
		name   string
		client *ordered.Client
		ctx    context.Context
		events []ordered.Event
		want   error
	}{
		{"duplicate conflict within the batch", b.client, b.ctx, []ordered.Event{validEvent("k", 1), conflicting}, ordered.ErrDuplicateConflict},
		{"empty batch", b.client, b.ctx, nil, ordered.ErrInvalidEvent},
		{"backlog full", full, b.ctx, []ordered.Event{validEvent("k", 1)}, ordered.ErrBacklogFull},
		{"context done", b.client, done, []ordered.Event{validEvent("k", 1)}, context.Canceled},
	} {
		tx := b.beginTx(t)
		_, err := tx.Exec(b.ctx, `CREATE TABLE app_effects (n int)`)
		require.NoError(t, err)
		_, err = tc.client.EnqueueManyTx(tc.ctx, tx, tc.events)
		require.ErrorIs(t, err, tc.want, tc.name)
		require.Error(t, tx.Commit(b.ctx), "%s (pgx): the transaction is aborted", tc.name)

		sqlTx, err := db.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		_, err = sqlTx.ExecContext(b.ctx, `CREATE TABLE app_effects (n int)`)
		require.NoError(t, err)
		_, err = tc.client.EnqueueManySQLTx(tc.ctx, sqlTx, tc.events)
		require.ErrorIs(t, err, tc.want, tc.name)
		require.Error(t, sqlTx.Commit(), "%s (database/sql): the transaction is aborted", tc.name)

		require.Zero(t, b.countRows(t, `SELECT count(*) FROM pg_class WHERE oid = to_regclass('app_effects')`), tc.name)
		require.EqualValues(t, 1, b.jobRowCount(t), tc.name)
	}
}

// Producers that send the same events at once store each event once and all get its id, while
// a worker finishes jobs in between, so repeats find events queued, running and done. (key,
// seq) has no unique index of its own: the key lock and the lookup in open and finished jobs
// keep it unique.
func TestConcurrentEnqueuesOfTheSameEventsStoreEachOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const producers, rounds, keys, perRound = 6, 12, 8, 4

	finisher, stopFinisher := context.WithCancel(b.ctx)
	finished := make(chan error, 1)
	go func() {
		for finisher.Err() == nil {
			jobs, err := b.client.Claim(finisher, 4)
			if err == nil && len(jobs) > 0 {
				_, err = b.client.CompleteMany(finisher, jobs)
			}
			if err != nil && finisher.Err() == nil {
				finished <- err
				return
			}
			if len(jobs) == 0 {
				time.Sleep(time.Millisecond) // nothing ready: don't spin on the server
			}
		}
		finished <- nil
	}()

	for round := range rounds {
		events := make([]ordered.Event, 0, keys*perRound)
		for k := range keys {
			for s := range perRound {
				events = append(events, validEvent(fmt.Sprintf("k%d", k), int64(round*perRound+s)))
			}
		}
		ids := make([][]int64, producers)
		errs := make(chan error, producers)
		start := make(chan struct{})
		for p := range producers {
			batch := slices.Clone(events)
			rand.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			go func() {
				<-start
				res, err := b.client.EnqueueMany(b.ctx, batch)
				if err == nil {
					byEvent := make(map[string]int64, len(res))
					for i, r := range res {
						byEvent[fmt.Sprintf("%s/%d", batch[i].Key, batch[i].Seq)] = r.ID
					}
					ids[p] = make([]int64, len(events))
					for i, e := range events {
						ids[p][i] = byEvent[fmt.Sprintf("%s/%d", e.Key, e.Seq)]
					}
				}
				errs <- err
			}()
		}
		close(start)
		for range producers {
			require.NoError(t, <-errs, "round %d", round)
		}
		for p := 1; p < producers; p++ {
			require.Equal(t, ids[0], ids[p], "round %d: producer %d got other ids", round, p)
		}

		// Once some of the round's jobs are done, the round again is all duplicates.
		require.Eventually(t, func() bool {
			return b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE status = 'done' AND seq >= $1`,
				round*perRound) > 0
		}, time.Minute, time.Millisecond)
		res, err := b.client.EnqueueMany(b.ctx, events)
		require.NoError(t, err)
		for i, r := range res {
			require.True(t, r.Duplicate, "round %d event %d", round, i)
			require.Equal(t, ids[0][i], r.ID, "round %d event %d", round, i)
		}
	}
	stopFinisher()
	require.NoError(t, <-finished)

	require.EqualValues(t, rounds*keys*perRound, b.jobRowCount(t))
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM (
		SELECT 1 FROM ordered_jobs_now GROUP BY key, seq HAVING count(*) > 1) AS d`))
}

// Producers that send the same events at once, each with a payload of its own: exactly one
// batch is stored, whole, and every other gets the conflict (never a unique violation, never
// a silent no-op), while a worker finishes jobs in between, so that later rounds meet earlier
// ones queued, running and done. Sent again, the winner's batch is all duplicates.
func TestConcurrentEnqueuesOfTheSameEventsWithDifferentContentOneWins(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const producers, rounds, keys, perRound = 6, 8, 8, 4

	finisher, stopFinisher := context.WithCancel(b.ctx)
	finished := make(chan error, 1)
	go func() {
		for finisher.Err() == nil {
			jobs, err := b.client.Claim(finisher, 4)
			if err == nil && len(jobs) > 0 {
				_, err = b.client.CompleteMany(finisher, jobs)
			}
			if err != nil && finisher.Err() == nil {
				finished <- err
				return
			}
			if len(jobs) == 0 {
				time.Sleep(time.Millisecond) // nothing ready: don't spin on the server
			}
		}
		finished <- nil
	}()

	for round := range rounds {
		batches := make([][]ordered.Event, producers)
		for p := range producers {
			for k := range keys {
				for s := range perRound {
					batches[p] = append(batches[p], ordered.Event{Key: fmt.Sprintf("k%d", k), Seq: int64(round*perRound + s),
						Payload: json.RawMessage(fmt.Sprintf(`{"producer":%d}`, p))})
				}
			}
			rand.Shuffle(len(batches[p]), func(i, j int) { batches[p][i], batches[p][j] = batches[p][j], batches[p][i] })
		}
		errs := make([]error, producers)
		done := make(chan struct{}, producers)
		start := make(chan struct{})
		for p := range producers {
			go func() {
				defer func() { done <- struct{}{} }()
				<-start
				_, errs[p] = b.client.EnqueueMany(b.ctx, batches[p])
			}()
		}
		close(start)
		for range producers {
			<-done
		}
		winner := -1
		for p, err := range errs {
			if err == nil {
				require.Equal(t, -1, winner, "round %d: producers %d and %d both stored their batch", round, winner, p)
				winner = p
				continue
			}
			var dup *ordered.DuplicateConflictError
			require.ErrorAs(t, err, &dup, "round %d producer %d", round, p)
			require.Equal(t, "payload", dup.Field)
			require.True(t, dup.Stored)
			require.Equal(t, batches[p][dup.Index].Key, dup.Key)
			require.Equal(t, batches[p][dup.Index].Seq, dup.Seq)
		}
		require.NotEqual(t, -1, winner, "round %d: no batch was stored", round)
		require.EqualValues(t, keys*perRound, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now
			WHERE seq >= $1 AND payload = jsonb_build_object('producer', $2::int)`, round*perRound, winner),
			"round %d: the winner's batch is stored whole", round)

		res, err := b.client.EnqueueMany(b.ctx, batches[winner])
		require.NoError(t, err)
		for i, r := range res {
			require.True(t, r.Duplicate, "round %d event %d", round, i)
		}
	}
	stopFinisher()
	require.NoError(t, <-finished)

	require.EqualValues(t, rounds*keys*perRound, b.jobRowCount(t))
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM (
		SELECT 1 FROM ordered_jobs_now GROUP BY key, seq HAVING count(*) > 1) AS d`))
}

// Two transactions enqueue one (key, seq) at once, with different contents: the second waits
// for the first. In READ COMMITTED it then gets the conflict (or, had the first rolled back,
// stores its own event); in REPEATABLE READ and SERIALIZABLE a serialization failure, and the
// conflict when retried. The same content is a duplicate of the first's job instead.
func TestEnqueueTxSameEventAtOnceTheSecondMeetsTheFirst(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		for _, outcome := range []string{"conflict", "duplicate", "first rolled back"} {
			t.Run(string(iso)+" "+outcome, func(t *testing.T) {
				t.Parallel()
				b := setup(t, nil)
				begin := func() pgx.Tx {
					tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
					require.NoError(t, err)
					t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
					return tx
				}
				firstEv, secondEv := dupBase("k"), dupBase("k")
				if outcome != "duplicate" {
					secondEv.Payload = json.RawMessage(`{"second":true}`)
				}
				first := begin()
				firstRes, err := b.client.EnqueueTx(b.ctx, first, firstEv)
				require.NoError(t, err)

				second := begin()
				type answer struct {
					res ordered.EnqueueResult
					err error
				}
				answered := make(chan answer, 1)
				go func() {
					res, err := b.client.EnqueueTx(b.ctx, second, secondEv)
					answered <- answer{res, err}
				}()
				require.Eventually(t, func() bool {
					// the single enqueue's statement, named by its first line, or the COPY path's
					return b.statementsBlockedBy(t, first, "INSERT INTO ordered_keys AS k|ordered_enqueue") == 1
				}, time.Minute, time.Millisecond, "the second enqueue waits for the first")
				if outcome == "first rolled back" {
					require.NoError(t, first.Rollback(b.ctx))
				} else {
					require.NoError(t, first.Commit(b.ctx))
				}
				got := <-answered

				if iso != pgx.ReadCommitted && outcome != "first rolled back" {
					requireSerializationFailure(t, got.err)
					require.NoError(t, second.Rollback(b.ctx))
					second = begin()
					got.res, got.err = b.client.EnqueueTx(b.ctx, second, secondEv)
				}
				switch outcome {
				case "conflict":
					requireDuplicateConflict(t, got.err, 0, "k", 1, "payload", true)
				case "duplicate":
					require.NoError(t, got.err)
					require.Equal(t, ordered.EnqueueResult{ID: firstRes.ID, Duplicate: true}, got.res)
				case "first rolled back":
					require.NoError(t, got.err)
					require.False(t, got.res.Duplicate)
				}
				_ = second.Commit(b.ctx)
				require.EqualValues(t, 1, b.jobRowCount(t))
				want := firstEv.Payload
				if outcome == "first rolled back" {
					want = secondEv.Payload
				}
				j := b.claimOne(t, b.client)
				require.JSONEq(t, string(want), string(j.Payload))
			})
		}
	}
}

// badHeadsSQL counts, in one snapshot, the keys whose open jobs do not have exactly one head,
// the lowest of them, and the finished jobs a head row still points at. It reads each job's
// own row status (row_status): a job row is open (queued or blocked) or finished, and a head
// row that points at a finished job would show it running.
const badHeadsSQL = `SELECT
	(SELECT count(*) FROM (
		SELECT 1 FROM ordered_jobs_now WHERE row_status IN ('queued', 'blocked')
		GROUP BY key
		HAVING count(*) FILTER (WHERE head) <> 1
		    OR min(seq) IS DISTINCT FROM min(seq) FILTER (WHERE head)) AS bad)
	+ (SELECT count(*) FROM ordered_jobs_now WHERE head AND row_status IN ('done', 'failed'))`

// Every committed state has one head per key with open jobs, its lowest, while producers
// append behind heads, send events below queued heads, and a worker finishes the keys' jobs.
func TestHeadIsTheLowestOpenJobUnderConcurrentEnqueues(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const producers, rounds, keys = 4, 40, 10
	// Handlers slow enough that heads often wait queued, so events arrive below them.
	startWorker(t, b, b.client, ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
		time.Sleep(2 * time.Millisecond)
		return nil
	}), &ordered.WorkerConfig{Workers: 4, PollInterval: 20 * time.Millisecond})

	stopChecking := b.checkHeads(t)
	producing := pool.New().WithErrors()
	for p := range producers {
		producing.Go(func() error {
			// Producer p sends seq round*producers+p to every key, so each key's events
			// arrive interleaved: mostly behind its head, at times below a queued one, and
			// late when a higher seq of the key already started. Producer 0 also sends keys
			// of its own from the top down, due in an hour: each event lands below the key's
			// queued head and must take it.
			for round := range rounds {
				evs := make([]ordered.Event, keys)
				for k := range evs {
					evs[k] = validEvent(fmt.Sprintf("k%d", k), int64(round*producers+p))
				}
				if _, err := b.client.EnqueueMany(b.ctx, evs); err != nil && !errors.Is(err, ordered.ErrLateEvent) {
					return err
				}
				if p != 0 {
					continue
				}
				for k := range evs {
					evs[k] = validEvent(fmt.Sprintf("down%d", k), int64(rounds-round))
					evs[k].RunAt = time.Now().Add(time.Hour)
				}
				if _, err := b.client.EnqueueMany(b.ctx, evs); err != nil {
					return err
				}
			}
			return nil
		})
	}
	require.NoError(t, producing.Wait())
	require.Zero(t, stopChecking(), "a committed state had a key without one head at its lowest open job")
	require.Zero(t, b.countRows(t, badHeadsSQL))
}

// checkHeads counts the keys that break the head rules (badHeadsSQL), over and over, until
// the function it returns is called (or the test ends); that returns the sum.
func (b *testBundle) checkHeads(t *testing.T) (stop func() int64) {
	t.Helper()
	checking, stopChecking := context.WithCancel(b.ctx)
	checked := make(chan int64, 1)
	go func() {
		var bad, checks int64
		for checking.Err() == nil {
			var n int64
			if err := b.pool.QueryRow(checking, badHeadsSQL).Scan(&n); err == nil {
				bad, checks = bad+n, checks+1
			}
		}
		t.Logf("%d checks of the heads during the run", checks)
		checked <- bad
	}()
	stop = sync.OnceValue(func() int64 {
		stopChecking()
		return <-checked
	})
	t.Cleanup(func() { stop() }) // a test that fails first still ends the checker within it
	return stop
}

// Every committed state has one head per key with open jobs while producers append single
// events (one statement each) to keys that a worker keeps draining: appends meet heads that
// are running, being handed on and being deleted. The producers enqueue through every form of
// a single append: Enqueue in its own transaction; EnqueueTx in REPEATABLE READ and
// SERIALIZABLE after a first read, so their snapshots are often stale (they retry what fails
// with a serialization failure); and the SQL function, in READ COMMITTED and REPEATABLE READ.
// Every job runs, so no key is left with an open job and no head.
func TestHeadUnderSingleAppendsToKeysBeingDrained(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const forms, perForm, perProducer, keys = 5, 2, 150, 2
	startWorker(t, b, b.client, ordered.HandlerFunc(func(context.Context, *ordered.Job) error { return nil }),
		&ordered.WorkerConfig{Workers: 6, PollInterval: 10 * time.Millisecond})

	// inTx runs enqueue in a transaction at level that has read before it, paused a little
	// while other transactions commit.
	inTx := func(level pgx.TxIsoLevel, enqueue func(tx pgx.Tx) error) error {
		tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck // a no-op after commit
		if _, err := tx.Exec(b.ctx, `SELECT count(*) FROM ordered_heads`); err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		if err := enqueue(tx); err != nil {
			return err
		}
		return tx.Commit(b.ctx)
	}
	viaSQL := func(ev ordered.Event) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(b.ctx, `SELECT ordered_enqueue($1::jsonb)`,
				fmt.Sprintf(`[{"key":%q,"seq":%d,"kind":"test","payload":{}}]`, ev.Key, ev.Seq))
			return err
		}
	}
	enqueue := func(form int, ev ordered.Event) error {
		switch form {
		case 0:
			_, err := b.client.Enqueue(b.ctx, ev)
			return err
		case 1, 2:
			return inTx(map[int]pgx.TxIsoLevel{1: pgx.RepeatableRead, 2: pgx.Serializable}[form], func(tx pgx.Tx) error {
				_, err := b.client.EnqueueTx(b.ctx, tx, ev)
				return err
			})
		case 3:
			return inTx(pgx.ReadCommitted, viaSQL(ev))
		default:
			return inTx(pgx.RepeatableRead, viaSQL(ev))
		}
	}

	stopChecking := b.checkHeads(t)
	var retries atomic.Int64
	producing := pool.New().WithErrors()
	for p := range forms * perForm {
		producing.Go(func() error {
			// Producer p owns its keys and appends to them in turn, one event a call.
			for i := range perProducer {
				ev := validEvent(fmt.Sprintf("p%d-k%d", p, i%keys), int64(i/keys))
				for {
					err := enqueue(p%forms, ev)
					var pgErr *pgconn.PgError
					if errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01") {
						retries.Add(1)
						continue
					}
					if err != nil {
						return fmt.Errorf("form %d, %s/%d: %w", p%forms, ev.Key, ev.Seq, err)
					}
					break
				}
			}
			return nil
		})
	}
	require.NoError(t, producing.Wait())
	waitFor(t, time.Minute, "every job done", func() bool {
		return b.countRows(t, `SELECT count(*) FROM ordered_jobs WHERE status <> 'done'`) == 0
	})
	t.Logf("%d enqueues retried after a serialization failure or a deadlock", retries.Load())
	require.Zero(t, stopChecking(), "a committed state had a key without one head at its lowest open job")
	require.Equal(t, int64(forms*perForm*perProducer), b.countRows(t, `SELECT count(*) FROM ordered_jobs`))
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_heads`))
}

// An append whose snapshot still shows its key's head, which a completion deletes (the key's
// last open job) and commits while the append waits for the key row, makes its job the key's
// head: the key is not left with an open job and no head. Through each driver.
func TestEnqueueAppendToAKeyEmptiedAfterItsSnapshotBecomesTheHead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for i, form := range b.enqueueForms(t) {
		t.Run(form.name, func(t *testing.T) {
			key := fmt.Sprintf("emptied-%d", i)
			b.enqueue(t, key, 1)
			running := b.claimOne(t, b.client)
			require.Equal(t, key, running.Key)

			completion, err := b.pool.Begin(b.ctx)
			require.NoError(t, err)
			t.Cleanup(func() { _ = completion.Rollback(context.Background()) })
			require.NoError(t, b.client.CompleteTx(b.ctx, completion, running))
			require.Equal(t, int64(1), b.countRows(t, `SELECT count(*) FROM ordered_heads WHERE key = $1`, key),
				"the head is gone for others only when the completion commits")

			enqueued := make(chan error, 1)
			go func() {
				_, err := form.many(t, []ordered.Event{validEvent(key, 2)})
				enqueued <- err
			}()
			waitFor(t, 10*time.Second, "the enqueue waiting for the key row", func() bool {
				return b.statementsBlockedBy(t, completion, "INSERT INTO ordered_keys AS k|ordered_enqueue") == 1
			})
			require.NoError(t, completion.Commit(b.ctx))
			require.NoError(t, <-enqueued)

			require.Zero(t, b.countRows(t, badHeadsSQL), "a key with an open job and no head")
			next := b.claimOne(t, b.client)
			require.Equal(t, key, next.Key)
			require.Equal(t, int64(2), next.Seq)
			require.NoError(t, b.client.Complete(b.ctx, next))
		})
	}
}

// ---------------------------------------------------------------------------------------------
// 3. Late events.

func TestEnqueueLateEventAfterLaterJobStarted(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2)
	j := b.claimOne(t, b.client)
	require.EqualValues(t, 1, j.Seq)

	_, err := b.client.Enqueue(b.ctx, validEvent("k", 0))
	requireLateEvent(t, err, "k", 0, 1)
	require.Contains(t, err.Error(), `"k"`)
	require.EqualValues(t, 2, b.jobRowCount(t))

	// Still late once the started job went back to the queue for a retry.
	out, err := b.client.RetryAfter(b.ctx, j, time.Hour, errors.New("try later"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeRetried, out)
	_, err = b.client.Enqueue(b.ctx, validEvent("k", 0))
	requireLateEvent(t, err, "k", 0, 1)
	require.EqualValues(t, 2, b.jobRowCount(t))
}

func TestEnqueueLateEventAfterLaterJobDone(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1)
	j := b.claimOne(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))

	_, err := b.client.Enqueue(b.ctx, validEvent("k", 0))
	requireLateEvent(t, err, "k", 0, 1)
	require.EqualValues(t, 1, b.jobRowCount(t))
	b.claimNone(t, b.client)
}

func TestEnqueueBatchWithLateEventWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2)
	j := b.claimOne(t, b.client)
	require.EqualValues(t, 1, j.Seq)

	_, err := b.client.EnqueueMany(b.ctx, []ordered.Event{
		validEvent("other", 1), validEvent("k", 3), validEvent("k", 0), validEvent("other", 2),
	})
	requireLateEvent(t, err, "k", 0, 1)
	require.EqualValues(t, 2, b.jobRowCount(t))
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE key = 'other' OR seq IN (0, 3)`))
	require.Zero(t, b.countRows(t, `SELECT count(*) FROM ordered_keys WHERE key = 'other'`))

	// The key goes on as before: 1 then 2, and nothing else.
	require.NoError(t, b.client.Complete(b.ctx, j))
	j = b.claimOne(t, b.client)
	require.Equal(t, "k", j.Key)
	require.EqualValues(t, 2, j.Seq)
	require.NoError(t, b.client.Complete(b.ctx, j))
	b.claimNone(t, b.client)
}

func TestEnqueueBelowQueuedJobIsNotLate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 5)
	res, err := b.client.Enqueue(b.ctx, validEvent("k", 3))
	require.NoError(t, err)
	require.False(t, res.Duplicate)

	j := b.claimOne(t, b.client)
	require.EqualValues(t, 3, j.Seq, "the earlier seq runs first")
	require.Equal(t, res.ID, j.ID)
	b.claimNone(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))
	j = b.claimOne(t, b.client)
	require.EqualValues(t, 5, j.Seq)
	require.NoError(t, b.client.Complete(b.ctx, j))
	b.claimNone(t, b.client)
}

// A batch's duplicates are not checked for lateness: an event already finished is a no-op,
// also when it sits below the key's other finished jobs.
func TestEnqueueBatchWithFinishedDuplicateAndNewEventIsNotLate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ids := b.enqueue(t, "k", 1, 2)
	for range 2 {
		require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	}

	res, err := b.client.EnqueueMany(b.ctx, []ordered.Event{validEvent("k", 1), validEvent("k", 3)})
	require.NoError(t, err)
	require.True(t, res[0].Duplicate)
	require.Equal(t, ids[0], res[0].ID)
	require.False(t, res[1].Duplicate)
	require.EqualValues(t, 3, b.claimOne(t, b.client).Seq)
}

// holdJobWrites makes every write of a row of ordered_jobs (event INSERT or UPDATE) that
// matches when (a trigger's WHEN condition) wait inside the statement until gate, an open
// transaction holding an advisory lock, ends: a statement can be stopped at one point of its
// work while other clients act.
func (b *testBundle) holdJobWrites(t *testing.T, event, when string) (gate pgx.Tx) {
	t.Helper()
	lockID := rand.Int64()
	gate, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gate.Rollback(context.Background()) })
	_, err = gate.Exec(b.ctx, "SELECT pg_advisory_xact_lock($1)", lockID)
	require.NoError(t, err)
	// Test-made SQL: the event, condition and number are this file's constants.
	_, err = b.pool.Exec(b.ctx, fmt.Sprintf(`
		CREATE FUNCTION hold_job_writes() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_advisory_xact_lock(%d);
			RETURN NEW;
		END $$;
		CREATE TRIGGER hold_job_writes BEFORE %s ON ordered_jobs
			FOR EACH ROW WHEN (%s) EXECUTE FUNCTION hold_job_writes()`, lockID, event, when))
	require.NoError(t, err)
	return gate
}

// An event below a queued head is checked for lateness before it is inserted, and claims do not
// wait for the key row the enqueue holds: the head may be claimed and given back for a retry
// in between (a handler that failed at once). It has started then, so the event is late all
// the same. A trigger holds the enqueue inside its insert while that happens.
func TestEnqueueBelowAHeadThatStartedMeanwhileIsLate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	head := b.enqueue(t, "race", 10)[0]
	gate := b.holdJobWrites(t, "INSERT", "NEW.key = 'race'")

	enqueued := make(chan error, 1)
	go func() {
		_, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "race", Seq: 5, Payload: json.RawMessage(`{}`)})
		enqueued <- err
	}()
	waitFor(t, 10*time.Second, "the enqueue held in its insert", func() bool {
		return b.statementsBlockedBy(t, gate, "ordered_enqueue") == 1
	})
	job := b.claimOne(t, b.client)
	require.Equal(t, head, job.ID)
	outcome, err := b.client.Retry(b.ctx, job, errors.New("failed at once"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeRetried, outcome)
	require.NoError(t, gate.Rollback(b.ctx))

	requireLateEvent(t, <-enqueued, "race", 5, 10)
	var jobs, heads int
	var headID int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*), count(*) FILTER (WHERE head), max(id) FILTER (WHERE head)
		FROM ordered_jobs_now WHERE key = 'race'`).Scan(&jobs, &heads, &headID))
	require.Equal(t, 1, jobs, "the late event was written")
	require.Equal(t, 1, heads)
	require.Equal(t, head, headID, "the key's head is not the job that started")
}

// ---------------------------------------------------------------------------------------------
// 4. Out-of-order arrival.

func TestEnqueueOutOfOrderArrivalRunsInSeqOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, s := range []int64{5, 1, 3} {
		b.enqueue(t, "k", s)
	}
	require.EqualValues(t, 1, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE head`))

	for _, want := range []int64{1, 3, 5} {
		j := b.claimOne(t, b.client)
		require.Equal(t, want, j.Seq)
		b.claimNone(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	b.claimNone(t, b.client)
}

// ---------------------------------------------------------------------------------------------
// 5. Transactional enqueue.

func TestEnqueueTxFollowsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)

	// Rolled back: no job.
	tx := b.beginTx(t)
	res, err := b.client.EnqueueTx(b.ctx, tx, validEvent("k", 1))
	require.NoError(t, err)
	require.NotZero(t, res.ID)
	var inTx int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now`).Scan(&inTx))
	require.EqualValues(t, 1, inTx, "the job is visible inside the transaction")
	b.claimNone(t, b.client) // not before commit
	require.NoError(t, tx.Rollback(b.ctx))
	b.requireQueueEmpty(t)
	b.claimNone(t, b.client)

	// Committed with the caller's own change: claimable.
	tx = b.beginTx(t)
	_, err = tx.Exec(b.ctx, `CREATE TABLE app_effects (n int)`)
	require.NoError(t, err)
	res, err = b.client.EnqueueTx(b.ctx, tx, validEvent("k", 1))
	require.NoError(t, err)
	require.False(t, res.Duplicate)
	many, err := b.client.EnqueueManyTx(b.ctx, tx, []ordered.Event{validEvent("k", 2), validEvent("k", 1)})
	require.NoError(t, err)
	require.Len(t, many, 2)
	require.False(t, many[0].Duplicate)
	require.True(t, many[1].Duplicate)
	require.Equal(t, res.ID, many[1].ID)
	require.NoError(t, tx.Commit(b.ctx))

	j := b.claimOne(t, b.client)
	require.Equal(t, res.ID, j.ID)
	require.EqualValues(t, 1, j.Seq)
	require.NoError(t, b.client.Complete(b.ctx, j))
	j = b.claimOne(t, b.client)
	require.Equal(t, many[0].ID, j.ID)
	require.NoError(t, b.client.Complete(b.ctx, j))
	b.claimNone(t, b.client)
}

func TestEnqueueSQLTxFollowsTheCallersTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	db := b.openSQLDB(t)

	// Rolled back by the caller: nothing enqueued.
	tx, err := db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	rolledBack, err := b.client.EnqueueSQLTx(b.ctx, tx, validEvent("k", 1))
	require.NoError(t, err)
	require.NotZero(t, rolledBack.ID)
	require.NoError(t, tx.Rollback())
	b.requireQueueEmpty(t)
	b.claimNone(t, b.client)

	// Committed with the caller's own row: both there.
	tx, err = db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(b.ctx, "CREATE TABLE business_sql (id int)")
	require.NoError(t, err)
	_, err = tx.ExecContext(b.ctx, "INSERT INTO business_sql (id) VALUES ($1)", 1)
	require.NoError(t, err)
	committed, err := b.client.EnqueueSQLTx(b.ctx, tx, validEvent("k", 1))
	require.NoError(t, err)
	require.False(t, committed.Duplicate)
	require.NoError(t, tx.Commit())
	require.EqualValues(t, 1, b.jobRowCount(t))
	require.EqualValues(t, 1, b.countRows(t, "SELECT count(*) FROM business_sql"))

	j := b.claimOne(t, b.client)
	require.Equal(t, committed.ID, j.ID)

	// Errors from the database come back typed through database/sql too; the transaction is
	// aborted by them.
	tx, err = db.BeginTx(b.ctx, nil)
	require.NoError(t, err)
	_, err = b.client.EnqueueSQLTx(b.ctx, tx, validEvent("k", 0))
	requireLateEvent(t, err, "k", 0, 1)
	require.Error(t, tx.Commit())
	_, err = b.enqueueManySQL(db, []ordered.Event{validEvent("x", 1), {Key: ""}})
	require.ErrorIs(t, err, ordered.ErrInvalidEvent)
	require.EqualValues(t, 1, b.jobRowCount(t))
	require.NoError(t, b.client.Complete(b.ctx, j))
}

// The pgx form (typed arrays) and the database/sql form (JSON) of an enqueue store the same
// row for the same event, whatever each field holds.
func TestEnqueueBothFormsStoreTheSameColumns(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	db := b.openSQLDB(t)
	runAt := time.Date(2031, 5, 6, 7, 8, 9, 123456000, time.UTC)
	events := []ordered.Event{
		{Key: "plain", Seq: 0},
		{Key: "full", Seq: 1 << 40, Kind: "invoice.paid", Payload: json.RawMessage(`{"a":[1,"x",null]}`),
			RunAt: runAt, MaxAttempts: 7},
		{Key: "ünïcode ✓", Seq: 3, Kind: "k", Payload: json.RawMessage(`"just a string"`)},
	}
	type row struct {
		Key, Kind, Payload string
		Seq                int64
		AvailableAt        time.Time
		MaxAttempts        int
		Head               bool
	}
	stored := func(prefix string) []row {
		rows, err := b.pool.Query(b.ctx, `SELECT substr(key, length($1) + 1), kind, payload::text, seq,
			available_at, max_attempts, head FROM ordered_jobs_now WHERE key LIKE $1 || '%' ORDER BY seq`, prefix)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var x row
			err := r.Scan(&x.Key, &x.Kind, &x.Payload, &x.Seq, &x.AvailableAt, &x.MaxAttempts, &x.Head)
			x.AvailableAt = x.AvailableAt.UTC()
			return x, err
		})
		require.NoError(t, err)
		return out
	}
	with := func(prefix string) []ordered.Event {
		out := make([]ordered.Event, len(events))
		for i, ev := range events {
			ev.Key = prefix + ev.Key
			out[i] = ev
		}
		return out
	}

	before := time.Now()
	_, err := b.client.EnqueueMany(b.ctx, with("pgx/"))
	require.NoError(t, err)
	_, err = b.enqueueManySQL(db, with("sql/"))
	require.NoError(t, err)

	viaPgx, viaSQL := stored("pgx/"), stored("sql/")
	require.Len(t, viaPgx, 3)
	for i := range viaPgx {
		// A due event's available_at is its enqueue's time: close, not equal.
		if !viaPgx[i].AvailableAt.Equal(runAt) {
			require.WithinDuration(t, viaPgx[i].AvailableAt, viaSQL[i].AvailableAt, time.Minute)
			require.False(t, viaPgx[i].AvailableAt.Before(before.Add(-time.Minute)))
			viaSQL[i].AvailableAt = viaPgx[i].AvailableAt
		}
	}
	require.Equal(t, viaPgx, viaSQL)
	require.Equal(t, row{Key: "plain", Kind: "", Payload: "null", Seq: 0, AvailableAt: viaPgx[0].AvailableAt,
		MaxAttempts: ordered.MaxAttemptsDefault, Head: true}, viaPgx[0])
	require.Equal(t, row{Key: "ünïcode ✓", Kind: "k", Payload: `"just a string"`, Seq: 3,
		AvailableAt: viaPgx[1].AvailableAt, MaxAttempts: ordered.MaxAttemptsDefault, Head: true}, viaPgx[1])
	require.Equal(t, row{Key: "full", Kind: "invoice.paid", Payload: `{"a": [1, "x", null]}`, Seq: 1 << 40,
		AvailableAt: runAt, MaxAttempts: 7, Head: true}, viaPgx[2])
}

// listenWakeUps listens on the wake-up channel. next returns the payload of this schema's next
// notification (other tests' schemas share the channel), and sentinel sends one that next
// returns as it is. Notifications of different transactions arrive in commit order, so a
// sentinel sent after a statement, and received first, shows that the statement sent none.
func (b *testBundle) listenWakeUps(t *testing.T) (next, sentinel func() string) {
	t.Helper()
	listener, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	t.Cleanup(listener.Release)
	_, err = listener.Exec(b.ctx, "LISTEN ordered_jobs")
	require.NoError(t, err)
	var schema string
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT current_schema()").Scan(&schema))
	next = func() string {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		defer cancel()
		for {
			n, err := listener.Conn().WaitForNotification(ctx)
			require.NoError(t, err)
			if n.Payload == schema || n.Payload == schema+"/sentinel" {
				return n.Payload
			}
		}
	}
	sentinel = func() string {
		_, err := b.pool.Exec(b.ctx, "SELECT pg_notify('ordered_jobs', $1)", schema+"/sentinel")
		require.NoError(t, err)
		return schema + "/sentinel"
	}
	return next, sentinel
}

// An enqueue wakes workers (NOTIFY at commit) only when it made a job claimable now.
func TestEnqueueNotifiesOnlyWhenAJobBecameClaimable(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	next, sentinel := b.listenWakeUps(t)
	var schema string
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT current_schema()").Scan(&schema))
	enqueue := func(evs ...ordered.Event) {
		_, err := b.client.EnqueueMany(b.ctx, evs)
		require.NoError(t, err)
	}

	enqueue(validEvent("a", 5))
	require.Equal(t, schema, next(), "a new key's job is claimable")

	enqueue(validEvent("a", 6), validEvent("a", 7))
	require.Equal(t, sentinel(), next(), "appended behind a queued head: nothing new is claimable")

	enqueue(validEvent("a", 3), validEvent("a", 8))
	require.Equal(t, schema, next(), "a lower seq became the key's head")

	later := validEvent("b", 1)
	later.RunAt = time.Now().Add(time.Hour)
	enqueue(later)
	require.Equal(t, sentinel(), next(), "a job due later is not claimable now")

	enqueue(validEvent("a", 9), validEvent("c", 1))
	require.Equal(t, schema, next(), "one new key in a batch of appends")

	enqueue(validEvent("a", 3))
	require.Equal(t, sentinel(), next(), "a duplicate writes nothing")

	enqueue(validEvent("a", 10))
	require.Equal(t, sentinel(), next(), "one event appended behind a queued head")

	enqueue(validEvent("d", 1))
	require.Equal(t, schema, next(), "one event of a new key")
}

// countingTx counts the statements sent through a transaction.
type countingTx struct {
	pgx.Tx
	statements int
}

func (c *countingTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.statements++
	return c.Tx.Exec(ctx, sql, args...)
}

func (c *countingTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.statements++
	return c.Tx.Query(ctx, sql, args...)
}

func (c *countingTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.statements++
	return c.Tx.QueryRow(ctx, sql, args...)
}

// A single event appended, to a new key or behind its key's head, is one statement; any other
// (a duplicate, one below the head) is decided by the general path, a second statement, after
// the first wrote nothing.
func TestSingleAppendIsOneStatement(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	counted := &countingTx{Tx: tx}
	enqueue := func(key string, seq int64) (ordered.EnqueueResult, int) {
		t.Helper()
		before := counted.statements
		res, err := b.client.EnqueueTx(b.ctx, counted, validEvent(key, seq))
		require.NoError(t, err)
		return res, counted.statements - before
	}

	five, n := enqueue("k", 5)
	require.Equal(t, 1, n, "a new key")
	_, n = enqueue("k", 6)
	require.Equal(t, 1, n, "appended behind the head")
	dup, n := enqueue("k", 5)
	require.Equal(t, 2, n, "a duplicate")
	require.Equal(t, ordered.EnqueueResult{ID: five.ID, Duplicate: true}, dup)
	_, n = enqueue("k", 3)
	require.Equal(t, 2, n, "below the head")
	require.NoError(t, tx.Commit(b.ctx))

	require.EqualValues(t, 3, b.jobRowCount(t))
	for _, seq := range []int64{3, 5, 6} {
		job := b.claimOne(t, b.client)
		require.Equal(t, seq, job.Seq)
		require.NoError(t, b.client.Complete(b.ctx, job))
	}
}

// cancelAfterAppend cancels the context it is given once the single enqueue's first statement
// (the append's) has ended, so that an event which is no append meets a done context before
// its second statement is sent.
type cancelAfterAppend struct {
	cancel context.CancelFunc
}

type sqlTextKey struct{}

func (c *cancelAfterAppend) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, sqlTextKey{}, d.SQL)
}

func (c *cancelAfterAppend) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if s, _ := ctx.Value(sqlTextKey{}).(string); s == store.JobEnqueueOneSQL {
		c.cancel()
	}
}

// A caller's transaction in which an enqueue failed cannot commit, also when its context ended
// between the single enqueue's two statements (the first wrote nothing, the second was never
// sent): the caller's own writes never commit without the event, through pgx or database/sql.
func TestEnqueueTxCtxEndingBetweenStatementsAbortsTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 5) // so that k/3 and k/4 go below the head: no appends
	cfg, err := pgx.ParseConfig(b.queue.URL)
	require.NoError(t, err)

	t.Run("pgx", func(t *testing.T) {
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		cfg := cfg.Copy()
		cfg.Tracer = &cancelAfterAppend{cancel: cancel}
		conn, err := pgx.ConnectConfig(b.ctx, cfg)
		require.NoError(t, err)
		defer conn.Close(b.ctx)
		tx, err := conn.Begin(b.ctx)
		require.NoError(t, err)
		_, err = tx.Exec(b.ctx, `CREATE TABLE effects_pgx (n int)`)
		require.NoError(t, err)
		_, err = b.client.EnqueueTx(ctx, tx, validEvent("k", 3))
		require.ErrorIs(t, err, context.Canceled)
		require.Error(t, tx.Commit(b.ctx), "the transaction is aborted")
	})
	t.Run("database/sql", func(t *testing.T) {
		ctx, cancel := context.WithCancel(b.ctx)
		defer cancel()
		cfg := cfg.Copy()
		cfg.Tracer = &cancelAfterAppend{cancel: cancel}
		db := sql.OpenDB(stdlib.GetConnector(*cfg))
		defer db.Close()
		tx, err := db.BeginTx(b.ctx, nil)
		require.NoError(t, err)
		_, err = tx.ExecContext(b.ctx, `CREATE TABLE effects_sql (n int)`)
		require.NoError(t, err)
		_, err = b.client.EnqueueSQLTx(ctx, tx, validEvent("k", 4))
		require.ErrorIs(t, err, context.Canceled)
		require.Error(t, tx.Commit(), "the transaction is aborted")
	})
	var tables int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM unnest(ARRAY['effects_pgx', 'effects_sql']) AS t(name)
		WHERE to_regclass(t.name) IS NOT NULL`).Scan(&tables))
	require.Zero(t, tables, "the callers' writes did not commit")
	require.EqualValues(t, 1, b.jobRowCount(t))
}

// ---------------------------------------------------------------------------------------------
// 6. A large batch.

func TestEnqueueLargeBatchOneHeadPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const keys, perKey, firstSeq = 100, 100, 10

	events := make([]ordered.Event, 0, keys*perKey)
	for k := range keys {
		for s := range perKey {
			events = append(events, ordered.Event{
				Key: fmt.Sprintf("key-%03d", k), Seq: int64(firstSeq + s), Kind: "bulk",
				Payload: json.RawMessage(fmt.Sprintf(`{"k":%d,"s":%d}`, k, s)),
			})
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })

	res, err := b.client.EnqueueMany(b.ctx, events)
	require.NoError(t, err)
	require.Len(t, res, keys*perKey)
	require.EqualValues(t, keys*perKey, b.jobRowCount(t))

	// Each result is its own event's job.
	type ks struct {
		key string
		seq int64
	}
	byID := make(map[int64]ks, keys*perKey)
	rows, err := b.pool.Query(b.ctx, `SELECT id, key, seq FROM ordered_jobs_now`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var v ks
		require.NoError(t, rows.Scan(&id, &v.key, &v.seq))
		byID[id] = v
	}
	require.NoError(t, rows.Err())
	for i, r := range res {
		require.False(t, r.Duplicate, "event %d", i)
		require.Equal(t, ks{events[i].Key, events[i].Seq}, byID[r.ID], "event %d", i)
	}

	require.EqualValues(t, keys, b.countRows(t, `SELECT count(*) FROM ordered_jobs_now WHERE head`))
	require.EqualValues(t, keys, b.countRows(t, `SELECT count(DISTINCT key) FROM ordered_jobs_now WHERE head AND seq = $1`, firstSeq))

	jobs, err := b.client.Claim(b.ctx, keys)
	require.NoError(t, err)
	require.Len(t, jobs, keys)
	seen := map[string]bool{}
	for _, j := range jobs {
		require.EqualValues(t, firstSeq, j.Seq, "key %s", j.Key)
		require.False(t, seen[j.Key], "key %s claimed twice", j.Key)
		seen[j.Key] = true
	}
	b.claimNone(t, b.client) // every key is busy
}

// ---------------------------------------------------------------------------------------------
// 7. Delayed events.

func TestEnqueueRunAtInFutureHoldsBackTheKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	later := time.Now().Add(time.Hour)
	first, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 1, RunAt: later})
	require.NoError(t, err)
	b.enqueue(t, "k", 2)

	var availableAt time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT available_at FROM ordered_jobs_now WHERE id = $1`, first.ID).Scan(&availableAt))
	require.WithinDuration(t, later, availableAt, time.Second)

	b.claimNone(t, b.client) // neither k/1 (not due) nor k/2 (behind k/1)

	// Another key is not held back.
	b.enqueue(t, "other", 1)
	j := b.claimOne(t, b.client)
	require.Equal(t, "other", j.Key)
	b.claimNone(t, b.client)

	// Once k/1 is due (its key's head row says when), it runs, then k/2.
	tag, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET available_at = now() WHERE job_id = $1 AND state = 'queued'`, first.ID)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected(), "k/1 is its key's queued head")
	j = b.claimOne(t, b.client)
	require.Equal(t, first.ID, j.ID)
	b.claimNone(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))
	j = b.claimOne(t, b.client)
	require.EqualValues(t, 2, j.Seq)
}

// ---------------------------------------------------------------------------------------------
// Edge cases of the enqueue contract beyond the list above.

// The same new (key, seq) twice in one batch: the event's identity makes the second one a no-op
// (Duplicate, same job), or else the batch is refused as invalid; either way one typed answer
// and at most one row, never a raw constraint violation.
func TestEnqueueRepeatedEventWithinBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	res, err := b.client.EnqueueMany(b.ctx, []ordered.Event{validEvent("k", 1), validEvent("j", 1), validEvent("k", 1)})
	if err != nil {
		require.ErrorIs(t, err, ordered.ErrInvalidEvent, "a repeated event must give a typed error, got %v", err)
		b.requireQueueEmpty(t)
		return
	}
	require.Len(t, res, 3)
	require.False(t, res[0].Duplicate)
	require.True(t, res[2].Duplicate)
	require.Equal(t, res[0].ID, res[2].ID)
	require.EqualValues(t, 2, b.jobRowCount(t))
}

// Text the database cannot store (a NUL byte, which PostgreSQL's text and jsonb reject) is a bad
// input like any other: a typed error naming the field, nothing written.
func TestEnqueueNULBytesAreInvalidEvents(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cases := []struct {
		ev    ordered.Event
		field string
	}{
		{ordered.Event{Key: "a\x00b", Seq: 1}, "key"},
		{ordered.Event{Key: "k", Seq: 1, Kind: "a\x00b"}, "kind"},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`{"a":"\u0000"}`)}, "payload"},
	}
	for _, tc := range cases {
		_, err := b.client.Enqueue(b.ctx, tc.ev)
		require.ErrorIs(t, err, ordered.ErrInvalidEvent, "%s with a NUL: got %v", tc.field, err)
		var inv *ordered.InvalidEventError
		require.ErrorAs(t, err, &inv)
		require.Equal(t, tc.field, inv.Field)
		b.requireQueueEmpty(t)
	}
}

// Keys and kinds are printable text: a control character (C0, DEL or C1) or invalid UTF-8 is a
// bad event. A payload that PostgreSQL's jsonb would refuse (invalid UTF-8, a UTF-16 surrogate
// escape without its pair) is refused before anything is sent, as a bad event naming the
// payload, never as a database error that names no event.
func TestEnqueueTextTheDatabaseOrATerminalWouldMisreadIsInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	cases := []struct {
		ev     ordered.Event
		field  string
		reason string
	}{
		{ordered.Event{Key: "a\x1b[2Jb", Seq: 1}, "key", "U+001B"},
		{ordered.Event{Key: "a\nb", Seq: 1}, "key", "U+000A"},
		{ordered.Event{Key: "a\rb", Seq: 1}, "key", "U+000D"},
		{ordered.Event{Key: "a\tb", Seq: 1}, "key", "U+0009"},
		{ordered.Event{Key: "a\x7fb", Seq: 1}, "key", "U+007F"},
		{ordered.Event{Key: "a\u0085b", Seq: 1}, "key", "U+0085"},
		{ordered.Event{Key: "a\u009bb", Seq: 1}, "key", "U+009B"},
		{ordered.Event{Key: "a\xffb", Seq: 1}, "key", "UTF-8"},
		{ordered.Event{Key: "k", Seq: 1, Kind: "a\x1bb"}, "kind", "U+001B"},
		{ordered.Event{Key: "k", Seq: 1, Kind: "a\u009bb"}, "kind", "U+009B"},
		{ordered.Event{Key: "k", Seq: 1, Kind: "a\xffb"}, "kind", "UTF-8"},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage("\"a\xffb\"")}, "payload", "UTF-8"},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage("{\"a\xff\":1}")}, "payload", "UTF-8"},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`"\ud800"`)}, "payload", `\ud800`},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`["x\uDBFFy"]`)}, "payload", `\udbff`},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`"\udc00"`)}, "payload", `\udc00`},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`"\ud800\u0041"`)}, "payload", `\ud800`},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`"\ud800\ud800\udc00"`)}, "payload", `\ud800`},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`{"\udc00":1}`)}, "payload", `\udc00`},
		{ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(`"\\\u0000"`)}, "payload", `\u0000`},
	}
	for _, tc := range cases {
		batch := []ordered.Event{validEvent("good", 1), tc.ev}
		for name, err := range map[string]error{
			"validate": b.client.Validate(batch),
			"enqueue":  second(b.client.EnqueueMany(b.ctx, batch)),
		} {
			var inv *ordered.InvalidEventError
			require.ErrorAs(t, err, &inv, "%s %q %q: got %v", name, tc.ev.Key, tc.ev.Payload, err)
			require.Equal(t, 1, inv.Index)
			require.Equal(t, tc.field, inv.Field, "%v", err)
			require.Contains(t, inv.Reason, tc.reason)
		}
		b.requireQueueEmpty(t)
	}

	// Printable text, a surrogate pair, and a backslash that only looks like an escape are fine.
	payloads := map[string]string{
		`"\ud83d\ude00"`:         `"😀"`,
		`"\\ud800"`:              `"\\ud800"`,
		`{"\\\\u0000":"\u00e9"}`: `{"\\\\u0000": "é"}`,
		`"\u2028 é 日本"`:          "\"\u2028 é 日本\"", // jsonb stores the character
	}
	seq := int64(0)
	for in, stored := range payloads {
		seq++
		res, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "ключ 🔑 key", Seq: seq, Kind: "a b", Payload: json.RawMessage(in)})
		require.NoError(t, err, in)
		require.Equal(t, stored, b.storedPayload(t, res.ID), in)
	}
}

// A payload that jsonb would merge (an object naming one member twice: jsonb keeps the last)
// or refuse (a number beyond numeric) is refused before anything is sent, as a bad event that
// names the payload and the place in it; nothing of its batch is written. The client's rule for
// numbers is PostgreSQL's, on both sides of each of numeric's limits.
func TestEnqueuePayloadsJSONBWouldMergeOrRefuseAreInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	requireRefused := func(payload, reason string) {
		t.Helper()
		before := b.jobRowCount(t)
		batch := []ordered.Event{validEvent("good", 1), {Key: "k", Seq: 1, Payload: json.RawMessage(payload)}}
		for name, err := range map[string]error{
			"validate": b.client.Validate(batch),
			"enqueue":  second(b.client.EnqueueMany(b.ctx, batch)),
		} {
			var inv *ordered.InvalidEventError
			require.ErrorAs(t, err, &inv, "%s %.40s: got %v", name, payload, err)
			require.Equal(t, 1, inv.Index)
			require.Equal(t, "payload", inv.Field, "%v", err)
			require.Contains(t, inv.Reason, reason, "%.40s", payload)
		}
		require.Equal(t, before, b.jobRowCount(t), "nothing of the batch is written")
	}
	requireRefused(`{"a":1,"a":2}`, `the name "a" is given twice in the object; jsonb would keep only the last`)
	requireRefused(`{"a":null,"b":0,"a":null}`, `the name "a" is given twice in the object;`)
	requireRefused(`{"x":[1,{"b":1,"\u0062":2}]}`, `the name "b" is given twice in the object at /x/1;`)
	requireRefused(`{"a/b":{"~":1,"~":2}}`, `the name "~" is given twice in the object at /a~1b;`)

	// One name in two objects, or in an object and its member, is no repetition.
	res, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "names", Seq: 1, Payload: json.RawMessage(`{"a":{"a":1},"b":[{"a":2},{"a":3}]}`)})
	require.NoError(t, err)
	require.Equal(t, `{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}`, b.storedPayload(t, res.ID))

	frac := func(zeros int) string { return "1." + strings.Repeat("0", zeros) }
	numbers := []string{
		"1e131071", "1e131072", "-1e131072", "123e131069", "123e131070", "0.001e131074", "0.001e131075",
		"1E+131071", "1E+131072", "1e-16383", "1e-16384", "0e-16383", "0e-16384", "0.0000e-16379",
		"0.0000e-16380", "0e1073741822", "0e1073741823", "-0e-1073741823", "1e-1073741822",
		"0e99999999999999999999", frac(16383), frac(16384), "1" + strings.Repeat("0", 131071),
		"1" + strings.Repeat("0", 131072), "12.5e131070", "-0", "3.25",
	}
	var stored, refused int
	for seq, n := range numbers {
		payload := "[0," + n + "]"
		var want string
		if b.pool.QueryRow(b.ctx, `SELECT $1::text::jsonb::text`, payload).Scan(&want) != nil {
			refused++
			requireRefused(payload, "the number "+n[:min(len(n), 20)])
			requireRefused(payload, " at /1 is beyond what PostgreSQL's jsonb stores")
			continue
		}
		stored++
		res, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "numbers", Seq: int64(seq), Payload: json.RawMessage(payload)})
		require.NoError(t, err, "%.40s", n)
		require.Equal(t, want, b.storedPayload(t, res.ID), "%.40s", n)
	}
	require.Equal(t, 13, stored, "numbers PostgreSQL stores")
	require.Equal(t, 14, refused, "numbers PostgreSQL refuses")
}

// MaxPayloadBytes bounds a payload as PostgreSQL writes it (octet_length(payload::text)), what
// workers read back, as well as the bytes sent: a number with an exponent, a few bytes sent,
// may be written out in thousands of digits. The limit is the SQL functions' own, so a payload
// is refused by both or by neither.
func TestEnqueuePayloadOverTheLimitAsPostgreSQLWritesItIsInvalid(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{MaxPayloadBytes: 1024})
	before := b.jobRowCount(t)
	for payload, written := range map[string]int{`[1e2000]`: 2003, `{"n":1.5e-1030}`: 1040, `[` + strings.Repeat(`0,`, 341) + `0]`: 1026} {
		ev := ordered.Event{Key: "k", Seq: 1, Payload: json.RawMessage(payload)}
		for name, err := range map[string]error{
			"validate": b.client.Validate([]ordered.Event{ev}),
			"enqueue":  second(b.client.Enqueue(b.ctx, ev)),
		} {
			var inv *ordered.InvalidEventError
			require.ErrorAs(t, err, &inv, "%s %.20s", name, payload)
			require.Equal(t, "payload", inv.Field)
			require.Equal(t, fmt.Sprintf("%d bytes as PostgreSQL writes it, over the limit of 1024", written), inv.Reason)
		}
		_, err := b.pool.Exec(b.ctx, `SELECT ordered_enqueue(jsonb_build_array(jsonb_build_object('key', 'k', 'seq', 1, 'payload', $1::jsonb)), p_max_payload_bytes => 1024)`, payload)
		var inv *ordered.InvalidEventError
		require.ErrorAs(t, ordered.MapDBError(err), &inv, "%.20s", payload)
		require.Equal(t, fmt.Sprintf("%d bytes, over the limit of 1024", written), inv.Reason)
	}
	require.Equal(t, before, b.jobRowCount(t), "nothing is written")

	// Under the limit as written, it is stored; sent in more bytes than the limit, it is
	// refused for what is sent, however little PostgreSQL would write of it.
	_, err := b.client.Enqueue(b.ctx, ordered.Event{Key: "under", Seq: 1, Payload: json.RawMessage(`[1e1020]`)})
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "sent", Seq: 1, Payload: json.RawMessage(`"` + strings.Repeat(`\u0041`, 200) + `"`)})
	var inv *ordered.InvalidEventError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, "1202 bytes, over the limit of 1024", inv.Reason)
}

// second is the error of a call that returns a value and an error.
func second[T any](_ T, err error) error { return err }

// A replayed job has started before (it ran and failed): an event below it is late, as it was
// while the job was blocked. Otherwise the late event would run before the replayed job, after
// that job's earlier attempts.
func TestEnqueueBelowReplayedJobIsLate(t *testing.T) {
	t.Parallel()
	b := setup(t, blockPolicyCfg())
	ids := b.enqueue(t, "k", 5, 7)
	_, out := b.failNextHead(t, "k", 5, errors.New("boom"))
	require.Equal(t, ordered.OutcomeBlocked, out)

	_, err := b.client.Enqueue(b.ctx, validEvent("k", 3))
	requireLateEvent(t, err, "k", 3, 5) // late while k/5 is blocked

	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{}))
	_, err = b.client.Enqueue(b.ctx, validEvent("k", 3))
	requireLateEvent(t, err, "k", 3, 5) // and still late once it is replayed
	require.EqualValues(t, 2, b.jobRowCount(t))
}

// A replayed job that is claimed and given back unrun (its worker stopped) still counts as
// started: an event below it, or below a later job that started, is late.
func TestEnqueueBelowStartedJobsIsLateAfterReplayedJobGivenBackUnrun(t *testing.T) {
	t.Parallel()
	b := setup(t, skipPolicyCfg())
	ids := b.enqueue(t, "k", 10, 20)
	_, out := b.failNextHead(t, "k", 10, errors.New("boom"))
	require.Equal(t, ordered.OutcomeSkipped, out)
	j := b.claimOne(t, b.client)
	require.Equal(t, ids[1], j.ID)
	out, err := b.client.RetryAfter(b.ctx, j, time.Hour, errors.New("later")) // k/20 started
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeRetried, out)
	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
	j = b.claimOne(t, b.client)
	require.Equal(t, ids[0], j.ID)
	released, err := store.JobReleaseUnrun(b.ctx, b.pool, j.ID, j.ClaimVersion, nil)
	require.NoError(t, err)
	require.True(t, released)

	_, err = b.client.EnqueueMany(b.ctx, []ordered.Event{validEvent("k", 5), validEvent("k", 15)})
	require.ErrorIs(t, err, ordered.ErrLateEvent)
	_, err = b.client.Enqueue(b.ctx, validEvent("k", 5))
	requireLateEvent(t, err, "k", 5, 10)
	require.EqualValues(t, 2, b.jobRowCount(t))
}

// A job claimed and given back unrun twice (claimed ahead by two workers that stopped, say)
// has never started: an event below it is not late, and runs first.
func TestEnqueueBelowAJobGivenBackUnrunTwiceIsNotLate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	id := b.enqueue(t, "k", 5)[0]
	for range 2 {
		j := b.claimOne(t, b.client)
		require.Equal(t, id, j.ID)
		released, err := store.JobReleaseUnrun(b.ctx, b.pool, j.ID, j.ClaimVersion, nil)
		require.NoError(t, err)
		require.True(t, released)
	}
	_, err := b.client.Enqueue(b.ctx, validEvent("k", 3))
	require.NoError(t, err)
	require.Equal(t, "k/3", b.claimOne(t, b.client).IdempotencyKey())
}

// After a forced replay, a later job of the key has finished: an event below it is late.
func TestEnqueueBelowFinishedJobIsLateAfterForcedReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, skipPolicyCfg())
	ids := b.enqueue(t, "k", 5, 7)
	_, out := b.failNextHead(t, "k", 5, errors.New("boom"))
	require.Equal(t, ordered.OutcomeSkipped, out)
	j := b.claimOne(t, b.client)
	require.Equal(t, ids[1], j.ID)
	require.NoError(t, b.client.Complete(b.ctx, j)) // k/7 done
	require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))

	_, err := b.client.Enqueue(b.ctx, validEvent("k", 3))
	require.ErrorIs(t, err, ordered.ErrLateEvent, "k/3 arrives after k/7 finished")
	var late *ordered.LateEventError
	require.ErrorAs(t, err, &late)
	require.Contains(t, []int64{5, 7}, late.LaterSeq)
	require.EqualValues(t, 2, b.jobRowCount(t))
}
