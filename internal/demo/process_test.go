package demo

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/testdb"
	"github.com/orderedq/ordered/ordered"
)

// A worker process that ends on its own (here: every one, as the test binary has no worker)
// ends the run with an error that names it, instead of a progress bar that waits for ever.
func TestRunFailsWhenAWorkerProcessEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	// A file, which the worker processes write to directly (a buffer would be written by one
	// copying goroutine per process at once).
	stderr, err := os.CreateTemp(t.TempDir(), "stderr")
	require.NoError(t, err)
	defer stderr.Close()
	err = Run(ctx, Options{
		DatabaseURL: testdb.DatabaseURL(),
		Policy:      "block",
		Workers:     2,
		Events:      []ordered.Event{{Key: "cust-1", Seq: 1}, {Key: "cust-1", Seq: 2}},
		Stderr:      stderr,
	}, &out)
	// Both end at once; whichever the demo sees first is named.
	require.Error(t, err, out.String())
	require.Regexp(t, `^worker process worker-[12] ended before the run did \(exit status 3\)`, err.Error())
	require.NoError(t, ctx.Err(), "the run ended by itself")
	logged, err := os.ReadFile(stderr.Name())
	require.NoError(t, err)
	require.Contains(t, string(logged), "demo test worker: no worker in a test binary")
}
