package ordered_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// keyHistory is what the workers saw of one key. Its mutex is held across a settle call and
// its bookkeeping, so a claim of the key's next job (possible as soon as the settle commits)
// checks the record only after it is written.
type keyHistory struct {
	mu       sync.Mutex
	running  map[int64]bool // seqs being worked on right now
	finished map[int64]bool // seqs done or failed for good
	done     []int64        // seqs in completion order
}

// A randomized concurrent run: many workers, many keys, random retries, permanent failures
// and crashes (abandoned claims recovered after their lease). The recorded history must show,
// for every key, no two jobs at once, no job started before all earlier ones finished, and
// completions in seq order; every job must end done or failed, none lost or done twice.
func TestRandomizedConcurrentHistoryKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	// Crashes are recovered when their lease ends for real; a lease of a few seconds keeps a
	// stall of the test process from ending those of live claims too.
	const lease = 4 * time.Second
	b := setup(t, &ordered.Config{
		Lease:   lease,
		Policy:  policy.Always(policy.Skip),
		Backoff: policy.Exponential{Base: time.Millisecond, Max: 20 * time.Millisecond},
	})
	const keys, perKey, workers = 40, 30, 8

	histories := make(map[string]*keyHistory, keys)
	for k := range keys {
		histories[fmt.Sprintf("key-%02d", k)] = &keyHistory{running: map[int64]bool{}, finished: map[int64]bool{}}
	}
	// Producers enqueue each key's events in shuffled batches, concurrently with the workers.
	var producers sync.WaitGroup
	for p := range 4 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			for k := p; k < keys; k += 4 {
				key := fmt.Sprintf("key-%02d", k)
				for lo := 0; lo < perKey; lo += 10 {
					batch := make([]ordered.Event, 0, 10)
					for s := lo; s < lo+10; s++ {
						batch = append(batch, ordered.Event{Key: key, Seq: int64(s), Payload: []byte(`{"n":1}`)})
					}
					rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
					_, err := b.client.EnqueueMany(b.ctx, batch)
					if errors.Is(err, ordered.ErrLateEvent) {
						// A worker already started a later seq of the key: rejected, as it must be.
						t.Errorf("unexpected late event: %v", err)
					}
					require.NoError(t, err)
				}
			}
		}()
	}

	var violations []string
	var vmu sync.Mutex
	violate := func(format string, args ...any) {
		vmu.Lock()
		violations = append(violations, fmt.Sprintf(format, args...))
		vmu.Unlock()
	}
	total := keys * perKey
	var settled sync.WaitGroup
	settled.Add(total)
	stop := make(chan struct{})

	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Add(1)
		go func() {
			defer workersWG.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			c := b.newClient(t, &ordered.Config{
				Lease: lease, Policy: policy.Always(policy.Skip),
				Backoff: policy.Exponential{Base: time.Millisecond, Max: 20 * time.Millisecond},
			})
			for {
				select {
				case <-stop:
					return
				default:
				}
				jobs, err := c.Claim(b.ctx, 1+rng.IntN(3))
				if err != nil {
					violate("claim: %v", err)
					return
				}
				if len(jobs) == 0 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				for _, j := range jobs {
					h := histories[j.Key]
					h.mu.Lock()
					for s := range j.Seq {
						if !h.finished[s] {
							violate("%s started before seq %d finished", j.IdempotencyKey(), s)
						}
					}
					if len(h.running) > 0 {
						violate("%s started while %v of its key ran", j.IdempotencyKey(), h.running)
					}
					h.running[j.Seq] = true
					h.mu.Unlock()

					time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond) // the "work"

					h.mu.Lock()
					delete(h.running, j.Seq)
					switch r := rng.IntN(100); {
					case r < 4: // crash: walk away; the lease expires and the job is recovered
					case r < 14:
						out, err := c.Retry(b.ctx, j, errors.New("transient"))
						if err != nil {
							violate("retry %s: %v", j.IdempotencyKey(), err)
						} else if out != ordered.OutcomeRetried {
							h.finished[j.Seq] = true
							settled.Done()
						}
					case r < 16:
						if _, err := c.Fail(b.ctx, j, errors.New("poison")); err != nil {
							violate("fail %s: %v", j.IdempotencyKey(), err)
						} else {
							h.finished[j.Seq] = true
							settled.Done()
						}
					default:
						if err := c.Complete(b.ctx, j); err != nil {
							violate("complete %s: %v", j.IdempotencyKey(), err)
						} else {
							if h.finished[j.Seq] {
								violate("%s finished twice", j.IdempotencyKey())
							}
							h.finished[j.Seq] = true
							h.done = append(h.done, j.Seq)
							settled.Done()
						}
					}
					h.mu.Unlock()
				}
			}
		}()
	}

	producers.Wait()
	finished := make(chan struct{})
	go func() { settled.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(90 * time.Second):
		t.Error("not every job settled in time")
	}
	close(stop)
	workersWG.Wait()
	require.Empty(t, violations)

	for key, h := range histories {
		require.Len(t, h.finished, perKey, "key %s", key)
		for i := 1; i < len(h.done); i++ {
			require.Less(t, h.done[i-1], h.done[i], "key %s completed out of order: %v", key, h.done)
		}
	}
	var open int
	require.NoError(t, b.pool.QueryRow(b.ctx,
		`SELECT count(*) FROM ordered_jobs_now WHERE status NOT IN ('done', 'failed')`).Scan(&open))
	require.Zero(t, open)
	requireHeadInvariant(t, b)
}

// requireHeadInvariant checks the head rows: no head row points at a finished job (or at none),
// and every key with open jobs (queued or blocked in their rows) has one, at its lowest open job.
func requireHeadInvariant(t *testing.T, b *testBundle) {
	t.Helper()
	var finishedHeads, badKeys int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_heads AS h
		LEFT JOIN ordered_jobs AS j ON j.id = h.job_id
		WHERE j.id IS NULL OR j.status IN ('done', 'failed')`).Scan(&finishedHeads))
	require.Zero(t, finishedHeads, "a finished job is still a head")
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT count(*) FROM (
		    SELECT key FROM ordered_jobs_now WHERE row_status IN ('queued', 'blocked')
		    GROUP BY key
		    HAVING count(*) FILTER (WHERE head) <> 1
		        OR min(seq) <> min(seq) FILTER (WHERE head)) AS bad`).Scan(&badKeys))
	require.Zero(t, badKeys, "a key's head is not its lowest open job")
}
