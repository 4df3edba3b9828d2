package ordered_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// A worker's slots are taken by handlers only: a job whose handler succeeded waits for its
// completion batch without one. These tests hold completions and failures up at the
// database (an open enqueue transaction of their keys) to see what the slots do meanwhile.

// statementsBlockedBy counts this test's statements whose text matches pattern (a regular
// expression, on the first 1 kB that pg_stat_activity keeps) and that wait for a lock the
// session of tx holds.
func (b *testBundle) statementsBlockedBy(t *testing.T, tx pgx.Tx, pattern string) int {
	t.Helper()
	var holder, n int
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&holder))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE $1 = ANY (pg_blocking_pids(pid)) AND query ~ $2`, holder, pattern).Scan(&n))
	return n
}

// holdKeys enqueues seq to each key in a transaction left open (rolled back when the test
// ends): completions and failures of those keys wait for it.
func (b *testBundle) holdKeys(t *testing.T, c *ordered.Client, seq int64, keys ...string) pgx.Tx {
	t.Helper()
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	for _, k := range keys {
		_, err = c.EnqueueTx(b.ctx, tx, ordered.Event{Key: k, Seq: seq})
		require.NoError(t, err)
	}
	return tx
}

// A handler's slot is free as soon as it returns: the job waits for its completion batch
// without one. With one slot and a completion held up at the database (an open enqueue of
// its key), other keys' jobs still run, and the held-up key goes on in order afterwards.
func TestWorkerHandlersDoNotWaitForCompletions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "a", 1)
	var mu sync.Mutex
	var ran []string
	release := make(chan struct{})
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		if j.Key == "a" && j.Seq == 1 {
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, fmt.Sprintf("%s/%d", j.Key, j.Seq))
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: 50 * time.Millisecond})
	waitFor(t, 10*time.Second, "a/1 running", func() bool { return b.countStatus(t, "running") == 1 })

	// a/2 is enqueued in a transaction left open: a/1's completion waits for it.
	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	_, err = b.client.EnqueueTx(b.ctx, tx, ordered.Event{Key: "a", Seq: 2})
	require.NoError(t, err)
	close(release)
	waitFor(t, 10*time.Second, "a/1's completion waiting for the key", func() bool {
		return b.completionsBlockedBy(t, tx) > 0
	})

	for i := range 5 {
		b.enqueue(t, fmt.Sprintf("b%d", i), 1)
	}
	waitFor(t, 10*time.Second, "the other keys done while a/1's completion waits", func() bool {
		return b.countStatus(t, "done") == 5
	})
	require.Positive(t, b.completionsBlockedBy(t, tx), "a/1's completion stopped waiting")

	require.NoError(t, tx.Commit(b.ctx))
	waitFor(t, 10*time.Second, "key a drained", func() bool { return b.countStatus(t, "done") == 7 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, "a/1", ran[0])
	require.Equal(t, "a/2", ran[len(ran)-1])
}

// However fast handlers return and however many completions are in flight, no more handlers
// run at once than the worker has slots.
func TestWorkerRunsAtMostWorkersHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const slots, keys, per = 3, 40, 5
	evs := make([]ordered.Event, 0, keys*per)
	for seq := range per {
		for k := range keys {
			evs = append(evs, ordered.Event{Key: fmt.Sprintf("k%02d", k), Seq: int64(seq)})
		}
	}
	_, err := b.client.EnqueueMany(b.ctx, evs)
	require.NoError(t, err)
	var running, most atomic.Int64
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(time.Millisecond)
		return nil
	}), &ordered.WorkerConfig{Workers: slots, PollInterval: 50 * time.Millisecond})
	waitFor(t, 30*time.Second, "every job done", func() bool { return b.countStatus(t, "done") == keys*per })
	require.LessOrEqual(t, most.Load(), int64(slots))
	require.Equal(t, int64(slots), most.Load(), "the slots were never all used: the bound went untested")
}

// parkNextJob makes key a's next job (id a2) wait for the only slot of a running worker:
// a/1's completion waits for tx, b/1 (enqueued here) takes the slot, and its handler signals
// bRunning and holds on; then tx commits, and a/1's completion claims a/2. The worker must not
// prefetch (startSlowWorker), or a/2 may count as claimed ahead and go back.
func (b *testBundle) parkNextJob(t *testing.T, tx pgx.Tx, bRunning <-chan struct{}, a2 int64) {
	t.Helper()
	waitFor(t, 10*time.Second, "a/1's completion waiting for the key", func() bool {
		return b.completionsBlockedBy(t, tx) > 0
	})
	b.enqueue(t, "b", 1)
	<-bRunning
	require.NoError(t, tx.Commit(b.ctx))
	waitFor(t, 10*time.Second, "a/2 claimed", func() bool { return b.jobStatus(t, a2) == "running" })
}

// startSlowWorker is startWorker for a worker that takes its handlers for slower than a claim
// however quick they are (ordered.AssumeSlowHandlers), so that it never prefetches: a next
// job that a completion claims for it is not one claimed ahead, which would go back to the
// queue if it waited long for a slot.
func startSlowWorker(t *testing.T, b *testBundle, c *ordered.Client, h ordered.Handler, cfg *ordered.WorkerConfig) *ordered.Worker {
	t.Helper()
	w, err := c.NewWorker(h, cfg)
	require.NoError(t, err)
	ordered.AssumeSlowHandlers(w)
	require.NoError(t, w.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.StopAndCancel(ctx))
	})
	return w
}

// A failure keeps its slot until it is settled: a worker whose failures wait at the database
// claims no more jobs meanwhile (each would hold a connection in the same wait).
func TestWorkerFailureKeepsItsSlotWhileItSettles(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
		b.enqueue(t, keys[i], 1)
	}
	tx := b.holdKeys(t, b.client, 2, keys...)
	var handled atomic.Int64
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		handled.Add(1)
		return ordered.Permanent(errors.New("poison"))
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond})
	waitFor(t, 10*time.Second, "the first failure waiting for its key", func() bool {
		return b.statementsBlockedBy(t, tx, "ordered_job_fail") > 0
	})
	// Long enough for many polls: a worker that had given the slot back would have claimed
	// and run the other nine by now.
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int64(1), handled.Load())
	require.Equal(t, 1, b.countStatus(t, "running"))

	require.NoError(t, tx.Rollback(b.ctx))
	waitFor(t, 10*time.Second, "every key failed", func() bool { return b.countStatus(t, "blocked") == len(keys) })
}

// A handler that ends its goroutine (runtime.Goexit, as t.FailNow does) gives its slot back.
func TestWorkerHandlerGoexitGivesBackItsSlot(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "a", 1)
	ranB := make(chan struct{})
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		if j.Key == "a" {
			runtime.Goexit()
		}
		close(ranB)
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond})
	waitFor(t, 10*time.Second, "a/1 claimed", func() bool { return b.countStatus(t, "running") == 1 })
	b.enqueue(t, "b", 1)
	select {
	case <-ranB:
	case <-time.After(10 * time.Second):
		t.Fatal("b/1 never ran: a/1's handler kept the only slot")
	}
}

// A wake-up that finds every slot taken is not lost: the next slot that frees up claims.
// One slot runs a long key (each job's successor comes from its completion, not a claim);
// another key's job enqueued meanwhile starts at the next handler return, not when the
// long key runs out (the poll is an hour).
func TestWorkerWakeUpWhileFullIsNotLost(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const chain = 40
	seqs := make([]int64, chain)
	for i := range seqs {
		seqs[i] = int64(i + 1)
	}
	b.enqueue(t, "a", seqs...)
	inA3 := make(chan struct{})
	gate := make(chan struct{})
	var mu sync.Mutex
	var ran []string
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		if j.Key == "a" && j.Seq == 3 {
			close(inA3)
			<-gate
		}
		if j.Key == "a" {
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, fmt.Sprintf("%s/%d", j.Key, j.Seq))
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: time.Hour})
	<-inA3
	b.enqueue(t, "b", 1)
	time.Sleep(300 * time.Millisecond) // the notification arrives while the only slot is taken
	close(gate)
	waitFor(t, 30*time.Second, "both keys done", func() bool { return b.countStatus(t, "done") == chain+1 })
	mu.Lock()
	defer mu.Unlock()
	require.NotEqual(t, "b/1", ran[len(ran)-1], "b/1 waited for key a to run out: %v", ran)
}

// A key's next job that waits for a slot (a long handler holds the only one) keeps its lease:
// no other client can take it, and it runs once, on its first attempt. (Had it been claimed
// while the worker was prefetching, it would go back to the queue instead:
// TestWorkerGivesBackNextJobsItCannotStart.)
func TestWorkerJobWaitingForASlotKeepsItsLease(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	// Short enough to outlive twice within the test; renewed every 100 ms and fenced 100 ms
	// before it would run out (StopGrace), so that only a stall of the test process of about
	// 2.4 s would lose it.
	const lease = 3 * time.Second
	c := b.newClient(t, &ordered.Config{Lease: lease})
	ids := b.enqueue(t, "a", 1, 2)
	tx := b.holdKeys(t, c, 3, "a")
	bRunning := make(chan struct{})
	release := make(chan struct{})
	var mu sync.Mutex
	var ran []string
	startSlowWorker(t, b, c, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		mu.Lock()
		ran = append(ran, fmt.Sprintf("%s/%d#%d", j.Key, j.Seq, j.Attempt))
		mu.Unlock()
		if j.Key == "b" {
			close(bRunning)
			select {
			case <-release:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, StopGrace: 100 * time.Millisecond})
	b.parkNextJob(t, tx, bRunning, ids[1])

	other := b.newClient(t, &ordered.Config{Lease: lease})
	waitFor(t, 60*time.Second, "a/2 waiting for twice its lease", func() bool {
		jobs, err := other.Claim(b.ctx, 10)
		require.NoError(t, err)
		require.Empty(t, jobs, "another client took %v: a/2's lease lapsed while it waited", describe(jobs))
		return b.outlivedLeases(t, ids[1], 2, lease)
	})
	require.Equal(t, "running", b.jobStatus(t, ids[1]))
	close(release)
	waitFor(t, 10*time.Second, "every job done", func() bool { return b.countStatus(t, "done") == 4 })
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"a/1#1", "b/1#1", "a/2#1", "a/3#1"}, ran)
}

// parkedWorker starts a one-slot worker whose slot b/1's handler holds until release is closed
// (or its context ends), with key a's next job (id a2) claimed and waiting for the slot.
func (b *testBundle) parkedWorker(t *testing.T, release <-chan struct{}) (w *ordered.Worker, a2 int64, ranA2 *atomic.Bool) {
	t.Helper()
	ids := b.enqueue(t, "a", 1, 2)
	tx := b.holdKeys(t, b.client, 3, "a")
	bRunning := make(chan struct{})
	ranA2 = new(atomic.Bool)
	w, err := b.client.NewWorker(ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		if j.Key == "b" {
			close(bRunning)
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if j.Key == "a" && j.Seq == 2 {
			ranA2.Store(true)
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	ordered.AssumeSlowHandlers(w)
	require.NoError(t, w.Start(b.ctx))
	b.parkNextJob(t, tx, bRunning, ids[1])
	return w, ids[1], ranA2
}

// requireGivenBack checks that job id is queued again with no attempt counted.
func (b *testBundle) requireGivenBack(t *testing.T, id int64) {
	t.Helper()
	var status string
	var attempts int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status, attempts FROM ordered_jobs_now WHERE id = $1`, id).Scan(&status, &attempts))
	require.Equal(t, "queued", status)
	require.Equal(t, 0, attempts)
}

