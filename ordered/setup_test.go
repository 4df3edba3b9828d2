package ordered_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// testBundle is a fresh queue and a client on it.
type testBundle struct {
	ctx    context.Context
	queue  *orderedtest.Queue
	pool   *pgxpool.Pool
	client *ordered.Client
}

func setup(t testing.TB, cfg *ordered.Config) *testBundle {
	t.Helper()
	q := orderedtest.New(t)
	client, err := ordered.NewClient(q.Pool, cfg)
	require.NoError(t, err)
	if byCopy(t) {
		ordered.CopyEveryBatch(client)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &testBundle{ctx: ctx, queue: q, pool: q.Pool, client: client}
}

// newClient is another client (another "worker") on the same queue.
func (b *testBundle) newClient(t *testing.T, cfg *ordered.Config) *ordered.Client {
	t.Helper()
	c, err := ordered.NewClient(b.pool, cfg)
	require.NoError(t, err)
	if byCopy(t) {
		ordered.CopyEveryBatch(c)
	}
	return c
}

// byCopy reports whether t runs under TestEnqueueByCopy, whose clients write every batch of
// appends with COPY.
func byCopy(t testing.TB) bool { return strings.HasPrefix(t.Name(), "TestEnqueueByCopy/") }

func (b *testBundle) enqueue(t *testing.T, key string, seqs ...int64) []int64 {
	t.Helper()
	evs := make([]ordered.Event, len(seqs))
	for i, s := range seqs {
		evs[i] = ordered.Event{Key: key, Seq: s, Kind: "test", Payload: json.RawMessage(`{}`)}
	}
	res, err := b.client.EnqueueMany(b.ctx, evs)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// claimOne claims exactly one job or fails the test.
func (b *testBundle) claimOne(t *testing.T, c *ordered.Client) *ordered.Job {
	t.Helper()
	jobs, err := c.Claim(b.ctx, 1)
	require.NoError(t, err)
	require.Len(t, jobs, 1, "expected a claimable job")
	return jobs[0]
}

// claimNone asserts that nothing is claimable.
func (b *testBundle) claimNone(t *testing.T, c *ordered.Client) {
	t.Helper()
	jobs, err := c.Claim(b.ctx, 10)
	require.NoError(t, err)
	require.Empty(t, jobs, "expected nothing claimable, got %v", describe(jobs))
}

func describe(jobs []*ordered.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.IdempotencyKey()
	}
	return out
}

// jobStatus reads a job's status as it runs (ordered_jobs_now: a claimed head is running).
func (b *testBundle) jobStatus(t *testing.T, id int64) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM ordered_jobs_now WHERE id = $1`, id).Scan(&s))
	return s
}

// expireLease makes a running job's lease expire now, as if its worker had stalled past it.
func (b *testBundle) expireLease(t *testing.T, id int64) {
	t.Helper()
	tag, err := b.pool.Exec(b.ctx,
		`UPDATE ordered_heads SET lease_until = now() - interval '1 millisecond' WHERE job_id = $1 AND state = 'running'`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}
