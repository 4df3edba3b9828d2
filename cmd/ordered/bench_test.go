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
	require.Equal(t, 3*2+3, units["jobs/s"], "3 throughput shapes with 8 and 64 handlers, 2 hot-key drains, the deep backlog")
	require.Equal(t, 2, units["events/s"], "bulk and single enqueue")
	require.Equal(t, 1, units["ratio"], "hot-key flatness")
	require.Equal(t, 2+4+5, units["ms"], "deep p50/p99, wake-up p50/p99 twice, 5 churn windows")
}
