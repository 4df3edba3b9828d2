// Package completer batches completions like a group commit: the items queued while the
// batches in flight run go together in the next. It owns the batching loop and nothing of
// what a completion means: a flush func, given by the owner, settles one batch.
//
// There is no timer: an idle owner's item is flushed at once, a busy owner's in batches as
// large as what queued during one flush. A caller waits for its item's batch in Complete.
package completer

import (
	"context"
	"fmt"
	"sync"

	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/panics"
)

// Completer queues items of type J and settles them in batches with flush, which answers each
// item of a batch with an R, in the batch's order. Run its loop with Run.
type Completer[J, R any] struct {
	flush      func(batch []J) []R
	batchMax   int
	flushesMax int

	mu      sync.Mutex
	pending []waiter[J, R]
	kick    chan struct{}
}

type waiter[J, R any] struct {
	item   J
	result chan answer[R]
}

type answer[R any] struct {
	r   R
	err error
}

// New returns a Completer whose batches hold at most batchMax items, with at most flushesMax
// flushes in flight at once. flush must answer every item of its batch.
func New[J, R any](flush func(batch []J) []R, batchMax, flushesMax int) *Completer[J, R] {
	return &Completer[J, R]{flush: flush, batchMax: batchMax, flushesMax: flushesMax, kick: make(chan struct{}, 1)}
}

// Complete queues item and waits for its batch's answer. The error is not nil only if the
// batch's flush panicked or answered too few items: then no R came for item.
func (c *Completer[J, R]) Complete(item J) (R, error) {
	result := make(chan answer[R], 1)
	c.mu.Lock()
	c.pending = append(c.pending, waiter[J, R]{item: item, result: result})
	c.mu.Unlock()
	c.signal()
	a := <-result
	return a.r, a.err
}

// Run flushes batches until ctx ends, then waits for the flushes in flight. Cancel ctx only
// once every Complete has returned: what is queued after that is never flushed.
func (c *Completer[J, R]) Run(ctx context.Context) {
	var flushes conc.WaitGroup
	defer flushes.Wait()
	slots := make(chan struct{}, c.flushesMax)
	for {
		select {
		case <-c.kick:
		case <-ctx.Done():
			return
		}
		for {
			// Take the slot before the batch, so the batch grows while all slots are busy.
			slots <- struct{}{}
			batch := c.take()
			if len(batch) == 0 {
				<-slots
				break
			}
			flushes.Go(func() {
				c.settle(batch)
				<-slots
				c.signal() // what queued meanwhile may be waiting for this slot
			})
		}
	}
}

func (c *Completer[J, R]) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// take removes and returns up to batchMax pending items.
func (c *Completer[J, R]) take() []waiter[J, R] {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(len(c.pending), c.batchMax)
	batch := make([]waiter[J, R], n)
	copy(batch, c.pending)
	c.pending = append(c.pending[:0], c.pending[n:]...)
	return batch
}

// settle flushes one batch and answers its waiters; a flush that panics answers each of them
// with the panic as an error, so no caller waits for ever.
func (c *Completer[J, R]) settle(batch []waiter[J, R]) {
	items := make([]J, len(batch))
	for i, w := range batch {
		items[i] = w.item
	}
	var results []R
	var pc panics.Catcher
	pc.Try(func() { results = c.flush(items) })
	var err error
	switch r := pc.Recovered(); {
	case r != nil:
		err = fmt.Errorf("completer: flush panicked: %w", r.AsError())
	case len(results) < len(batch):
		err = fmt.Errorf("completer: flush answered %d of %d items", len(results), len(batch))
	}
	for i, w := range batch {
		if err != nil {
			w.result <- answer[R]{err: err}
			continue
		}
		w.result <- answer[R]{r: results[i]}
	}
}
