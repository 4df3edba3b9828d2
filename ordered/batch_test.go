package ordered_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// startBatchWorker starts a batch worker and stops it when the test ends.
func startBatchWorker(t *testing.T, b *testBundle, c *ordered.Client, h ordered.BatchHandlerFunc, cfg *ordered.WorkerConfig) *ordered.Worker {
	t.Helper()
	w, err := c.NewBatchWorker(h, cfg)
	require.NoError(t, err)
	require.NoError(t, w.Start(b.ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.StopAndCancel(ctx))
	})
	return w
}

func seqsOf(jobs []*ordered.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.Seq
	}
	return out
}

// jobsOf reads (seq, status, attempts) of a key's jobs in seq order.
func (b *testBundle) jobsOf(t *testing.T, key string) []string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT format('%s:%s:%s', seq, status, attempts) FROM ordered_jobs_now
		WHERE key = $1 ORDER BY seq`, key)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// A batch holds up to N consecutive open jobs of one key in seq order, under one claim: holes
// in the seqs of a default key are no stop, a contiguous key's are, and so are a job not due
// and the batch size. No other claim takes any job of a key while its batch runs.
func TestClaimBatchTakesConsecutiveJobsOfAKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "hot", 1, 2, 3, 4, 5, 6)
	b.enqueue(t, "holes", 1, 3, 7)
	b.enqueue(t, "contig", 1, 2, 3, 5, 6)
	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_keys SET next_seq = 1, gap_action = 'wait' WHERE key = 'contig'`)
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "later", Seq: 1})
	require.NoError(t, err)
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "later", Seq: 2, RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)

	batches, err := b.client.ClaimBatch(b.ctx, 10, 4)
	require.NoError(t, err)
	got := map[string][]int64{}
	for _, batch := range batches {
		got[batch[0].Key] = seqsOf(batch)
		for _, j := range batch {
			require.Equal(t, 1, j.Attempt)
			require.Equal(t, batch[0].LeaseUntil, j.LeaseUntil, "one lease for the batch")
		}
	}
	require.Equal(t, map[string][]int64{
		"hot": {1, 2, 3, 4}, "holes": {1, 3, 7}, "contig": {1, 2, 3}, "later": {1},
	}, got)

	// Nothing of these keys is claimable while the batches run, by a claim or a batch claim.
	other := b.newClient(t, nil)
	b.claimNone(t, other)
	more, err := other.ClaimBatch(b.ctx, 10, 10)
	require.NoError(t, err)
	require.Empty(t, more)
}

