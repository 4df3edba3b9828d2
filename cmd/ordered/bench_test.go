package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// `ordered bench --quick` runs every scenario and prints every figure: a smoke test of the
// bench, not a measurement.
func TestBenchQuickRuns(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)

	var out, errOut bytes.Buffer
	bench := exec.Command(bin, "bench", "--quick", "--json", "--database-url", orderedtest.DatabaseURL())
	bench.Stdout, bench.Stderr = &out, &errOut
	require.NoError(t, bench.Run(), errOut.String())
	var figures []struct {
		Name  string   `json:"name"`
		Value float64  `json:"value"`
		Unit  string   `json:"unit"`
		Ratio *float64 `json:"ratio_to_ceiling"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &figures), out.String())
	units := map[string]int{}
	for _, f := range figures {
		units[f.Unit]++
		if f.Unit == "jobs/s" || f.Unit == "events/s" {
			require.NotNil(t, f.Ratio, "%s has no ratio to the ceiling", f.Name)
			require.Positive(t, f.Value, f.Name)
		}
	}
	require.Equal(t, 1, units["commits/s"], "the ceiling")
	require.Equal(t, (3+2)*2+3, units["jobs/s"],
		"3 throughput shapes and 2 of them again in batches, with 8 and 64 handlers, 2 hot-key drains, the deep backlog")
	require.Equal(t, 2, units["events/s"], "bulk and single enqueue")
	require.Equal(t, 1, units["ratio"], "hot-key flatness")
	require.Equal(t, 1, units["inserts/s"], "the plain INSERT beside single enqueue")
	require.Equal(t, 2+4+4+5, units["ms"],
		"deep p50/p99, one producer's p50/p99 of the plain INSERT and of enqueue, wake-up p50/p99 twice, 5 churn windows")
}

// Sizes are flags: a run takes the sizes it is given, and a size that is not positive is
// refused with one line that names its flag, before anything runs.
func TestBenchSizeFlags(t *testing.T) {
	t.Parallel()
	bin := scenarioBin(t)

	var out, errOut bytes.Buffer
	bench := exec.Command(bin, "bench", "--quick", "--json", "--only", "throughput",
		"--ceiling-time", "200ms", "--ceiling-clients", "2", "--many-jobs", "30", "--many-keys", "10",
		"--ordered-keys", "7", "--per-key", "3", "--serial-jobs", "5", "--handlers", "4", "--batch-size", "2",
		"--database-url", orderedtest.DatabaseURL())
	bench.Stdout, bench.Stderr = &out, &errOut
	require.NoError(t, bench.Run(), errOut.String())
	var figures []struct {
		Name string `json:"name"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &figures), out.String())
	var names []string
	for _, f := range figures {
		names = append(names, f.Name)
	}
	require.Equal(t, []string{
		"ceiling: single-row UPDATE commits, 2 clients",
		"throughput (a) 30 jobs over 10 keys, 4 handlers",
		"throughput (b) 7 keys x 3 jobs, 4 handlers",
		"throughput (b) 7 keys x 3 jobs, batches of 2, 4 handlers",
		"throughput (c) one key x 5 jobs, 4 handlers",
		"throughput (c) one key x 5 jobs, batches of 2, 4 handlers",
	}, names)

	for flag, want := range map[string]string{
		"--per-key=0":        "--per-key must be positive, got 0",
		"--deep-time=-1s":    "--deep-time must be positive, got -1s",
		"--handlers=8,-1":    "--handlers must list positive numbers, got [8 -1]",
		"--ceiling-clients=": `invalid argument "" for "--ceiling-clients" flag`,
	} {
		var errOut bytes.Buffer
		bad := exec.Command(bin, "bench", "--quick", flag, "--database-url", orderedtest.DatabaseURL())
		bad.Stderr = &errOut
		require.Error(t, bad.Run(), flag)
		require.Equal(t, 1, bytes.Count(errOut.Bytes(), []byte("\n")), "one line: %q", errOut.String())
		require.Contains(t, errOut.String(), want)
	}
}
