package verify

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// A run whose history is clean but whose queue's rows break an invariant is not clean: the
// report names the invariant, and the last line says NOT CLEAN.
func TestBrokenInvariantMakesTheRunNotClean(t *testing.T) {
	clean := result{name: "block/transactional", transactional: true, report: history.Report{Enqueued: 2, Completed: 2}}
	broken := clean
	broken.name = "skip/transactional"
	broken.broken = []string{"ordered_heads: a head has a lease exactly when it is running: broken by 1 rows"}

	var out bytes.Buffer
	require.NoError(t, printResults(&out, []result{clean}))
	require.Contains(t, out.String(), "verify: clean:")

	out.Reset()
	require.Error(t, printResults(&out, []result{clean, broken}))
	require.Contains(t, out.String(), "skip/transactional: invariant ordered_heads: a head has a lease exactly when it is running: broken by 1 rows")
	require.Contains(t, out.String(), "verify: NOT CLEAN:")

	e := execReport{Broken: broken.broken}
	require.False(t, e.clean())
	require.Equal(t, []string{"1 broken invariants"}, e.violations())
}

// The invariants are checked at each fault point too: a row broken while the run is under way
// and written again before its end is still reported, with when; a check that cannot be
// taken (here: its context is over) is skipped, not taken for a clean one or a failure.
func TestInvariantBrokenUnderWayIsReported(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := orderedtest.New(t)
	_, err := q.Client(t, nil).Enqueue(ctx, ordered.Event{Key: "a", Seq: 1})
	require.NoError(t, err)
	r := &run{pool: q.Pool}

	r.checkInvariants(ctx, "before the kill at 10%")
	require.Empty(t, r.brokenMidway)
	_, err = q.Pool.Exec(ctx, `UPDATE ordered_heads SET lease_until = now() WHERE key = 'a'`)
	require.NoError(t, err)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	r.checkInvariants(gone, "before the stall at 20%")
	r.checkInvariants(ctx, "before the restart at 45%")
	_, err = q.Pool.Exec(ctx, `UPDATE ordered_heads SET lease_until = NULL WHERE key = 'a'`)
	require.NoError(t, err)

	broken, err := r.brokenInvariants(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"before the restart at 45%: ordered_heads: a head has a lease exactly when it is running: broken by 1 rows"}, broken)
	require.False(t, result{broken: broken}.clean())
}