// The finished prefix is completed in one statement, the failed job goes to its retry, the
// rest goes back with its attempts not counted and runs after the failed job; a stale batch
// settles nothing; RenewBatch renews every job's lease.
func TestBatchSettlingIsFenced(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Lease: time.Minute}) // leases end by hand
	b.enqueue(t, "k", 1, 2, 3, 4, 5)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	batch := batches[0]

	// The batch is claimed through its key's head row, the only one written: it holds the
	// lease, and every job of the batch runs under it.
	require.Equal(t, []string{"1:running:1", "2:running:1", "3:running:1", "4:running:1", "5:running:1"}, b.jobsOf(t, "k"))
	var before time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT lease_until FROM ordered_heads WHERE job_id = $1 AND batch_to = 5`,
		batch[0].ID).Scan(&before))
	for _, j := range batch {
		require.True(t, before.Equal(j.LeaseUntil), "job %d: one lease", j.Seq)
	}
	// A renewal within a grain of the lease (a sixteenth of it: ordered_lease_end) leaves its
	// end as it was: the lease is made half a minute older by hand, so the renewal must move it.
	require.NoError(t, b.pool.QueryRow(b.ctx, `UPDATE ordered_heads SET lease_until = lease_until - interval '30 seconds'
		WHERE job_id = $1 AND state = 'running' RETURNING lease_until`, batch[0].ID).Scan(&before))
	require.NoError(t, b.client.RenewBatch(b.ctx, batch))
	var renewed, renewedJobs int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_heads WHERE lease_until > $1`, before).Scan(&renewed))
	require.Equal(t, 1, renewed)
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now WHERE lease_until > $1`, before).Scan(&renewedJobs))
	require.Equal(t, 5, renewedJobs, "every job of the batch runs under the renewed lease")

	// Job 3 fails: 1 and 2 done, 3 retried, 4 and 5 back unrun.
	require.NoError(t, b.client.ReleaseBatch(b.ctx, batch[3:]))
	lost, err := b.client.CompleteMany(b.ctx, batch[:2])
	require.NoError(t, err)
	require.Empty(t, lost)
	outcome, err := b.client.RetryAfter(b.ctx, batch[2], 0, errors.New("boom"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeRetried, outcome)
	require.Equal(t, []string{"1:done:1", "2:done:1", "3:queued:1", "4:queued:0", "5:queued:0"}, b.jobsOf(t, "k"))

	// The next batch starts at the failed job.
	batches, err = b.client.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, []int64{3, 4, 5}, seqsOf(batches[0]))
	require.Equal(t, []int{2, 1, 1}, []int{batches[0][0].Attempt, batches[0][1].Attempt, batches[0][2].Attempt})
	stale := batches[0]

	// Its lease runs out and another batch claim recovers it from its head, alone.
	_, err = b.pool.Exec(b.ctx, `UPDATE ordered_heads SET lease_until = now() - interval '1 millisecond' WHERE state = 'running'`)
	require.NoError(t, err)
	other := b.newClient(t, &ordered.Config{Lease: time.Minute})
	batches, err = other.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, []int64{3}, seqsOf(batches[0]))

	require.ErrorIs(t, b.client.RenewBatch(b.ctx, stale), ordered.ErrLeaseLost)
	require.ErrorIs(t, b.client.ReleaseBatch(b.ctx, stale[1:]), ordered.ErrLeaseLost)
	lost, err = b.client.CompleteMany(b.ctx, stale)
	require.NoError(t, err)
	require.Len(t, lost, 3, "a stale batch completed something")
	require.Equal(t, []string{"1:done:1", "2:done:1", "3:running:3", "4:running:1", "5:running:1"}, b.jobsOf(t, "k"))

	lost, err = other.CompleteMany(b.ctx, batches[0])
	require.NoError(t, err)
	require.Empty(t, lost)

	// The rest of the stale batch is recovered in order, a job at a time, and each recovery
	// fences the stale batch's claim of that job too.
	for i, seq := range []int64{4, 5} {
		batches, err = other.ClaimBatch(b.ctx, 1, 5)
		require.NoError(t, err)
		require.Len(t, batches, 1)
		require.Equal(t, []int64{seq}, seqsOf(batches[0]))
		require.Equal(t, 2, batches[0][0].Attempt, "recovered")
		staleJob := stale[1+i : 2+i]
		require.ErrorIs(t, b.client.RenewBatch(b.ctx, staleJob), ordered.ErrLeaseLost)
		require.ErrorIs(t, b.client.ReleaseBatch(b.ctx, staleJob), ordered.ErrLeaseLost)
		lost, err = b.client.CompleteMany(b.ctx, staleJob)
		require.NoError(t, err)
		require.Len(t, lost, 1, "the stale batch completed job %d", seq)
		require.Contains(t, b.jobsOf(t, "k"), fmt.Sprintf("%d:running:2", seq))
		lost, err = other.CompleteMany(b.ctx, batches[0])
		require.NoError(t, err)
		require.Empty(t, lost)
	}
	require.Equal(t, []string{"1:done:1", "2:done:1", "3:done:3", "4:done:2", "5:done:2"}, b.jobsOf(t, "k"))
}

// A job that crashes every worker that runs it, in the middle of a batch: after the first
// crash each job of the batch runs alone, so only the poison job spends attempts until it is
// failed, the jobs beside it spend one each, and the key goes back to batches after it.
func TestBatchPoisonJobSpendsOnlyItsOwnAttempts(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Lease: time.Minute, MaxAttempts: 3, Policy: policy.Always(policy.Skip)}) // crashes end leases by hand
	b.enqueue(t, "k", 1, 2, 3, 4, 5, 6)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 4)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, []int64{1, 2, 3, 4}, seqsOf(batches[0]))
	crash := func() {
		_, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET lease_until = now() - interval '1 millisecond' WHERE state = 'running'`)
		require.NoError(t, err)
	}
	crash()

	var ran []string
	for range 20 {
		batches, err := b.client.ClaimBatch(b.ctx, 1, 4)
		require.NoError(t, err)
		if len(batches) == 0 {
			// Job 3's attempts ran out on crashes: maintenance fails it (skip: the key goes on).
			n, err := b.client.FailExhausted(b.ctx, 10)
			require.NoError(t, err)
			if n == 0 {
				break
			}
			ran = append(ran, "failed 3")
			continue
		}
		require.Len(t, batches, 1)
		batch := batches[0]
		var names []string
		for _, j := range batch {
			names = append(names, fmt.Sprintf("%d@%d", j.Seq, j.Attempt))
		}
		ran = append(ran, fmt.Sprint(names))
		if batch[0].Seq == 3 {
			crash()
			continue
		}
		lost, err := b.client.CompleteMany(b.ctx, batch)
		require.NoError(t, err)
		require.Empty(t, lost)
	}
	require.Equal(t, []string{"[1@2]", "[2@2]", "[3@2]", "[3@3]", "failed 3", "[4@2]", "[5@1 6@1]"}, ran)
	require.Equal(t, []string{"1:done:2", "2:done:2", "3:failed:3", "4:done:2", "5:done:1", "6:done:1"}, b.jobsOf(t, "k"))
}

