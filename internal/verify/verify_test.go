package verify

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/history"
)

// A run whose history is clean but whose queue's rows break an invariant is not clean: the
// report names the invariant, and the last line says NOT CLEAN.
func TestBrokenInvariantMakesTheRunNotClean(t *testing.T) {
	clean := result{name: "block/transactional", transactional: true, report: history.Report{Enqueued: 2, Completed: 2}}
	broken := clean
	broken.name = "skip/transactional"
	broken.broken = []string{"ordered_jobs: a job has a lease exactly when it is running: broken by 1 rows"}

	var out bytes.Buffer
	require.NoError(t, printResults(&out, []result{clean}))
	require.Contains(t, out.String(), "verify: clean:")

	out.Reset()
	require.Error(t, printResults(&out, []result{clean, broken}))
	require.Contains(t, out.String(), "skip/transactional: invariant ordered_jobs: a job has a lease exactly when it is running: broken by 1 rows")
	require.Contains(t, out.String(), "verify: NOT CLEAN:")

	e := execReport{Broken: broken.broken}
	require.False(t, e.clean())
	require.Equal(t, []string{"1 broken invariants"}, e.violations())
}
