package completer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// run starts c's loop and returns its stop.
func run[J, R any](c *Completer[J, R]) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

// While every flush is in flight, what queues meanwhile goes together in the next batch, and
// each caller gets its own item's answer.
func TestItemsQueuedDuringAFlushGoInTheNextBatch(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	var batches [][]int
	c := New(func(batch []int) []int {
		mu.Lock()
		batches = append(batches, append([]int(nil), batch...))
		first := len(batches) == 1
		mu.Unlock()
		if first {
			<-release // the only flush slot stays busy until the others queued
		}
		out := make([]int, len(batch))
		for i, x := range batch {
			out[i] = x * 10
		}
		return out
	}, 100, 1)
	defer run(c)()

	answers := make(chan [2]int, 6)
	complete := func(x int) {
		r, err := c.Complete(x)
		require.NoError(t, err)
		answers <- [2]int{x, r}
	}
	go complete(1)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(batches) == 1 }, 10*time.Second, time.Millisecond)
	var queued sync.WaitGroup
	for x := 2; x <= 6; x++ {
		queued.Add(1)
		go func() { defer queued.Done(); complete(x) }()
	}
	require.Eventually(t, func() bool { c.mu.Lock(); defer c.mu.Unlock(); return len(c.pending) == 5 }, 10*time.Second, time.Millisecond)
	close(release)
	queued.Wait()
	for range 6 {
		a := <-answers
		require.Equal(t, a[0]*10, a[1])
	}
	require.Equal(t, [][]int{{1}, {2, 3, 4, 5, 6}}, sortedBatches(batches))
}

func sortedBatches(b [][]int) [][]int {
	for _, batch := range b {
		for i := 1; i < len(batch); i++ {
			for j := i; j > 0 && batch[j] < batch[j-1]; j-- {
				batch[j], batch[j-1] = batch[j-1], batch[j]
			}
		}
	}
	return b
}

// A batch holds at most batchMax items.
func TestBatchesAreBounded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	largest := 0
	c := New(func(batch []int) []struct{} {
		mu.Lock()
		largest = max(largest, len(batch))
		mu.Unlock()
		return make([]struct{}, len(batch))
	}, 3, 2)
	defer run(c)()
	var wg sync.WaitGroup
	for x := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Complete(x)
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, largest, 3)
}

// A flush that panics, or answers too few items, answers each of its callers with an error
// instead of leaving them waiting.
func TestAFlushThatFailsAnswersEveryCallerWithAnError(t *testing.T) {
	t.Parallel()
	c := New(func(batch []int) []int {
		if batch[0] == 1 {
			panic("flush broke")
		}
		return nil
	}, 1, 1)
	defer run(c)()
	_, err := c.Complete(1)
	require.ErrorContains(t, err, "completer: flush panicked")
	require.ErrorContains(t, err, "flush broke")
	_, err = c.Complete(2)
	require.ErrorContains(t, err, "completer: flush answered 0 of 1 items")
}