// An enqueue of a key whose batch runs goes behind the batch: below one of its jobs it is late.
func TestBatchMakesLowerEventsLate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 3, 5)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 3)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 3, 5}, seqsOf(batches[0]))
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 4})
	require.ErrorIs(t, err, ordered.ErrLateEvent)
	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 6})
	require.NoError(t, err)
}

// A batch worker and a plain worker drain the same keys together: each key's jobs run once
// each, in seq order, and no two handlers ever hold one key at once.
func TestBatchWorkerBesidePlainWorkerKeepsOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const keys, perKey = 6, 40
	for k := range keys {
		seqs := make([]int64, perKey)
		for i := range seqs {
			seqs[i] = int64(i + 1)
		}
		b.enqueue(t, fmt.Sprintf("k%d", k), seqs...)
	}
	var mu sync.Mutex
	ran := map[string][]int64{}
	active := map[string]bool{}
	var overlap []string
	enter := func(key string) {
		mu.Lock()
		defer mu.Unlock()
		if active[key] {
			overlap = append(overlap, key)
		}
		active[key] = true
	}
	leave := func(key string, seqs ...int64) {
		mu.Lock()
		defer mu.Unlock()
		active[key] = false
		ran[key] = append(ran[key], seqs...)
	}
	var sizes sync.Map
	var calls atomic.Int64
	startBatchWorker(t, b, b.newClient(t, nil), func(ctx context.Context, jobs []*ordered.Job) (int, error) {
		enter(jobs[0].Key)
		sizes.Store(len(jobs), true)
		time.Sleep(2 * time.Millisecond)
		done := len(jobs)
		if calls.Add(1)%3 == 0 && done > 1 {
			done-- // gives the key up: the rest may go to either worker
		}
		leave(jobs[0].Key, seqsOf(jobs[:done])...)
		return done, nil
	}, &ordered.WorkerConfig{Workers: 3, BatchSize: 7, PollInterval: 20 * time.Millisecond})
	waitFor(t, 30*time.Second, "a full batch", func() bool { _, ok := sizes.Load(7); return ok })
	startWorker(t, b, b.newClient(t, nil), ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		enter(j.Key)
		time.Sleep(time.Millisecond)
		leave(j.Key, j.Seq)
		return nil
	}), &ordered.WorkerConfig{Workers: 3, PollInterval: 20 * time.Millisecond})

	waitFor(t, time.Minute, "every job done", func() bool { return b.countStatus(t, "done") == keys*perKey })
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, overlap, "keys held by two handlers at once")
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		require.Len(t, ran[key], perKey, key)
		for i, s := range ran[key] {
			require.Equal(t, int64(i+1), s, "key %s ran out of order: %v", key, ran[key])
		}
	}
}

