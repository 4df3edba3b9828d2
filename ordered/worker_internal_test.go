package ordered

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPrefetchIsWhatTheSlotsFinishDuringAClaim(t *testing.T) {
	for _, tc := range []struct {
		name        string
		workers     int
		claim, slot time.Duration
		want        int
	}{
		{"nothing measured", 8, 0, 0, 0},
		{"no claim measured", 8, 0, time.Millisecond, 0},
		{"no slot measured", 8, time.Millisecond, 0, 0},
		{"handlers much slower than a claim", 64, time.Millisecond, 100 * time.Millisecond, 0},
		{"handlers a little slower than a claim", 8, 1300 * time.Microsecond, 5 * time.Millisecond, 0},
		{"handlers as slow as a claim", 8, time.Millisecond, time.Millisecond, 0},
		{"handlers a little quicker than a claim: two a slot", 8, 1300 * time.Microsecond, time.Millisecond, 16},
		{"handlers a quarter of a claim", 8, 2 * time.Millisecond, 500 * time.Microsecond, 32},
		{"no-op handlers: a claim's worth", 8, 1700 * time.Microsecond, 20 * time.Microsecond, ClaimBatchMax},
		{"one slot", 1, time.Millisecond, 300 * time.Microsecond, 4},
		{"more slots than a claim: one a slot at most", 1000, time.Millisecond, time.Microsecond, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, prefetchFor(tc.workers, tc.claim, tc.slot))
		})
	}
}

func TestSlotWaitMaxIsFourClaimsOrTheMinimum(t *testing.T) {
	require.Equal(t, slotWaitMin, slotWaitMax(0), "no claim measured")
	require.Equal(t, slotWaitMin, slotWaitMax(2*time.Millisecond))
	require.Equal(t, 80*time.Millisecond, slotWaitMax(20*time.Millisecond))
}

func TestRaiseOnlyRaises(t *testing.T) {
	var avg atomic.Int64
	observe(&avg, time.Millisecond)
	raise(&avg, 500*time.Microsecond)
	require.Equal(t, int64(time.Millisecond), avg.Load())
	raise(&avg, 60*time.Millisecond)
	require.Equal(t, int64(60*time.Millisecond), avg.Load())
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
