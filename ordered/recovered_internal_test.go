package ordered

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/testdb"
)

// A batch worker's completion that runs out of its keys' jobs claims other keys' batches in
// the same statement, and may take back a job whose lease expired there: the job says so, and
// the worker counts it in ordered_expired_leases_recovered_total as it counts any recovery.
func TestCompletionsTrailingClaimReportsRecoveredJobs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := testdb.New(t)
	c, err := NewClient(q.Pool, nil)
	require.NoError(t, err)
	for _, key := range []string{"a", "k"} {
		_, err := c.Enqueue(ctx, Event{Key: key, Seq: 1})
		require.NoError(t, err)
	}
	batches, err := c.ClaimBatch(ctx, 1, 10)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, "a", batches[0][0].Key)
	crashed, err := c.Claim(ctx, 1) // a worker that dies holding k/1 ...
	require.NoError(t, err)
	require.Len(t, crashed, 1)
	require.Equal(t, "k", crashed[0].Key)
	tag, err := q.Pool.Exec(ctx, `UPDATE ordered_heads SET lease_until = now() - interval '1 millisecond'
		WHERE job_id = $1 AND state = 'running'`, crashed[0].ID) // ... and whose lease ran out
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	lost, next, err := c.completeBatchClaimNext(ctx, batches[0], 1, 10)
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Len(t, next, 1, "key a ran dry: the completion claims k/1 back")
	got := next[0][0]
	require.Equal(t, crashed[0].ID, got.ID)
	require.Greater(t, got.ClaimVersion, crashed[0].ClaimVersion)
	require.True(t, got.recovered, "the job was taken back from an expired lease")

	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, nil)
	require.NoError(t, err)
	w := &Worker{metrics: m}
	w.accept(got)
	require.Equal(t, 1.0, testutil.ToFloat64(m.expiredRecovered))
	require.Equal(t, 1.0, testutil.ToFloat64(m.claims))
}