// A batch handler that fails midway: the finished prefix is done, the failed job is retried
// and then failed for good by the policy (Block holds the key; Skip moves it on), the rest
// goes back with its attempts not counted. A handler that stops early (nil error) gives the
// rest back.
func TestBatchWorkerFailureMidway(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		policy policy.Decision
		want   []string
	}{
		{"block", policy.Block, []string{"1:done:1", "2:done:1", "3:blocked:2", "4:queued:0", "5:queued:0", "6:queued:0"}},
		{"skip", policy.Skip, []string{"1:done:1", "2:done:1", "3:failed:2", "4:done:1", "5:done:1", "6:done:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &ordered.Config{Policy: policy.Always(tc.policy), MaxAttempts: 2, Backoff: noBackoff{}})
			b.enqueue(t, "k", 1, 2, 3, 4, 5, 6)
			var mu sync.Mutex
			var calls [][]int64
			startBatchWorker(t, b, b.client, func(ctx context.Context, jobs []*ordered.Job) (int, error) {
				mu.Lock()
				calls = append(calls, seqsOf(jobs))
				mu.Unlock()
				for i, j := range jobs {
					if j.Seq == 3 {
						return i, errors.New("seq 3 fails")
					}
				}
				return len(jobs), nil
			}, &ordered.WorkerConfig{Workers: 1, BatchSize: 10, PollInterval: 20 * time.Millisecond})
			waitFor(t, 30*time.Second, "the key settled", func() bool {
				return b.countStatus(t, "running")+b.countStatus(t, "queued") == map[policy.Decision]int{policy.Block: 3, policy.Skip: 0}[tc.policy] &&
					b.countStatus(t, "running") == 0
			})
			require.Equal(t, tc.want, b.jobsOf(t, "k"))
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, []int64{1, 2, 3, 4, 5, 6}, calls[0])
			require.Equal(t, []int64{3, 4, 5, 6}, calls[1], "the retry's batch starts at the failed job")
		})
	}

	t.Run("stops early", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.enqueue(t, "k", 1, 2, 3, 4)
		var mu sync.Mutex
		var calls [][]int64
		reg := prometheus.NewRegistry()
		startBatchWorker(t, b, b.client, func(ctx context.Context, jobs []*ordered.Job) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, seqsOf(jobs))
			return min(2, len(jobs)), nil
		}, &ordered.WorkerConfig{Workers: 1, BatchSize: 10, PollInterval: 20 * time.Millisecond, Registerer: reg})
		waitFor(t, 30*time.Second, "every job done", func() bool {
			return b.countStatus(t, "done") == 4 && metricValue(t, reg, "ordered_completions_total") == 4
		})
		require.Equal(t, []string{"1:done:1", "2:done:1", "3:done:1", "4:done:1"}, b.jobsOf(t, "k"))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, [][]int64{{1, 2, 3, 4}, {3, 4}}, calls)
		// 3 and 4, given back unrun, are claimed twice on their first attempt: their wait is
		// observed once, when they run, and they were not claimed ahead of the slots.
		require.Equal(t, 6.0, metricValue(t, reg, "ordered_claims_total"))
		require.Equal(t, 4.0, metricValue(t, reg, "ordered_enqueue_to_start_seconds"))
		require.Zero(t, metricValue(t, reg, "ordered_claimed_ahead_given_back_total"))
	})
}

// A batch worker process is SIGKILLed in the middle of a batch: the batches it completed stay
// done and never run again; the batch it held runs again after its lease expires, in order
// from its first job and a job at a time, and the key goes on behind it.
func TestBatchProcessKilledMidBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	createEffectsTable(t, b.ctx, b.pool)
	seqs := make([]int64, 20)
	for i := range seqs {
		seqs[i] = int64(i + 1)
	}
	ids := b.enqueue(t, "k", seqs...)
	cfg := processConfig{Lease: time.Second, Poll: 100 * time.Millisecond, Workers: 1, Batch: 5}
	cfgA := cfg
	cfgA.Name, cfgA.URL, cfgA.Hold = "A", withAppName(t, b.queue.URL, "ordered-test-A-"+b.queue.Schema), "k/13"
	a := startWorkerProcess(t, cfgA)
	waitFor(t, 20*time.Second, "A holding k/13", func() bool {
		return len(filterEffects(readEffects(t, b.ctx, b.pool), func(e effect) bool { return e.Seq == 13 })) == 1
	})
	want := []string{}
	for s := 1; s <= 20; s++ {
		switch {
		case s <= 10:
			want = append(want, fmt.Sprintf("%d:done:1", s))
		case s <= 15:
			want = append(want, fmt.Sprintf("%d:running:1", s))
		default:
			want = append(want, fmt.Sprintf("%d:queued:0", s))
		}
	}
	require.Equal(t, want, b.jobsOf(t, "k"), "A's batches of 5: two completed, the third running, claimed through its first job's head row")
	a.kill(t)

	cfgB := cfg
	cfgB.Name, cfgB.URL = "B", withAppName(t, b.queue.URL, "ordered-test-B-"+b.queue.Schema)
	bw := startWorkerProcess(t, cfgB)
	waitFor(t, 30*time.Second, "every job done", func() bool { return b.jobStatus(t, ids[19]) == "done" })
	for s := 1; s <= 20; s++ {
		attempts := 1
		if s >= 11 && s <= 15 {
			attempts = 2
		}
		want[s-1] = fmt.Sprintf("%d:done:%d", s, attempts)
	}
	require.Equal(t, want, b.jobsOf(t, "k"))
	var bStarts []int64
	for _, e := range readEffects(t, b.ctx, b.pool) {
		if e.Worker == "B" && e.Phase == "start" {
			bStarts = append(bStarts, e.Seq)
		}
	}
	require.Equal(t, seqs[10:], bStarts, "B ran the held batch again from its first job, in order, and nothing done")
	bw.stop(t)
}

