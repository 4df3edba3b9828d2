package bench

import (
	"time"

	dto "github.com/prometheus/client_model/go"
)

// bucketQuantile estimates a quantile of the observations between two snapshots of a
// histogram as the upper bound of the bucket that holds it.
func bucketQuantile(prev, cur *dto.Histogram, q float64) float64 {
	if cur == nil {
		return 0
	}
	count := cur.GetSampleCount()
	if prev != nil {
		count -= prev.GetSampleCount()
	}
	if count == 0 {
		return 0
	}
	target := uint64(q * float64(count))
	for i, bk := range cur.GetBucket() {
		n := bk.GetCumulativeCount()
		if prev != nil {
			n -= prev.GetBucket()[i].GetCumulativeCount()
		}
		if n >= target {
			return bk.GetUpperBound()
		}
	}
	return cur.GetBucket()[len(cur.GetBucket())-1].GetUpperBound()
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(p*float64(len(sorted))), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
