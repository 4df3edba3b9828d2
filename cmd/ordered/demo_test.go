package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// The demo's short form runs end to end — workers killed and replaced included — and reports a
// clean per-key order check.
func TestDemoShortIsClean(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "ordered")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	require.NoError(t, build.Run())

	for _, pol := range []string{"block", "skip"} {
		var out bytes.Buffer
		demo := exec.Command(bin, "demo", "--short", "--policy", pol, "--database-url", orderedtest.DatabaseURL())
		demo.Stdout, demo.Stderr = &out, &out
		require.NoError(t, demo.Run(), out.String())
		require.Contains(t, out.String(), "SIGKILL worker-1", out.String())
		require.Contains(t, out.String(), "0 order violations, 0 duplicate effects, 0 done jobs without effect", out.String())
		require.Contains(t, out.String(), "policy "+pol+":", out.String())
		require.Contains(t, out.String(), "result          clean", out.String())
	}
}
