package cli

import (
	"slices"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/bench"
)

// Each size flag sets its own size, and only the flags given override a size set.
func TestBenchSizeFlagsMapEachSize(t *testing.T) {
	t.Parallel()
	parse := func(args ...string) bench.Sizes {
		t.Helper()
		set := bench.Full
		cmd := &cobra.Command{}
		registerSizeFlags(cmd, &set)
		require.NoError(t, cmd.Flags().Parse(args))
		got := bench.Quick
		got.Concurrency, got.Handlers = slices.Clone(got.Concurrency), slices.Clone(got.Handlers)
		require.NoError(t, bench.ApplyFlags(&got, &set, cmd.Flags().Changed))
		return got
	}

	require.Equal(t, bench.Sizes{
		CeilingTime: time.Millisecond, Concurrency: []int{2},
		Many: 3, ManyKeys: 4, OrderedKeys: 5, PerKey: 6, Serial: 7, Handlers: []int{8, 9},
		HotSmall: 10, HotBig: 11, HotOthers: 12,
		DeepJobs: 13, DeepKeys: 14, DeepTime: 15 * time.Millisecond,
		Bulk: 16, SingleTime: 17 * time.Millisecond, WakeSamples: 18,
		ChurnRate: 19, Churn: 20 * time.Millisecond, BatchSize: 21,
	}, parse("--ceiling-time=1ms", "--ceiling-clients=2", "--many-jobs=3", "--many-keys=4",
		"--ordered-keys=5", "--per-key=6", "--serial-jobs=7", "--handlers=8,9", "--hot-small=10",
		"--hot-big=11", "--hot-others=12", "--deep-jobs=13", "--deep-keys=14", "--deep-time=15ms",
		"--bulk-events=16", "--single-time=17ms", "--wake-samples=18", "--churn-rate=19",
		"--duration=20ms", "--batch-size=21"), "every size has a flag of its own")

	want := bench.Quick
	want.PerKey = 6
	require.Equal(t, want, parse("--per-key=6"), "one flag changes one size")
}
