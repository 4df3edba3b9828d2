package ordered_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// A batch worker on contiguous keys: a batch never runs past a missing seq, the key waits on
// the gap with its later events unrun, and once producers fill the gaps, concurrently, the
// batches go on from there. Every key runs 1…n once, in order, and every batch is unbroken.
func TestBatchWorkerOnContiguousKeysStopsAtGaps(t *testing.T) {
	t.Parallel()
	cfg := contiguous(policy.GapWait, 0, policy.Block)
	b := setup(t, cfg)
	const keys, perKey = 4, 20
	missing := []int64{8, 15}

	var events []ordered.Event
	for k := range keys {
		for s := int64(1); s <= perKey; s++ {
			if !slices.Contains(missing, s) {
				events = append(events, ordered.Event{Key: fmt.Sprintf("k%d", k), Seq: s})
			}
		}
	}
	rand.New(rand.NewPCG(3, 3)).Shuffle(len(events), func(i, j int) { events[i], events[j] = events[j], events[i] })
	_, err := b.client.EnqueueMany(b.ctx, events)
	require.NoError(t, err)

	var mu sync.Mutex
	ran := map[string][]int64{}
	var batches [][]int64
	startBatchWorker(t, b, b.client, func(_ context.Context, jobs []*ordered.Job) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		batches = append(batches, seqsOf(jobs))
		for _, j := range jobs {
			ran[j.Key] = append(ran[j.Key], j.Seq)
		}
		return len(jobs), nil
	}, &ordered.WorkerConfig{Workers: 2, BatchSize: 50, PollInterval: 20 * time.Millisecond})

	ranUpTo := func(upTo int64) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for k := range keys {
				if len(ran[fmt.Sprintf("k%d", k)]) < int(upTo) {
					return false
				}
			}
			return true
		}
	}
	// The gap at missing[0] holds every key; filling it concurrently releases each, up to the
	// next gap, and so on.
	for i, gap := range missing {
		waitFor(t, time.Minute, fmt.Sprintf("every key run up to seq %d", gap-1), ranUpTo(gap-1))
		waitFor(t, time.Minute, fmt.Sprintf("every key waiting on its gap at %d", gap), func() bool {
			for k := range keys {
				if g := gapOf(t, b, fmt.Sprintf("k%d", k)); g.NextSeq != gap || !g.Waiting {
					return false
				}
			}
			return true
		})
		mu.Lock()
		for k, seqs := range ran {
			require.Equal(t, gap-1, slices.Max(seqs), "%s ran past its gap at %d", k, gap)
		}
		mu.Unlock()
		var wg sync.WaitGroup
		for k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := b.newClient(t, cfg).Enqueue(b.ctx, ordered.Event{Key: fmt.Sprintf("k%d", k), Seq: gap})
				require.NoError(t, err)
			}()
		}
		wg.Wait()
		if i == len(missing)-1 {
			waitFor(t, time.Minute, "every key run to its end", ranUpTo(perKey))
		}
	}

	mu.Lock()
	defer mu.Unlock()
	want := make([]int64, perKey)
	for i := range want {
		want[i] = int64(i + 1)
	}
	for k := range keys {
		require.Equal(t, want, ran[fmt.Sprintf("k%d", k)], "k%d ran out of order or twice", k)
	}
	longest := 0
	for _, seqs := range batches {
		for i := 1; i < len(seqs); i++ {
			require.Equal(t, seqs[i-1]+1, seqs[i], "a batch of a contiguous key skipped a seq: %v", seqs)
		}
		longest = max(longest, len(seqs))
	}
	require.Greater(t, longest, 1, "no batch held more than one job")
}

// Gaps counts a running batch's later jobs as running: a contiguous key's batch up to its
// hole runs whole.
func TestGapsCountABatchsLaterJobsAsRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, contiguous(policy.GapWait, 0, policy.Block))
	b.enqueue(t, "c", 1, 2, 3, 5)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, []int64{1, 2, 3}, seqsOf(batches[0]))
	g := gapOf(t, b, "c")
	require.Equal(t, [2]int64{4, 3}, [2]int64{g.OpenJobs, g.Running}, "open, running")
}
