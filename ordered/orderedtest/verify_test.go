package orderedtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/history"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// An idempotent handler (it makes an event's effect only once, however often it runs) passes
// Verify through every in-process fault.
func TestVerifyIdempotentHandlerIsClean(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	made := map[history.ID]bool{}
	h := ordered.HandlerFunc(func(ctx context.Context, job *ordered.Job) error {
		mu.Lock()
		defer mu.Unlock()
		id := history.ID{Key: job.Key, Seq: job.Seq}
		if made[id] {
			return nil
		}
		made[id] = true
		return orderedtest.RecordEffect(ctx, job)
	})
	rep := orderedtest.Verify(t, h, orderedtest.VerifyOptions{})
	require.True(t, rep.Clean(), rep.String())
	require.True(t, rep.Recorded)
	require.Equal(t, 64, rep.Completed)
	require.Equal(t, 2, rep.Stalls, rep.String())
	require.Equal(t, 2, rep.Restarts, rep.String())
	require.Positive(t, rep.Terminations, rep.String())
	require.Positive(t, rep.ReExecutions, "the stalls re-run their jobs")
}

// failureTB catches a test's failures instead of failing it.
type failureTB struct {
	testing.TB
	mu     sync.Mutex
	errors []string
}

func (f *failureTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// A handler whose effect is not idempotent (it makes it on every attempt, stale ones too) is
// reported: the test fails with the report naming the duplicate effects.
func TestVerifyCatchesNonIdempotentHandler(t *testing.T) {
	t.Parallel()
	h := ordered.HandlerFunc(func(ctx context.Context, job *ordered.Job) error {
		return orderedtest.RecordEffect(ctx, job)
	})
	ft := &failureTB{TB: t}
	rep := orderedtest.Verify(ft, h, orderedtest.VerifyOptions{})
	require.False(t, rep.Clean())
	require.GreaterOrEqual(t, rep.DuplicateEffects, 2, rep.String())
	require.Len(t, ft.errors, 1)
	require.Contains(t, ft.errors[0], "orderedtest.Verify: the run is not clean")
	require.Regexp(t, `effects: [1-9]\d* duplicate, 0 missing`, ft.errors[0])
	require.Regexp(t, `key-\d{3}/\d+: effect applied [2-9] times`, ft.errors[0])
	require.True(t, strings.HasSuffix(ft.errors[0], "verify: NOT CLEAN"), ft.errors[0])
}