// A batch worker's heartbeat renews the one lease of all its batch's jobs while the handler
// runs past several leases; once another claim recovers the batch's first job (alone: a
// recovered batch runs a job at a time), the handler's context is cancelled with
// ErrLeaseLost and nothing of the batch is settled by it.
func TestBatchHeartbeatRenewsAndLosesTheWholeBatch(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	b := setup(t, &ordered.Config{Lease: lease})
	b.enqueue(t, "k", 1, 2, 3)
	causes := make(chan error, 1)
	var calls atomic.Int64
	startBatchWorker(t, b, b.client, func(ctx context.Context, jobs []*ordered.Job) (int, error) {
		if calls.Add(1) > 1 {
			return 0, errors.New("only one batch is expected")
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return len(jobs), nil // too late: the claim is lost, so this settles nothing
	}, &ordered.WorkerConfig{Workers: 1, BatchSize: 10, PollInterval: 20 * time.Millisecond})

	waitFor(t, 20*time.Second, "the batch running for three leases", func() bool {
		var n int
		require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_heads
			WHERE state = 'running' AND clock_timestamp() > attempted_at + 3 * $1::interval
			AND lease_until > clock_timestamp() AND batch_to = 3`, lease).Scan(&n))
		return n == 1
	})
	require.Equal(t, []string{"1:running:1", "2:running:1", "3:running:1"}, b.jobsOf(t, "k"),
		"the batch is claimed through its first job's head row, every job under its lease")

	// The lease runs out (as if renewals had failed) and another client takes the batch over.
	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET lease_until = now() - interval '1 millisecond' WHERE state = 'running'`)
	require.NoError(t, err)
	other := b.newClient(t, &ordered.Config{Lease: time.Minute})
	batches, err := other.ClaimBatch(b.ctx, 1, 10)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, []int64{1}, seqsOf(batches[0]), "a recovered batch runs a job at a time")
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, ordered.ErrLeaseLost)
	case <-time.After(20 * time.Second):
		t.Fatal("the handler's context was not cancelled")
	}
	require.Equal(t, []string{"1:running:2", "2:running:1", "3:running:1"}, b.jobsOf(t, "k"),
		"the stale batch settled something, or its recovery did not mark its later jobs as claimed")
	lost, err := other.CompleteMany(b.ctx, batches[0])
	require.NoError(t, err)
	require.Empty(t, lost)
}

// While a single claim holds a key's head, a batch claim takes nothing of the key; once it
// completes, the batch starts at the next job.
func TestClaimBatchWaitsForASingleClaim(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2, 3)
	single := b.claimOne(t, b.client)
	require.Equal(t, int64(1), single.Seq)
	batches, err := b.client.ClaimBatch(b.ctx, 10, 10)
	require.NoError(t, err)
	require.Empty(t, batches)
	require.NoError(t, b.client.Complete(b.ctx, single))
	batches, err = b.client.ClaimBatch(b.ctx, 10, 10)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, []int64{2, 3}, seqsOf(batches[0]))
}

