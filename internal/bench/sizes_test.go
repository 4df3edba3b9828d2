package bench

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A size given that is not positive is refused by its flag's name, and leaves the base as it
// was; a size not given is not checked.
func TestApplyFlagsRefusesSizesNotPositive(t *testing.T) {
	t.Parallel()
	for flag, want := range map[string]string{
		"per-key":   "--per-key must be positive, got 0",
		"deep-time": "--deep-time must be positive, got -1s",
		"handlers":  "--handlers must list positive numbers, got [8 -1]",
	} {
		set := Full
		set.PerKey, set.DeepTime, set.Handlers = 0, -time.Second, []int{8, -1}
		base := Quick
		base.Concurrency, base.Handlers = slices.Clone(base.Concurrency), slices.Clone(base.Handlers)
		err := ApplyFlags(&base, &set, func(name string) bool { return name == flag })
		require.EqualError(t, err, want)
		require.Equal(t, Quick, base, flag)

		require.NoError(t, ApplyFlags(&base, &set, func(string) bool { return false }))
	}
}

// Every flag names a size of its own: no two flags share a name or a size.
func TestFlagsAreDistinct(t *testing.T) {
	t.Parallel()
	var s Sizes
	names := map[string]bool{}
	values := map[any]bool{}
	for _, f := range s.Flags() {
		require.False(t, names[f.Name], f.Name)
		require.False(t, values[f.Value], f.Name)
		names[f.Name], values[f.Value] = true, true
	}
	require.Len(t, names, 20)
}