// A give-back wakes idle workers (NOTIFY at commit) only when it released the job: not when
// the claim it holds is no longer current.
func TestGiveBackNotifiesOnlyWhenItReleasedTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	next, sentinel := b.listenWakeUps(t)
	b.enqueue(t, "a", 1)
	var schema string
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT current_schema()").Scan(&schema))
	require.Equal(t, schema, next(), "the enqueue's")
	job := b.claimOne(t, b.client)

	released, err := store.JobReleaseUnrun(b.ctx, b.pool, job.ID, job.ClaimVersion+1, nil)
	require.NoError(t, err)
	require.False(t, released, "a stale claim released the job")
	require.Equal(t, sentinel(), next(), "a give-back that released nothing woke workers")

	released, err = store.JobReleaseUnrun(b.ctx, b.pool, job.ID, job.ClaimVersion, nil)
	require.NoError(t, err)
	require.True(t, released)
	require.Equal(t, schema, next(), "the job given back is claimable: workers are woken")
}

// StopAndCancel while a claimed job waits for a slot: it is given back unrun, its attempt not
// counted, and an idle worker is woken for it rather than left to find it at its next poll.
func TestWorkerStopAndCancelGivesBackJobWaitingForASlot(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	w, a2, ranA2 := b.parkedWorker(t, nil)

	ranByOther := make(chan *ordered.Job, 1)
	reg := prometheus.NewRegistry()
	startWorker(t, b, b.client, ordered.HandlerFunc(func(_ context.Context, j *ordered.Job) error {
		if j.ID == a2 {
			ranByOther <- j
		}
		return nil
	}), &ordered.WorkerConfig{PollInterval: time.Hour, Registerer: reg})
	// Its first claim at start, then one when its LISTEN is in place; nothing else wakes it.
	waitFor(t, 10*time.Second, "the other worker listening", func() bool {
		return metricValue(t, reg, "ordered_claim_duration_seconds") >= 2
	})

	require.NoError(t, w.StopAndCancel(b.ctx))
	require.False(t, ranA2.Load(), "a/2 ran after StopAndCancel")
	select {
	case j := <-ranByOther:
		require.Equal(t, 1, j.Attempt, "the give-back counted an attempt")
	case <-time.After(10 * time.Second):
		t.Fatalf("a/2 was given back (%s) but the idle worker was not woken for it", b.jobStatus(t, a2))
	}
}