// A batch's lease runs out and another worker recovers its first job while the batch's worker
// still holds the rest: the recovery marks the later jobs as the crashed claim left them
// (crash_lease_until: running, leased until the batch's lease ended), so the stale worker's
// settlements of any of them are refused, no head row is left on a closed job, and the key
// goes on in order, each later job recovered alone.
func TestOverlappingSettlementsOfAKeyLeaveNoClosedHead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ids, stale := b.claimFiveInABatch(t, "k")

	_, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET lease_until = now() - interval '1 millisecond' WHERE job_id = $1 AND state = 'running'`, ids[0])
	require.NoError(t, err)
	other := b.newClient(t, nil)
	recovered, err := other.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	require.Len(t, recovered, 1)
	require.Equal(t, []int64{1}, seqsOf(recovered[0]))
	require.Equal(t, []string{"1:running:2", "2:running:1", "3:running:1", "4:running:1", "5:running:1"}, b.jobsOf(t, "k"))

	// The batch's worker settles: 5 given back, 1 to 3 completed. Nothing of it is taken.
	require.ErrorIs(t, b.client.ReleaseBatch(b.ctx, stale[4:]), ordered.ErrLeaseLost)
	var completed int
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FILTER (WHERE completed)
		FROM ordered_jobs_complete_batch($1, $2, 0, 5, '1 hour')`,
		[]int64{ids[0], ids[1], ids[2]}, []int64{stale[0].ClaimVersion, stale[1].ClaimVersion, stale[2].ClaimVersion}).Scan(&completed))
	require.Zero(t, completed, "the stale batch completed something")
	lost, err := other.CompleteMany(b.ctx, recovered[0])
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Empty(t, b.closedHeads(t, "k"), "a closed job is its key's head")

	// The later jobs' leases are the crashed batch's, expired: the key goes on with 2, 3, 4
	// and 5 recovered in turn, then an event enqueued after.
	for _, seq := range []int64{2, 3, 4, 5, 6} {
		if seq == 6 {
			b.enqueue(t, "k", 6)
		}
		batches, err := other.ClaimBatch(b.ctx, 1, 5)
		require.NoError(t, err)
		require.Len(t, batches, 1, "the key is stuck before seq %d", seq)
		require.Equal(t, []int64{seq}, seqsOf(batches[0]))
		lost, err := other.CompleteMany(b.ctx, batches[0])
		require.NoError(t, err)
		require.Empty(t, lost)
		require.Empty(t, b.closedHeads(t, "k"), "a closed job is its key's head")
	}
	require.Equal(t, []string{"1:done:2", "2:done:2", "3:done:2", "4:done:2", "5:done:2", "6:done:1"}, b.jobsOf(t, "k"))
}

// A later job of a batch is settled alone only once the batch has handed it its claim: a
// failure of it out of turn (while the batch's first job runs) is refused; once the jobs
// before it are completed it is the running head, its failure for good moves the key on with
// no closed head, and the batch's claim ends with it, so its jobs after are claimed afresh.
func TestOverlappingFailureAndCompletionLeaveNoClosedHead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ids, batch := b.claimFiveInABatch(t, "k")

	var failed bool
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT ordered_job_fail($1, $2, 'boom', false, false)`,
		ids[2], batch[2].ClaimVersion).Scan(&failed))
	require.False(t, failed, "a later job of a batch failed out of turn")

	lost, err := b.client.CompleteMany(b.ctx, batch[:2])
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Equal(t, []string{"1:done:1", "2:done:1", "3:running:1", "4:running:1", "5:running:1"}, b.jobsOf(t, "k"))
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT ordered_job_fail($1, $2, 'boom', false, false)`,
		ids[2], batch[2].ClaimVersion).Scan(&failed))
	require.True(t, failed)
	require.Empty(t, b.closedHeads(t, "k"), "a closed job is its key's head")

	lost, err = b.client.CompleteMany(b.ctx, batch[3:])
	require.NoError(t, err)
	require.Len(t, lost, 2, "the batch's claim outlived its running head")
	batches, err := b.client.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, []int64{4, 5}, seqsOf(batches[0]))
	lost, err = b.client.CompleteMany(b.ctx, batches[0])
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Equal(t, []string{"1:done:1", "2:done:1", "3:failed:1", "4:done:1", "5:done:1"}, b.jobsOf(t, "k"))
}

// closedHeads returns the seqs of key's closed (done or failed) jobs that its head row points at.
func (b *testBundle) closedHeads(t *testing.T, key string) []int64 {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, `SELECT j.seq FROM ordered_heads AS h JOIN ordered_jobs AS j ON j.id = h.job_id
		WHERE h.key = $1 AND j.status NOT IN ('queued', 'blocked') ORDER BY j.seq`, key)
	require.NoError(t, err)
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return seqs
}

// claimFiveInABatch enqueues seqs 1 to 5 of key and claims them, all in one batch.
func (b *testBundle) claimFiveInABatch(t *testing.T, key string) (ids []int64, batch []*ordered.Job) {
	t.Helper()
	ids = b.enqueue(t, key, 1, 2, 3, 4, 5)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 5)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	require.Equal(t, []int64{1, 2, 3, 4, 5}, seqsOf(batches[0]))
	return ids, batches[0]
}
