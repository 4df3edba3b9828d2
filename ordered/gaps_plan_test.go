package ordered_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// enqueueContiguousSQL enqueues, through the SQL API, seq $3 of the keys prefix-1..prefix-$2,
// contiguous from seq 1, so that a seq above 1 leaves each key waiting on a gap.
const enqueueContiguousSQL = `SELECT count(*) FROM ordered_enqueue_events(ARRAY(
	SELECT ROW($1::text || g, $3::bigint, '', '{}', NULL, NULL)::ordered_event
	FROM generate_series(1, $2::integer) AS g), p_first_seq => 1)`

// completionBuffers runs the completion of the claim (id, version) under EXPLAIN (ANALYZE,
// BUFFERS) three times, each in a transaction that is rolled back, and returns the fewest
// shared buffers one touched: a session's first call also reads the catalog, and which pooled
// session runs each call is not fixed.
func completionBuffers(t *testing.T, b *testBundle, id, version int64) (buffers int, plan string) {
	t.Helper()
	buffers = -1
	for range 3 {
		n, p := completionBuffersOnce(t, b, id, version)
		if buffers < 0 || n < buffers {
			buffers, plan = n, p
		}
	}
	return buffers, plan
}

func completionBuffersOnce(t *testing.T, b *testBundle, id, version int64) (buffers int, plan string) {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	var out []byte
	require.NoError(t, tx.QueryRow(b.ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		SELECT * FROM ordered_jobs_complete(ARRAY[$1::bigint], ARRAY[$2::bigint], 1, interval '1 minute')`,
		id, version).Scan(&out))
	var doc []struct {
		Plan struct {
			ActualRows int `json:"Actual Rows"`
			SharedHit  int `json:"Shared Hit Blocks"`
			SharedRead int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(out, &doc))
	require.Equal(t, 1, doc[0].Plan.ActualRows, "the completion did not complete the claim")
	return doc[0].Plan.SharedHit + doc[0].Plan.SharedRead, string(out)
}

// The claim's cost must not grow with the keys waiting on gaps: they have no head, so the
// claim index never holds them. With 10,000 keys waiting (their jobs older than every ready
// one), claiming the ready keys' jobs touches as many buffers as without them; so does the
// completion of a contiguous key's job that leaves its key waiting on a gap.
func TestClaimCostIndependentOfGapKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const ready, gapped, limit = 1000, 10_000, 20

	_, err := b.pool.Exec(b.ctx, enqueueContiguousSQL, "ready-", ready, 1)
	require.NoError(t, err)
	// Two probes: keys whose job 1 is claimed and completed below, job 3 behind a gap.
	_, err = b.pool.Exec(b.ctx, enqueueContiguousSQL, "probe-", 2, 3)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, enqueueContiguousSQL, "probe-", 2, 1)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_heads SET available_at = now() - interval '3 hours' WHERE key LIKE 'probe-%'`)
	require.NoError(t, err)
	probes := make([][2]int64, 2)
	for i := range probes {
		j := b.claimOne(t, b.client)
		require.Contains(t, j.Key, "probe-")
		probes[i] = [2]int64{j.ID, j.ClaimVersion}
	}
	_, err = b.pool.Exec(b.ctx, `VACUUM ANALYZE ordered_jobs, ordered_heads`)
	require.NoError(t, err)
	without, _ := claimBuffers(t, b, limit)
	completeWithout, _ := completionBuffers(t, b, probes[0][0], probes[0][1])

	_, err = b.pool.Exec(b.ctx, enqueueContiguousSQL, "gapped-", gapped, 2)
	require.NoError(t, err)
	// No head to make older: a key waiting on a gap has none. Its jobs' own times are older.
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_jobs SET available_at = now() - interval '2 hours' WHERE key LIKE 'gapped-%'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(b.ctx, `VACUUM ANALYZE ordered_jobs, ordered_heads`)
	require.NoError(t, err)
	var waiting int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_gaps`).Scan(&waiting))
	require.Equal(t, gapped, waiting)

	with, plan := claimBuffers(t, b, limit)
	t.Logf("claim of %d: %d buffers without keys waiting on gaps, %d with %d", limit, without, with, gapped)
	require.LessOrEqual(t, with, 2*without+50, "the claim read keys waiting on gaps:\n%s", plan)
	completeWith, plan := completionBuffers(t, b, probes[1][0], probes[1][1])
	t.Logf("completion into a gap: %d buffers without, %d with %d keys waiting", completeWithout, completeWith, gapped)
	require.LessOrEqual(t, completeWith, 2*completeWithout+50, "the completion read keys waiting on gaps:\n%s", plan)
}
