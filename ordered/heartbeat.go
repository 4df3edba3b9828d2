package ordered

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Lease renewal: each running job's heartbeat renews its lease and, while renewals fail,
// fences the handler by this process's clock before the lease can run out.

// startHeartbeat renews the job's lease every HeartbeatInterval, counted from the claim, until
// the heartbeat's stop is called; stop waits for a renewal in flight. A lost claim cancels
// the handler. So does the fence, by this process's own clock, while renewals fail (the
// database may be unreachable, and another worker may own the job by now): StopGrace before
// the lease would run out, counted from when the last renewal that succeeded (or the claim)
// was sent and less a margin, so that a handler that stops within StopGrace never overlaps
// another claim of its job, even one this worker never hears of. One timer serves the beats
// and the fence, which a renewal that hangs does not put off. It is a timer, not a
// goroutine: most jobs end before their first beat, and a goroutine a job would add a stack
// that every garbage collection scans.
func (w *Worker) startHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, job *Job) *heartbeat {
	return w.startHeartbeatOf(ctx, cancel, job, nil)
}

// startBatchHeartbeat is startHeartbeat for a batch: one lease, all its jobs renewed in one
// statement; the claim of any of them lost is the batch's lost.
func (w *Worker) startBatchHeartbeat(ctx context.Context, cancel context.CancelCauseFunc, batch []*Job) *heartbeat {
	return w.startHeartbeatOf(ctx, cancel, batch[0], batch)
}

func (w *Worker) startHeartbeatOf(ctx context.Context, cancel context.CancelCauseFunc, job *Job, batch []*Job) *heartbeat {
	interval := w.cfg.HeartbeatInterval
	h := &heartbeat{w: w, ctx: ctx, cancel: cancel, job: job, batch: batch, fence: w.fenceAfter(job.claimedAt)}
	next := job.claimedAt.Add(interval)
	if sent := time.Now(); sent.After(h.fence.Add(-interval)) {
		// The claim took so long to answer (a completion batch that waited for its keys) that
		// the fence is near: the lease is renewed before the job goes on, or the job goes
		// back unrun (or is lost).
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
		err := h.renew(rctx)
		rcancel()
		if err != nil {
			w.log.Warn("ordered: could not renew a lease that the claim's answer took long to bring", slogJob(job.ID, job.Key, job.Seq), "error", err)
			h.over = true
			cancel(ErrLeaseLost)
		}
		h.fence, next = w.fenceAfter(sent), sent.Add(interval)
	}
	h.mu.Lock()
	h.timer = time.AfterFunc(time.Until(next), h.beat)
	h.mu.Unlock()
	job.heartbeat = h
	for _, j := range batch {
		j.heartbeat = h
	}
	return h
}

// fenceAfter is when a job's handler is cancelled if no renewal sent after sent succeeds: the
// lease counted from sent, by this process's clock, less a tenth for margin and StopGrace.
func (w *Worker) fenceAfter(sent time.Time) time.Time {
	lease := w.client.cfg.Lease
	return sent.Add(lease - lease/10 - w.cfg.StopGrace)
}

// heartbeat is one job's lease renewal, in one allocation.
type heartbeat struct {
	w      *Worker
	ctx    context.Context
	cancel context.CancelCauseFunc
	job    *Job
	// batch, if set, is the batch job heads: its jobs are renewed together.
	batch []*Job

	mu sync.Mutex
	// fence is when the handler's context is cancelled unless a renewal succeeds first.
	fence time.Time
	// renewing is set while a renewal is in flight; the timer waits for the fence meanwhile.
	renewing bool
	// over is set once the heartbeat is stopped, the claim lost or the fence passed.
	over     bool
	lastErr  error
	inFlight sync.WaitGroup
	timer    *time.Timer
}

// beat is the timer's: it renews the lease, or cancels the handler once the fence has passed.
func (h *heartbeat) beat() {
	w, job := h.w, h.job
	h.mu.Lock()
	if h.over {
		h.mu.Unlock()
		return
	}
	sent := time.Now()
	if !sent.Before(h.fence) {
		// No renewal succeeded in time, or the one in flight hangs.
		h.over = true
		lastErr := h.lastErr
		h.mu.Unlock()
		if lastErr != nil {
			w.log.Warn("ordered: lease running out while renewals fail; cancelling the handler",
				slogJob(job.ID, job.Key, job.Seq), "error", lastErr)
		} else {
			w.log.Warn("ordered: lease running out with no renewal in time (this process paused, or its renewals slow); cancelling the handler",
				slogJob(job.ID, job.Key, job.Seq))
		}
		h.cancel(ErrLeaseLost)
		return
	}
	if h.renewing {
		// A beat that fired as the renewal before it returned: that renewal sets the timer.
		h.mu.Unlock()
		return
	}
	h.renewing = true
	h.timer.Reset(h.fence.Sub(sent))
	h.inFlight.Add(1) // under mu: stop's Wait cannot have begun
	h.mu.Unlock()
	defer h.inFlight.Done()

	interval := w.cfg.HeartbeatInterval
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(h.ctx), interval)
	err := h.renew(rctx)
	rcancel()

	h.mu.Lock()
	h.renewing = false
	lost := false
	switch {
	case h.over:
		// Stopped, or the fence passed while the renewal was in flight: whatever the
		// database answered comes too late.
	case err == nil:
		h.fence = w.fenceAfter(sent)
	case errors.Is(err, ErrLeaseLost):
		h.over, lost = true, true
		h.timer.Stop()
	default:
		// The next beat tries again; the fence cancels the handler if none succeeds in time.
		h.lastErr = err
		w.log.Warn("ordered: lease renewal failed", slogJob(job.ID, job.Key, job.Seq), "error", err)
	}
	if !h.over {
		// The beats keep their cadence, and never pass the fence.
		next := sent.Add(interval)
		if h.fence.Before(next) {
			next = h.fence
		}
		h.timer.Reset(time.Until(next))
	}
	h.mu.Unlock()
	if lost {
		h.cancel(ErrLeaseLost)
	}
}

// renew renews the job's lease, or the batch's.
func (h *heartbeat) renew(ctx context.Context) error {
	if h.batch != nil {
		return h.w.db.RenewBatch(ctx, h.batch)
	}
	_, err := h.w.db.Renew(ctx, h.job)
	return err
}

func (h *heartbeat) stop() {
	h.mu.Lock()
	h.over = true
	h.timer.Stop()
	h.mu.Unlock()
	h.inFlight.Wait()
}
