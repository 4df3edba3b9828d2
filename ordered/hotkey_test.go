package ordered_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// claimBuffers runs the claim of limit jobs under EXPLAIN (ANALYZE, BUFFERS) in a transaction
// that is rolled back, three times, and returns the fewest shared buffers one touched, with
// its plan: a run may also pay for planning anew after its catalog caches were reset, which
// other sessions' DDL does on a busy server.
func claimBuffers(t *testing.T, b *testBundle, limit int) (buffers int, plan string) {
	t.Helper()
	buffers = -1
	for range 3 {
		n, p := claimBuffersOnce(t, b, limit)
		if buffers < 0 || n < buffers {
			buffers, plan = n, p
		}
	}
	return buffers, plan
}

func claimBuffersOnce(t *testing.T, b *testBundle, limit int) (buffers int, plan string) {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var out []byte
	require.NoError(t, tx.QueryRow(b.ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.JobClaimManySQL,
		limit, time.Minute).Scan(&out))
	var doc []struct {
		Plan struct {
			ActualRows   int `json:"Actual Rows"`
			SharedHit    int `json:"Shared Hit Blocks"`
			SharedRead   int `json:"Shared Read Blocks"`
			SharedDirty  int `json:"Shared Dirtied Blocks"`
			SharedWrites int `json:"Shared Written Blocks"`
		} `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &doc))
	p := doc[0].Plan
	require.Equal(t, limit, p.ActualRows, "the claim took fewer jobs than asked")
	return p.SharedHit + p.SharedRead, string(out)
}

// The claim's cost must not grow with one key's backlog: with a key holding 100,000 queued jobs
// behind a running head, claiming other keys' jobs touches as many buffers as without it.
func TestClaimCostIndependentOfHotKeyBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const others, hot, limit = 1000, 100_000, 20

	evs := make([]ordered.Event, others)
	for i := range evs {
		evs[i] = ordered.Event{Key: fmt.Sprintf("other-%04d", i), Seq: 1, Payload: json.RawMessage(`{"n":1}`)}
	}
	_, err := b.client.EnqueueMany(b.ctx, evs)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `ANALYZE ordered_jobs, ordered_heads`)
	require.NoError(t, err)
	without, _ := claimBuffers(t, b, limit)

	// The hot key: its head older than every other job, claimed and running, then a deep backlog.
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_jobs SET available_at = now() - interval '1 hour';
		UPDATE ordered_heads SET available_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	b.enqueue(t, "hot", 0)
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_heads SET available_at = now() - interval '2 hours' WHERE key = 'hot'`)
	require.NoError(t, err)
	require.Equal(t, "hot", b.claimOne(t, b.client).Key)
	for lo := 1; lo <= hot; lo += 10_000 {
		batch := make([]ordered.Event, 10_000)
		for i := range batch {
			batch[i] = ordered.Event{Key: "hot", Seq: int64(lo + i), Payload: json.RawMessage(`{"n":1}`)}
		}
		_, err := b.client.EnqueueMany(b.ctx, batch)
		require.NoError(t, err)
	}
	// The backlog is older than the other keys' jobs: a claim that scanned it would read it all.
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_jobs SET available_at = now() - interval '2 hours'
		WHERE key = 'hot' AND status = 'queued'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `VACUUM ANALYZE ordered_jobs, ordered_heads`)
	require.NoError(t, err)

	with, plan := claimBuffers(t, b, limit)
	t.Logf("claim of %d: %d buffers without the hot key, %d with %d jobs behind it", limit, without, with, hot)
	require.LessOrEqual(t, with, 2*without+50, "the claim scanned the hot key's backlog:\n%s", plan)

	// A key with a long finished history and a ready head: the guard must read only open jobs.
	_, err = b.pool.Exec(b.ctx, `
		INSERT INTO ordered_jobs (key, seq, payload, max_attempts, status, finished_at)
		SELECT 'history', g, '{}', 1, 'done', now() FROM generate_series(0, 49999) AS g`)
	require.NoError(t, err)
	b.enqueue(t, "history", 50_000)
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_heads SET available_at = now() - interval '3 hours'
		WHERE key = 'history'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `VACUUM ANALYZE ordered_jobs, ordered_heads`)
	require.NoError(t, err)
	withHistory, plan := claimBuffers(t, b, limit)
	t.Logf("claim of %d with a 50,000-job finished history under one head: %d buffers", limit, withHistory)
	require.LessOrEqual(t, withHistory, 2*without+50, "the guard scanned a key's finished history:\n%s", plan)
}

