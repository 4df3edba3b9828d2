package ordered_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// A completion that hands each key to its next job writes the key's head row and the done
// job's row on their pages, with no index entry (HOT updates): no index of either table covers
// a column those writes change. A head row's write is HOT exactly when its lease end stayed on
// its grain; the jobs' writes always are. An index added on a column these writes change
// breaks the counts.
func TestCompletionWritesStayOnTheirPages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const keys = 10
	for k := range keys {
		b.enqueue(t, string(rune('a'+k)), 1, 2)
	}
	claimed, err := store.JobClaimMany(b.ctx, b.pool, keys, 7*24*time.Hour)
	require.NoError(t, err)
	require.Len(t, claimed, keys)
	ids, versions := make([]int64, keys), make([]int64, keys)
	leases := map[string]time.Time{}
	for i, j := range claimed {
		ids[i], versions[i] = j.ID, j.ClaimVersion
		leases[j.Key] = j.LeaseUntil
	}

	tx := b.beginTx(t)
	// The counts of this backend not yet flushed to the shared statistics, which include its
	// earlier transactions: the completion's are the difference, within this one transaction.
	counts := func(table string) (updates, hot int) {
		t.Helper()
		require.NoError(t, tx.QueryRow(b.ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables
			WHERE relid = to_regclass($1)`, table).Scan(&updates, &hot))
		return updates, hot
	}
	headUpdates0, headHot0 := counts("ordered_heads")
	jobUpdates0, jobHot0 := counts("ordered_jobs")
	done, next, err := store.JobCompleteMany(b.ctx, tx, ids, versions, keys, 7*24*time.Hour)
	require.NoError(t, err)
	require.Len(t, done, keys)
	require.Len(t, next, keys, "each key's next job claimed by the same write")
	sameGrain := 0
	for _, j := range next {
		if j.LeaseUntil.Equal(leases[j.Key]) {
			sameGrain++
		}
	}
	updates, hot := counts("ordered_heads")
	require.Equal(t, keys, updates-headUpdates0, "one write of each head row")
	require.Equal(t, sameGrain, hot-headHot0, "a head row's write is HOT when its lease end stayed on its grain")
	updates, hot = counts("ordered_jobs")
	require.Equal(t, keys, updates-jobUpdates0, "one write of each done job's row")
	require.Equal(t, keys, hot-jobHot0, "a done job's write enters no index")
	require.NoError(t, tx.Rollback(b.ctx))
}

// A lease ends on a grain of a sixteenth of the lease: never before the lease asked for, at
// most a grain after it, and at the same end for starts within one grain.
func TestLeaseEndsOnItsGrain(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	base := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, lease := range []time.Duration{30 * time.Second, 500 * time.Millisecond, time.Hour} {
		grain := lease / 16
		var ends []time.Time
		for _, from := range []time.Time{base, base.Add(grain / 3), base.Add(grain - time.Microsecond)} {
			var end time.Time
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT ordered_lease_end($1, $2)`, from, lease).Scan(&end))
			require.False(t, end.Before(from.Add(lease)), "lease %v from %v ends at %v", lease, from, end)
			require.LessOrEqual(t, end.Sub(from.Add(lease)), grain, "lease %v from %v ends at %v", lease, from, end)
			ends = append(ends, end)
		}
		require.Equal(t, ends[0], ends[1], "lease %v: starts within one grain end together", lease)
		require.Equal(t, ends[0], ends[2], "lease %v: starts within one grain end together", lease)
	}
}
