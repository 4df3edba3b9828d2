package invariant_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/orderedq/ordered/internal/invariant"
	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/policy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Each invariant is reported, alone, for a row written by hand that breaks it; the schema
// takes such rows (it has no CHECK constraints on these tables), so only this check finds
// them. Each write is rolled back, so the queue ends clean.
func TestViolationsNameEachBrokenInvariant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := orderedtest.New(t)
	client := q.Client(t, nil)
	_, err := client.EnqueueMany(ctx, []ordered.Event{{Key: "a", Seq: 1}, {Key: "a", Seq: 2}, {Key: "b", Seq: 1}})
	require.NoError(t, err)
	gapped := q.Client(t, &ordered.Config{Sequence: policy.AllKeys(policy.Sequence{Contiguous: true, First: 5,
		Gap: policy.Gap{Action: policy.GapProceed, Timeout: time.Hour}})})
	_, err = gapped.Enqueue(ctx, ordered.Event{Key: "c", Seq: 7})
	require.NoError(t, err)

	broken, err := invariant.Violations(ctx, q.Pool)
	require.NoError(t, err)
	require.Empty(t, broken, "a queue written through the library keeps every invariant")

	for _, c := range []struct{ write, invariant string }{
		{`INSERT INTO ordered_jobs (key, seq, payload, max_attempts) VALUES ('', 1, '{}', 1)`,
			"ordered_jobs: key is not empty"},
		{`INSERT INTO ordered_jobs (key, seq, payload, max_attempts) VALUES ('x', -1, '{}', 1)`,
			"ordered_jobs: seq is not negative"},
		{`UPDATE ordered_jobs SET status = 'finished' WHERE key = 'a' AND seq = 2`,
			"ordered_jobs: status is queued, done, failed or blocked"},
		{`INSERT INTO ordered_jobs (key, seq, payload, max_attempts, status) VALUES ('x', 1, '{}', 0, 'done')`,
			"ordered_jobs: max_attempts is positive"},
		{`UPDATE ordered_jobs SET failed_at = now() WHERE key = 'a' AND seq = 2`,
			"ordered_jobs: failed_at is set exactly when a job failed or blocked"},
		{`UPDATE ordered_jobs SET crash_lease_until = now() WHERE key = 'b'`,
			"ordered_jobs: a crashed batch's mark is on a queued job that is no head"},
		{`UPDATE ordered_heads SET state = 'idle' WHERE key = 'b'`,
			"ordered_heads: state is queued, running or blocked"},
		{`UPDATE ordered_heads SET lease_until = now() WHERE key = 'b'`,
			"ordered_heads: a head has a lease exactly when it is running"},
		{`UPDATE ordered_heads SET batch_to = 5 WHERE key = 'b'`,
			"ordered_heads: only a running head leads a batch"},
		{`UPDATE ordered_heads SET max_attempts = max_attempts + 1 WHERE key = 'b'`,
			"ordered_heads: a head is its job's key, seq and max_attempts"},
		{`UPDATE ordered_jobs SET status = 'done', finished_at = now() WHERE key = 'b'`,
			"ordered_heads: a head is open, blocked exactly when its job is"},
		{`UPDATE ordered_heads AS h SET job_id = j.id, seq = j.seq FROM ordered_jobs AS j
		  WHERE h.key = 'a' AND j.key = 'a' AND j.seq = 2`,
			"ordered_heads: a head is its key's lowest open job"},
		{`UPDATE ordered_heads SET closed_to = seq WHERE key = 'b'`,
			"ordered_heads: closed_to is below the head"},
		{`DELETE FROM ordered_heads WHERE key = 'b'`,
			"ordered_heads: a key with an open job has a head unless it waits on a gap"},
		{`INSERT INTO ordered_keys (key, seq_max, next_seq, gap_action, gap_timeout) VALUES ('x', 1, 1, 'skip', '1s')`,
			"ordered_keys: gap_action is wait, proceed or block"},
		{`INSERT INTO ordered_keys (key, seq_max, next_seq, gap_action, gap_timeout) VALUES ('x', 1, 1, 'proceed', '-1s')`,
			"ordered_keys: gap_timeout is positive"},
		{`INSERT INTO ordered_keys (key, seq_max, next_seq, gap_action) VALUES ('x', 1, 1, 'proceed')`,
			"ordered_keys: a contiguous key has a gap policy"},
		{`UPDATE ordered_keys SET gap_timeout = NULL WHERE key = 'c'`,
			"ordered_keys: a contiguous key has a gap policy"},
		{`UPDATE ordered_keys SET gap_action = 'wait' WHERE key = 'a'`,
			"ordered_keys: a contiguous key has a gap policy"},
		{`UPDATE ordered_keys SET gap_action = NULL WHERE key = 'c'`,
			"ordered_keys: a contiguous key has a gap policy"},
	} {
		t.Run(c.write, func(t *testing.T) {
			tx, err := q.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { require.NoError(t, tx.Rollback(ctx)) }()
			_, err = tx.Exec(ctx, c.write)
			require.NoError(t, err, "the schema takes the row; only the check finds it")
			broken, err := invariant.Violations(ctx, tx)
			require.NoError(t, err)
			require.Len(t, broken, 1, "%v", broken)
			require.True(t, strings.HasPrefix(broken[0], c.invariant), "%q names %q", broken[0], c.invariant)
			require.Contains(t, broken[0], "broken by 1 rows")
		})
	}
}