// The claim's cost must not depend on what the statistics say. A queue table is analysed at
// one instant, and its ready heads come and go within milliseconds; a claim planned from
// statistics that saw none must still walk the ready index in order, probe the guard per
// candidate, and stop after the jobs it takes.
func TestClaimCostIndependentOfStaleStatistics(t *testing.T) {
	t.Parallel()
	const others, limit = 2000, 20
	readyOthers := func(t *testing.T, b *testBundle) {
		t.Helper()
		evs := make([]ordered.Event, others)
		for i := range evs {
			evs[i] = ordered.Event{Key: fmt.Sprintf("other-%04d", i), Payload: json.RawMessage(`{}`)}
		}
		_, err := b.client.EnqueueMany(b.ctx, evs)
		require.NoError(t, err)
	}
	// compare claims planned from the stale statistics and from fresh ones.
	compare := func(t *testing.T, b *testBundle) {
		t.Helper()
		stale, plan := claimBuffers(t, b, limit)
		_, err := b.pool.Exec(b.ctx, `ANALYZE ordered_jobs, ordered_heads`)
		require.NoError(t, err)
		fresh, _ := claimBuffers(t, b, limit)
		t.Logf("claim of %d among %d ready heads: %d buffers planned from stale statistics, %d from fresh",
			limit, others, stale, fresh)
		require.LessOrEqual(t, stale, 2*fresh+50, "the claim read more than the jobs it took:\n%s", plan)
	}

	// Analysed drained: the statistics say no job is open, and the guard could become a join
	// over every open job.
	t.Run("analysed drained", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, err := b.pool.Exec(b.ctx, `
			INSERT INTO ordered_jobs (key, seq, payload, max_attempts, status, finished_at)
			SELECT 'history-' || (g % 1000), g, '{}', 1, 'done', now()
			FROM generate_series(0, 49999) AS g`)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `VACUUM ANALYZE ordered_jobs, ordered_heads`)
		require.NoError(t, err)
		readyOthers(t, b)
		compare(t, b)
	})

	// Analysed with a deep backlog on one key and no head in ANALYZE's sample (one head among
	// 50,000 jobs is rarely in it; here it comes after), then the head runs: the claim could
	// read and sort every ready head.
	t.Run("analysed with a hot key", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, err := b.pool.Exec(b.ctx, `
			INSERT INTO ordered_keys (key, seq_max) VALUES ('hot', 50000);
			INSERT INTO ordered_jobs (key, seq, payload, max_attempts)
			SELECT 'hot', g, '{}', 1 FROM generate_series(1, 50000) AS g`)
		require.NoError(t, err)
		_, err = b.pool.Exec(b.ctx, `VACUUM ANALYZE ordered_jobs, ordered_heads`)
		require.NoError(t, err)
		b.enqueue(t, "hot", 0)
		require.Equal(t, "hot", b.claimOne(t, b.client).Key)
		readyOthers(t, b)
		compare(t, b)
	})
}

// A completion batch locks its keys' rows through ordered_keys' primary key even when the key
// table was never analysed (early in a queue's life, or always with autovacuum off): planned
// from no statistics, the lock was a sequential scan of every key row, each compared with
// every key of the batch.
func TestCompletionLocksKeysWithoutKeyStatistics(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.pool.Exec(b.ctx, `ALTER TABLE ordered_keys SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	const keys = 1000
	evs := make([]ordered.Event, 0, 2*keys)
	for i := range keys {
		for seq := range int64(2) {
			evs = append(evs, ordered.Event{Key: fmt.Sprintf("k%04d", i), Seq: seq, Payload: json.RawMessage(`{}`)})
		}
	}
	_, err = b.client.EnqueueMany(b.ctx, evs)
	require.NoError(t, err)
	var analysed bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT reltuples >= 0 FROM pg_class WHERE oid = 'ordered_keys'::regclass`).Scan(&analysed))
	require.False(t, analysed, "the key table was analysed: the test needs it unanalysed")

	var ids, versions []int64
	for len(ids) < 300 {
		jobs, err := b.client.Claim(b.ctx, ordered.ClaimBatchMax)
		require.NoError(t, err)
		require.NotEmpty(t, jobs)
		for _, j := range jobs {
			ids, versions = append(ids, j.ID), append(versions, j.ClaimVersion)
		}
	}
	// A connection of its own: the function's plans are made at its first call there.
	conn, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	before := keySeqScans(t, b, tx)
	completed, next, err := store.JobCompleteMany(b.ctx, tx, ids, versions, len(ids), time.Minute)
	require.NoError(t, err)
	require.Len(t, completed, len(ids))
	require.Len(t, next, len(ids))
	require.Zero(t, keySeqScans(t, b, tx)-before, "the completion scanned the whole key table")
}

