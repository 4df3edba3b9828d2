package bench

import (
	"fmt"
	"slices"
	"time"
)

// Sizes are the sizes of one bench run; each is a flag of `ordered bench` (see Flags).
type Sizes struct {
	// CeilingTime is the length of each ceiling measurement, at each of Concurrency.
	CeilingTime time.Duration
	Concurrency []int
	// Throughput: (a) Many jobs over ManyKeys keys, (b) OrderedKeys keys × PerKey jobs, (c)
	// Serial jobs of one key; each drained once with each of Handlers handlers: the
	// concurrency, and more, since a worker's batches (one commit each) can be no larger than
	// its handlers.
	Many, ManyKeys      int
	OrderedKeys, PerKey int
	Serial              int
	// BatchSize is the batch workers' BatchSize in the batched drains of (b) and (c).
	BatchSize          int
	Handlers           []int
	HotSmall, HotBig   int // the hot key's backlogs
	HotOthers          int // other keys drained, one job each
	DeepJobs, DeepKeys int
	DeepTime           time.Duration
	Bulk               int // events of the bulk enqueue
	SingleTime         time.Duration
	WakeSamples        int
	Churn              time.Duration
	ChurnRate          int // events/s
}

// Full is the full run's sizes.
var Full = Sizes{
	CeilingTime: 10 * time.Second,
	ManyKeys:    10_000, Many: 50_000,
	OrderedKeys: 1_000, PerKey: 50,
	Serial: 5_000, BatchSize: 100,
	HotSmall: 1_000, HotBig: 1_000_000, HotOthers: 1_000,
	DeepJobs: 1_000_000, DeepKeys: 100_000, DeepTime: 10 * time.Second,
	Bulk:        100_000,
	SingleTime:  5 * time.Second,
	WakeSamples: 100,
	Churn:       5 * time.Minute, ChurnRate: 500,
	Concurrency: []int{8, 64},
	Handlers:    []int{8, 64, 1000},
}

// Quick is the smoke test's sizes: a minute, not a measurement.
var Quick = Sizes{
	CeilingTime: time.Second,
	ManyKeys:    500, Many: 2_000,
	OrderedKeys: 50, PerKey: 40,
	Serial: 300, BatchSize: 50,
	HotSmall: 1_000, HotBig: 20_000, HotOthers: 200,
	DeepJobs: 20_000, DeepKeys: 2_000, DeepTime: time.Second,
	Bulk:        20_000,
	SingleTime:  time.Second,
	WakeSamples: 20,
	Churn:       4 * time.Second, ChurnRate: 500,
	Concurrency: []int{8},
	Handlers:    []int{8, 64},
}

// SizeFlag is one size of a bench run as a command-line flag.
type SizeFlag struct {
	Name, Usage string
	// Value points into a Sizes: an *int, a *time.Duration or an *[]int.
	Value any
}

// Flags lists the flags of the sizes in s, in the same order for any s.
func (s *Sizes) Flags() []SizeFlag {
	return []SizeFlag{
		{"ceiling-time", "length of each ceiling measurement", &s.CeilingTime},
		{"ceiling-clients", "ceiling concurrencies (the largest is the ratios' yardstick)", &s.Concurrency},
		{"many-jobs", "throughput (a): jobs", &s.Many},
		{"many-keys", "throughput (a): keys", &s.ManyKeys},
		{"ordered-keys", "throughput (b): keys", &s.OrderedKeys},
		{"per-key", "throughput (b): jobs per key", &s.PerKey},
		{"serial-jobs", "throughput (c): jobs of the one key", &s.Serial},
		{"batch-size", "throughput (b) and (c): the batch workers' batch size", &s.BatchSize},
		{"handlers", "throughput: handler counts, one drain each", &s.Handlers},
		{"hot-small", "hot key: the small backlog", &s.HotSmall},
		{"hot-big", "hot key: the big backlog", &s.HotBig},
		{"hot-others", "hot key: other keys drained, one job each", &s.HotOthers},
		{"deep-jobs", "deep backlog: queued jobs", &s.DeepJobs},
		{"deep-keys", "deep backlog: keys", &s.DeepKeys},
		{"deep-time", "deep backlog: length of the measurement", &s.DeepTime},
		{"bulk-events", "bulk enqueue: events", &s.Bulk},
		{"single-time", "single-event enqueue: length of the measurement", &s.SingleTime},
		{"wake-samples", "wake-up: samples of each mode", &s.WakeSamples},
		{"churn-rate", "churn: events/s", &s.ChurnRate},
		{"duration", "churn: length of the run", &s.Churn},
	}
}

// ApplyFlags copies into base the sizes of set whose flags were given (changed), and checks that
// each is positive.
func ApplyFlags(base, set *Sizes, changed func(name string) bool) error {
	into := base.Flags()
	for i, fl := range set.Flags() {
		if !changed(fl.Name) {
			continue
		}
		switch v := fl.Value.(type) {
		case *int:
			if *v <= 0 {
				return fmt.Errorf("--%s must be positive, got %d", fl.Name, *v)
			}
			*into[i].Value.(*int) = *v
		case *time.Duration:
			if *v <= 0 {
				return fmt.Errorf("--%s must be positive, got %s", fl.Name, *v)
			}
			*into[i].Value.(*time.Duration) = *v
		case *[]int:
			if len(*v) == 0 || slices.Min(*v) <= 0 {
				return fmt.Errorf("--%s must list positive numbers, got %v", fl.Name, *v)
			}
			*into[i].Value.(*[]int) = slices.Clone(*v)
		}
	}
	return nil
}
