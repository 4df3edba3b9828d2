// Package maintenance owns a worker's maintenance loop: every interval (jittered, the first
// one interval after start) it checks that the queue's schema is still the worker's, fails the
// exhausted jobs of crashed workers, applies the gap policies of contiguous keys whose gap
// timed out, archives finished jobs in bounded batches, and refreshes the gauges. The statements
// are the owner's, given as funcs; each is short and bounded.
package maintenance

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// ArchiveBatchesPerPassDefault bounds one pass's archival, in batches.
const ArchiveBatchesPerPassDefault = 10

// Maintainer runs the passes.
type Maintainer struct {
	// Interval is the time between passes, jittered. The first pass waits one too: the
	// gauges may count the whole table, and a worker starting next to a deep backlog should
	// spend its first moments on jobs.
	Interval time.Duration
	// Current reports whether the queue's schema is still the one the worker was built for;
	// a pass runs its tasks only if it is. nil: always.
	Current func(ctx context.Context) bool
	// FailExhausted fails one batch of jobs whose lease expired on their last attempt, and
	// returns how many it failed.
	FailExhausted func(ctx context.Context) (int, error)
	// Archive deletes one batch of finished jobs and returns how many; nil archives nothing.
	Archive func(ctx context.Context) (int, error)
	// ExpireGaps applies the gap policy of one batch of keys whose gap timed out and returns
	// how many; nil does nothing.
	ExpireGaps func(ctx context.Context) (int, error)
	// ArchiveBatch is the batch Archive takes: a smaller answer ends the pass's archival.
	ArchiveBatch int
	// ArchiveBatchesPerPass bounds the batches a pass archives; 0 is the default.
	ArchiveBatchesPerPass int
	// RefreshStats refreshes the gauges.
	RefreshStats func(ctx context.Context) error
	// Wake is called when a pass failed jobs or passed gaps: the keys may have moved on.
	Wake func()
	// Logger receives the passes' errors.
	Logger *slog.Logger
}

// Run runs a pass every Interval until ctx ends.
func (m *Maintainer) Run(ctx context.Context) {
	timer := time.NewTimer(jitter(m.Interval))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		m.Pass(ctx)
		timer.Reset(jitter(m.Interval))
	}
}

// Pass runs one pass of maintenance. An error is logged, unless ctx ended, and the pass goes
// on with its next task.
func (m *Maintainer) Pass(ctx context.Context) {
	if m.Current != nil && !m.Current(ctx) {
		return
	}
	n, err := m.FailExhausted(ctx)
	if err != nil && ctx.Err() == nil {
		m.Logger.Error("ordered: maintenance: failing exhausted jobs", "error", err)
	}
	if n > 0 {
		m.Wake()
	}
	if m.ExpireGaps != nil {
		n, err := m.ExpireGaps(ctx)
		if err != nil && ctx.Err() == nil {
			m.Logger.Error("ordered: maintenance: expiring gaps", "error", err)
		}
		if n > 0 {
			m.Wake()
		}
	}
	if m.Archive != nil {
		batches := m.ArchiveBatchesPerPass
		if batches <= 0 {
			batches = ArchiveBatchesPerPassDefault
		}
		for range batches {
			n, err := m.Archive(ctx)
			if err != nil {
				if ctx.Err() == nil {
					m.Logger.Error("ordered: maintenance: archiving", "error", err)
				}
				break
			}
			if n < m.ArchiveBatch {
				break
			}
		}
	}
	if err := m.RefreshStats(ctx); err != nil && ctx.Err() == nil {
		m.Logger.Error("ordered: maintenance: stats", "error", err)
	}
}

// jitter returns d scaled by a random factor in [0.8, 1.2), so that workers spread out.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
