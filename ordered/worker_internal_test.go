package ordered

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPrefetchIsWhatTheSlotsRunDuringAClaim(t *testing.T) {
	for _, tc := range []struct {
		name        string
		workers     int
		claim, slot time.Duration
		want        int
	}{
		{"nothing measured", 8, 0, 0, 0},
		{"no claim measured", 8, 0, time.Millisecond, 0},
		{"no slot measured", 8, time.Millisecond, 0, 0},
		{"handlers slower than a claim", 64, time.Millisecond, 100 * time.Millisecond, 0},
		{"a claim's time runs two jobs a slot", 4, 2 * time.Millisecond, time.Millisecond, 8},
		{"part of a job a slot", 8, time.Millisecond, 4 * time.Millisecond, 2},
		{"no-op handlers: one claim's worth at most", 8, 1300 * time.Microsecond, 20 * time.Microsecond, ClaimBatchMax},
		{"many slots: one claim's worth at most", 1000, time.Millisecond, time.Millisecond, ClaimBatchMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, prefetchFor(tc.workers, tc.claim, tc.slot))
		})
	}
}

func TestObserveMovesOneEighthTowardTheSample(t *testing.T) {
	var avg atomic.Int64
	observe(&avg, 800*time.Microsecond)
	require.Equal(t, int64(800*time.Microsecond), avg.Load(), "the first sample sets the average")
	observe(&avg, 400*time.Microsecond)
	require.Equal(t, int64(750*time.Microsecond), avg.Load())
	observe(&avg, 8750*time.Microsecond)
	require.Equal(t, int64(1750*time.Microsecond), avg.Load())
}
