package ordered

import (
	"context"
	"sync"
)

const (
	// CompleteBatchMax bounds the jobs one completion statement settles.
	CompleteBatchMax = 500
	// completeFlushesMax is how many completion statements a worker keeps in flight. Two let
	// the database work on one batch while the next is sent and use a second core; more
	// split the same jobs into smaller batches and cost more commits.
	completeFlushesMax = 2
)

// completer settles a worker's successful attempts in batches, like a group commit: the jobs
// whose handlers return while the batches in flight run go together in the next. There is no
// timer: an idle worker completes a job at once, a busy one in batches as large as what
// finished during one round trip. A job waits for its batch without a handler slot, so while
// batches are in flight the worker's slots run other jobs, and batches grow (up to
// unsettledMax jobs wait at once). In the same round trip a batch claims the next job of each
// key it completed, while the worker is fetching; that job runs in the next free slot.
type completer struct {
	w       *Worker
	mu      sync.Mutex
	pending []completion
	kick    chan struct{}
	quit    chan struct{}
	done    chan struct{}
}

type completion struct {
	job    *Job
	result chan completionResult
}

type completionResult struct {
	err error
	// next is the key's next job, claimed by the batch; nextAhead is set if the batch claimed
	// while the worker was prefetching, so next may have been claimed ahead of the slots.
	next      *Job
	nextAhead bool
}

func newCompleter(w *Worker) *completer {
	return &completer{w: w, kick: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// complete queues job's completion and waits for its batch, which always answers (the batch,
// retries included, and each single completion it may fall back to are bounded by
// settleTimeout).
func (c *completer) complete(job *Job) completionResult {
	result := make(chan completionResult, 1)
	c.mu.Lock()
	c.pending = append(c.pending, completion{job: job, result: result})
	c.mu.Unlock()
	c.signal()
	return <-result
}

func (c *completer) run() {
	defer close(c.done)
	var flushes sync.WaitGroup
	defer flushes.Wait()
	slots := make(chan struct{}, completeFlushesMax)
	for {
		select {
		case <-c.kick:
		case <-c.quit:
			return // stop is called once every completion was answered
		}
		for {
			// Take the slot before the batch, so the batch grows while all slots are busy.
			slots <- struct{}{}
			batch := c.take()
			if len(batch) == 0 {
				<-slots
				break
			}
			flushes.Add(1)
			go func() {
				defer flushes.Done()
				c.settle(batch)
				<-slots
				c.signal() // what queued meanwhile may be waiting for this slot
			}()
		}
	}
}

func (c *completer) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// stop ends run; every queued completion has been answered by then.
func (c *completer) stop() {
	close(c.quit)
	<-c.done
}

// take removes and returns up to CompleteBatchMax pending completions.
func (c *completer) take() []completion {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.pending), CompleteBatchMax)
	batch := make([]completion, n)
	copy(batch, c.pending)
	c.pending = append(c.pending[:0], c.pending[n:]...)
	return batch
}

func (c *completer) settle(batch []completion) {
	jobs := make([]*Job, len(batch))
	for i, b := range batch {
		jobs[i] = b.job
	}
	ahead := c.w.prefetch() > 0
	lost, next, err := c.completeBatch(jobs)
	if err != nil {
		// One at a time, without claims: a job the batch cannot complete then costs only
		// itself. (A batch that committed but whose answer was lost does not come here, unless
		// it timed out or asking what it did failed too: then each of these finds its claim
		// completed already and is reported lost, which is only logged and counted, and the
		// next jobs the batch claimed run again after their leases expire.)
		// One deadline for them all: a database that does not answer holds the worker, and its
		// Stop, for settleTimeout, not for settleTimeout a job.
		c.w.log.Warn("ordered: a completion batch failed; completing its jobs one at a time",
			"jobs", len(jobs), "error", err)
		ctx, cancel := context.WithTimeout(context.Background(), c.w.settleTimeout)
		defer cancel()
		for _, b := range batch {
			b.result <- completionResult{err: c.w.db.Complete(ctx, b.job)}
		}
		return
	}
	isLost := make(map[*Job]bool, len(lost))
	for _, j := range lost {
		isLost[j] = true
	}
	nextOf := make(map[string]*Job, len(next))
	for _, j := range next {
		nextOf[j.Key] = j
	}
	// A next job goes to the slot of the job whose completion made it ready.
	for _, b := range batch {
		if isLost[b.job] {
			b.result <- completionResult{err: ErrLeaseLost}
			continue
		}
		r := completionResult{next: nextOf[b.job.Key], nextAhead: ahead}
		delete(nextOf, b.job.Key)
		b.result <- r
	}
}

// completeBatch runs the batch's statement, with claims while the worker is fetching.
func (c *completer) completeBatch(jobs []*Job) (lost, next []*Job, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.w.settleTimeout)
	defer cancel()
	limit := 0
	if c.w.fetching() {
		limit = len(jobs)
	}
	return c.w.db.completeManyClaimNext(ctx, jobs, limit)
}