// keySeqScans is how many sequential scans of ordered_keys tx's session has made and not yet
// reported (its pending statistics include earlier transactions: compare two readings).
func keySeqScans(t *testing.T, b *testBundle, tx pgx.Tx) int {
	t.Helper()
	var n int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT coalesce(max(seq_scan), 0) FROM pg_stat_xact_user_tables
		WHERE relid = 'ordered_keys'::regclass`).Scan(&n))
	return n
}

// enqueueBuffers enqueues one event under EXPLAIN (ANALYZE, BUFFERS) in a transaction that is
// rolled back, three times, and returns the fewest shared buffers one touched: a run may also
// read the catalogs anew after its caches were reset, which other sessions' DDL does on a busy
// server (as for claimBuffers).
func enqueueBuffers(t *testing.T, b *testBundle, key string, seq int64) int {
	t.Helper()
	buffers := -1
	for range 3 {
		if n := enqueueBuffersOnce(t, b, key, seq); buffers < 0 || n < buffers {
			buffers = n
		}
	}
	return buffers
}

func enqueueBuffersOnce(t *testing.T, b *testBundle, key string, seq int64) int {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	batch, err := json.Marshal([]map[string]any{{"key": key, "seq": seq, "kind": "", "payload": map[string]any{}, "max_attempts": 3}})
	require.NoError(t, err)
	var out []byte
	require.NoError(t, tx.QueryRow(b.ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+store.JobEnqueueJSONSQL, string(batch),
		ordered.MaxKeyBytesDefault, ordered.MaxAttemptsDefault, nil, "wait", nil).Scan(&out))
	var doc []struct {
		Plan struct {
			SharedHit  int `json:"Shared Hit Blocks"`
			SharedRead int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &doc))
	return doc[0].Plan.SharedHit + doc[0].Plan.SharedRead
}

// An enqueue finds and moves a key's head without reading the key's backlog, whatever the
// statistics say. Appending behind a queued or a running head, or sending an event below a
// queued head (which moves the head), touches about as many buffers on a key with 20,000
// queued jobs as on a key with one.
func TestEnqueueCostIndependentOfKeyBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const backlog = 20_000
	// Many keys of a few jobs each, half of them running: the statistics then promise a
	// handful of open jobs a key, scattered over the table (the claims moved rows), for which
	// a bitmap scan of all of a key's open jobs and a sort look cheaper than an index walk
	// that stops at the head.
	many := make([]ordered.Event, 50_000)
	for i := range many {
		many[i] = ordered.Event{Key: fmt.Sprintf("k%05d", i%10_000), Seq: int64(i / 10_000), Payload: json.RawMessage(`{}`)}
	}
	_, err := b.client.EnqueueMany(b.ctx, many)
	require.NoError(t, err)
	for range 300 {
		_, err := store.JobClaimMany(b.ctx, b.pool, 16, time.Hour)
		require.NoError(t, err)
	}
	b.enqueue(t, "cold", 10)
	hot := make([]ordered.Event, backlog)
	for i := range hot {
		hot[i] = ordered.Event{Key: "hot", Seq: int64(10 + i), Payload: json.RawMessage(`{}`)}
	}
	_, err = b.client.EnqueueMany(b.ctx, hot)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `VACUUM ANALYZE ordered_jobs, ordered_keys, ordered_heads`)
	require.NoError(t, err)

	check := func(what string, hotSeq, coldSeq int64) {
		t.Helper()
		enqueueBuffers(t, b, "cold", coldSeq) // plans the statements of this connection
		onHot, onCold := enqueueBuffers(t, b, "hot", hotSeq), enqueueBuffers(t, b, "cold", coldSeq)
		t.Logf("%s: %d buffers on the key with %d jobs, %d on the key with one", what, onHot, backlog, onCold)
		require.LessOrEqual(t, onHot, 2*onCold+50, "%s read the key's backlog", what)
	}
	check("appending behind a queued head", 1_000_000, 1_000_000)
	check("an event below a queued head", 5, 5)
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_heads SET state = 'running', attempts = 1, claim_version = 1,
		lease_until = now() + interval '1 hour', attempted_at = now() WHERE key IN ('hot', 'cold')`)
	require.NoError(t, err)
	check("appending behind a running head", 1_000_000, 1_000_000)
}
