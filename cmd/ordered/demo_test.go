package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// plainBin builds, once, the binary the scenario tests run: without the race detector, which
// would slow these long runs several times over (the CLI tests' cliBin has it).
// It goes beside cliBin, in the directory TestMain removes.
var plainBin = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(filepath.Dir(cliBin), "ordered-plain")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	return bin, build.Run()
})

func scenarioBin(t *testing.T) string {
	t.Helper()
	bin, err := plainBin()
	require.NoError(t, err)
	return bin
}

// The demo's short form runs end to end — workers killed and replaced included — and reports a
// clean per-key order check.
func TestDemoShortIsClean(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)

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