// Stop gives back a claimed job waiting for a slot, its attempt not counted, and waits only
// for the handler running.
func TestWorkerStopGivesBackJobWaitingForASlot(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	release := make(chan struct{})
	w, a2, ranA2 := b.parkedWorker(t, release)

	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(b.ctx) }()
	waitFor(t, 10*time.Second, "a/2 given back while b/1 runs", func() bool { return b.jobStatus(t, a2) == "queued" })
	b.requireGivenBack(t, a2)
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while b/1's handler was running", err)
	default:
	}
	close(release)
	require.NoError(t, <-stopped)
	require.False(t, ranA2.Load(), "a/2 ran after Stop")
	var bStatus string
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status FROM ordered_jobs_now WHERE key = 'b' AND seq = 1`).Scan(&bStatus))
	require.Equal(t, "done", bStatus)
}

// A claimed job whose claim is lost while it waits for a slot never runs: its next renewal
// finds the claim taken.
func TestWorkerJobLostWhileWaitingForASlotDoesNotRun(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.newClient(t, &ordered.Config{Lease: 3 * time.Second})
	ids := b.enqueue(t, "a", 1, 2)
	tx := b.holdKeys(t, c, 3, "a")
	bRunning := make(chan struct{})
	release := make(chan struct{})
	var ranA2, ranC atomic.Int64
	reg := prometheus.NewRegistry()
	startSlowWorker(t, b, c, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		switch {
		case j.Key == "b":
			close(bRunning)
			<-release
		case j.Key == "a" && j.Seq == 2:
			ranA2.Add(1)
		case j.Key == "c":
			ranC.Add(1)
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond, Registerer: reg})
	b.parkNextJob(t, tx, bRunning, ids[1])

	// Another client takes a/2 over; the waiting job's next renewal finds its claim lost.
	b.expireLease(t, ids[1])
	stolen := b.claimOne(t, b.client)
	require.Equal(t, ids[1], stolen.ID)
	waitFor(t, 10*time.Second, "the lost claim noticed", func() bool {
		return metricValue(t, reg, "ordered_lost_ownership_total") == 1
	})
	close(release)
	b.enqueue(t, "c", 1)
	waitFor(t, 10*time.Second, "c/1 run in the only slot", func() bool { return ranC.Load() == 1 })
	require.Equal(t, int64(0), ranA2.Load(), "a/2 ran although its claim was lost")
	require.NoError(t, b.client.Complete(b.ctx, stolen))
}

// A worker whose handlers return faster than a claim's round trip claims ahead of its slots
// what they would finish during a claim: more than one job a slot. A job claimed ahead waits
// for a slot with its lease held; when handlers turn slow and it waits far longer than a claim
// would take, it goes back to the queue, its attempt not counted, and the worker claims no
// more ahead. One whose handlers are slower than a claim takes only what it can start. Either
// way a job the worker cannot start ends up free for other workers.
func TestWorkerClaimsAheadOnlyForQuickHandlers(t *testing.T) {
	const slots = 3
	for _, tc := range []struct {
		name    string
		warmups int
		handle  time.Duration // each warm-up job's handler time: what the worker learns
		ahead   bool
	}{
		{name: "quick handlers", warmups: 30, handle: 0, ahead: true},
		{name: "slow handlers", warmups: 2 * slots, handle: 200 * time.Millisecond, ahead: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			for i := range tc.warmups {
				b.enqueue(t, fmt.Sprintf("warm%02d", i), 1)
			}
			var inGates sync.WaitGroup
			inGates.Add(slots)
			gate := make(chan struct{})
			var mu sync.Mutex
			ran := map[string]int{}
			reg := prometheus.NewRegistry()
			startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
				mu.Lock()
				ran[fmt.Sprintf("%s/%d#%d", j.Key, j.Seq, j.Attempt)]++
				mu.Unlock()
				switch {
				case strings.HasPrefix(j.Key, "gate"):
					inGates.Done()
					select {
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
				case strings.HasPrefix(j.Key, "warm"):
					time.Sleep(tc.handle)
				}
				return nil
			}), &ordered.WorkerConfig{Workers: slots, PollInterval: 20 * time.Millisecond, Registerer: reg})
			waitFor(t, 30*time.Second, "the warm-up jobs done", func() bool { return b.countStatus(t, "done") == tc.warmups })

			for i := range slots { // they take every slot and hold it
				b.enqueue(t, fmt.Sprintf("gate%d", i), 1)
			}
			inGates.Wait()
			givenBackBefore := metricValue(t, reg, "ordered_claimed_ahead_given_back_total") // warm-ups': none, but not for certain
			const others = 10 * slots
			events := make([]ordered.Event, others)
			for i := range events {
				events[i] = ordered.Event{Key: fmt.Sprintf("k%02d", i), Seq: 1, Payload: json.RawMessage(`{}`)}
			}
			_, err := b.client.EnqueueMany(b.ctx, events)
			require.NoError(t, err)
			claimedAhead := func() int {
				var n int
				require.NoError(t, b.pool.QueryRow(b.ctx,
					"SELECT count(*) FROM ordered_jobs_now WHERE key LIKE 'k%' AND claim_version > 0").Scan(&n))
				return n
			}
			givenBack := func() int {
				return int(metricValue(t, reg, "ordered_claimed_ahead_given_back_total") - givenBackBefore)
			}
			if tc.ahead {
				waitFor(t, 30*time.Second, "more than one job a slot claimed ahead", func() bool {
					return claimedAhead() > slots
				})
				// A job may be claimed ahead and given back more than once before the worker
				// learns that its slots are held: every job claimed ahead is back in the queue.
				waitFor(t, 30*time.Second, "the jobs claimed ahead given back", func() bool {
					var held int
					require.NoError(t, b.pool.QueryRow(b.ctx,
						"SELECT count(*) FROM ordered_jobs_now WHERE key LIKE 'k%' AND status = 'running'").Scan(&held))
					return held == 0 && givenBack() >= claimedAhead()
				})
			} else {
				time.Sleep(300 * time.Millisecond)
				require.Zero(t, claimedAhead(), "jobs were claimed ahead of slow handlers")
			}
			require.Equal(t, slots, b.countStatus(t, "running"), "the worker claimed ahead again behind its held slots")
			other := b.newClient(t, nil)
			jobs, err := other.Claim(b.ctx, 100)
			require.NoError(t, err)
			require.Len(t, jobs, others, "another worker could not have the jobs: %v", describe(jobs))
			for _, j := range jobs {
				require.Equal(t, 1, j.Attempt, "%s/%d: a give-back counted an attempt", j.Key, j.Seq)
				require.NoError(t, other.Complete(b.ctx, j))
			}
			close(gate)
			waitFor(t, 10*time.Second, "every job done", func() bool {
				return b.countStatus(t, "done") == tc.warmups+slots+others
			})
			mu.Lock()
			defer mu.Unlock()
			for run, n := range ran {
				require.Equal(t, 1, n, "%s ran %d times", run, n)
				require.True(t, strings.HasSuffix(run, "#1"), "%s: not on its first attempt", run)
			}
		})
	}
}

// A completion batch claims the next job of every key it completes, which a worker with quick
// handlers may not be able to start soon: when those jobs turn slow, the next jobs waiting for
// its slots go back to the queue as jobs claimed ahead do, and an idle worker runs them.
func TestWorkerGivesBackNextJobsItCannotStart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const slots, keys = 2, 40
	var ranA, ranB atomic.Int64
	handler := func(ran *atomic.Int64) ordered.HandlerFunc {
		return func(ctx context.Context, j *ordered.Job) error {
			if j.Seq == 2 { // slow
				ran.Add(1)
				select {
				case <-time.After(300 * time.Millisecond):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}
	}
	for i := range 30 { // worker A learns that its handlers are quick
		b.enqueue(t, fmt.Sprintf("warm%02d", i), 1)
	}
	startWorker(t, b, b.client, handler(&ranA), &ordered.WorkerConfig{Workers: slots, PollInterval: 20 * time.Millisecond})
	waitFor(t, 30*time.Second, "the warm-up jobs done", func() bool { return b.countStatus(t, "done") == 30 })

	var events []ordered.Event
	for k := range keys {
		events = append(events, validEvent(fmt.Sprintf("k%02d", k), 1), validEvent(fmt.Sprintf("k%02d", k), 2))
	}
	_, err := b.client.EnqueueMany(b.ctx, events)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "every first job done", func() bool {
		return b.countRows(t, "SELECT count(*) FROM ordered_jobs_now WHERE key LIKE 'k%' AND seq = 1 AND status = 'done'") == keys
	})
	startWorker(t, b, b.newClient(t, nil), handler(&ranB), &ordered.WorkerConfig{Workers: slots, PollInterval: 20 * time.Millisecond})
	waitFor(t, 10*time.Second, "the idle worker runs some of the slow jobs", func() bool { return ranB.Load() > 0 })
	waitFor(t, 30*time.Second, "every job done", func() bool { return b.countStatus(t, "done") == 30+2*keys })
	require.EqualValues(t, keys, ranA.Load()+ranB.Load(), "a slow job ran twice")
}

// A worker whose handlers are slower than a claim claims only for free slots, and a job it
// claimed for a slot waits its turn however long a key's next job holds that slot: it is never
// given back (with one slot, a job claimed for the slot a success freed can find it taken by
// that key's next job).
func TestWorkerGivesBackNothingItDidNotClaimAhead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var events []ordered.Event
	for k := range 4 {
		for seq := range 5 {
			events = append(events, ordered.Event{Key: fmt.Sprintf("chain%d", k), Seq: int64(seq), Payload: json.RawMessage(`{}`)})
		}
	}
	for k := range 10 {
		events = append(events, ordered.Event{Key: fmt.Sprintf("single%d", k), Seq: 0, Payload: json.RawMessage(`{}`)})
	}
	_, err := b.client.EnqueueMany(b.ctx, events)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	// Slower than a claim whatever the machine's load: the worker never prefetches, so every
	// job it holds was claimed for a free slot or by a completion for its key's next job.
	startSlowWorker(t, b, b.client, ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
		time.Sleep(60 * time.Millisecond) // longer than the least wait before a give-back
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond, Registerer: reg})
	waitFor(t, 30*time.Second, "every job done", func() bool { return b.countStatus(t, "done") == len(events) })
	require.Zero(t, metricValue(t, reg, "ordered_claimed_ahead_given_back_total"), "jobs given back")
	var claims int
	require.NoError(t, b.pool.QueryRow(b.ctx, "SELECT count(*) FROM ordered_jobs_now WHERE claim_version > 1").Scan(&claims))
	require.Zero(t, claims, "jobs claimed more than once")
}

// A job claimed ahead whose give-back fails (here a trigger makes the release raise) is still
// the worker's: it waits its turn and runs on its first attempt, rather than sit until its
// lease expires and lose an attempt it never used.
func TestWorkerRunsAJobItCouldNotGiveBack(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for i := range 30 {
		b.enqueue(t, fmt.Sprintf("warm%02d", i), 1)
	}
	gate := make(chan struct{})
	inGate := make(chan struct{})
	var mu sync.Mutex
	ran := map[string]int{}
	startWorker(t, b, b.client, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		mu.Lock()
		ran[fmt.Sprintf("%s/%d#%d", j.Key, j.Seq, j.Attempt)]++
		mu.Unlock()
		if j.Key == "gate" {
			close(inGate)
			select {
			case <-gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: 20 * time.Millisecond})
	waitFor(t, 30*time.Second, "the warm-up jobs done", func() bool { return b.countStatus(t, "done") == 30 })

	_, err := b.pool.Exec(b.ctx, `
		CREATE SEQUENCE release_attempts;
		CREATE FUNCTION refuse_release() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF OLD.state = 'running' AND NEW.state = 'queued' AND NEW.attempts = OLD.attempts - 1 THEN
				PERFORM nextval('release_attempts'); -- not rolled back with the statement
				RAISE EXCEPTION 'release refused';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_release BEFORE UPDATE ON ordered_heads
			FOR EACH ROW EXECUTE FUNCTION refuse_release()`)
	require.NoError(t, err)
	b.enqueue(t, "gate", 1)
	<-inGate
	const others = 5
	events := make([]ordered.Event, others)
	for i := range events {
		events[i] = ordered.Event{Key: fmt.Sprintf("k%d", i), Seq: 1, Payload: json.RawMessage(`{}`)}
	}
	_, err = b.client.EnqueueMany(b.ctx, events)
	require.NoError(t, err)
	var claimed int
	waitFor(t, 10*time.Second, "jobs claimed ahead, then a give-back tried for each", func() bool {
		var refused int
		require.NoError(t, b.pool.QueryRow(b.ctx, `
			SELECT (SELECT count(*) FROM ordered_jobs_now WHERE key LIKE 'k%' AND claim_version > 0),
			       (SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM release_attempts)`).Scan(&claimed, &refused))
		return claimed > 0 && refused == claimed
	})
	close(gate)
	waitFor(t, 10*time.Second, "every job done", func() bool { return b.countStatus(t, "done") == 30+1+others })
	mu.Lock()
	defer mu.Unlock()
	for run, n := range ran {
		require.Equal(t, 1, n, "%s ran %d times", run, n)
		require.True(t, strings.HasSuffix(run, "#1"), "%s: not on its first attempt", run)
	}
}
