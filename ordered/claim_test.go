package ordered_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
)

func TestClaimCompleteInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2, 3)

	for _, want := range []int64{1, 2, 3} {
		j := b.claimOne(t, b.client)
		require.Equal(t, want, j.Seq)
		require.Equal(t, 1, j.Attempt)
		b.claimNone(t, b.client) // the key's next job waits for this one
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	b.claimNone(t, b.client)
}

// Guarantee 1: concurrent workers never receive the same job.
func TestClaimConcurrentWorkersGetDistinctJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const keys, perKey, workers = 400, 5, 12
	evs := make([]ordered.Event, 0, keys*perKey)
	for k := range keys {
		for s := range perKey {
			evs = append(evs, ordered.Event{Key: fmt.Sprintf("k%d", k), Seq: int64(s)})
		}
	}
	_, err := b.client.EnqueueMany(b.ctx, evs)
	require.NoError(t, err)

	var mu sync.Mutex
	claimed := map[int64]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := b.newClient(t, nil)
			idle := 0
			for idle < 3 {
				jobs, err := c.Claim(b.ctx, 1+w%4)
				if err != nil {
					errs <- err
					return
				}
				if len(jobs) == 0 {
					idle++
					continue
				}
				idle = 0
				for _, j := range jobs {
					mu.Lock()
					claimed[j.ID]++
					mu.Unlock()
					if err := c.Complete(b.ctx, j); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	// Idle workers may stop while a key still has jobs; drain what is left serially.
	for {
		jobs, err := b.client.Claim(b.ctx, 100)
		require.NoError(t, err)
		if len(jobs) == 0 {
			break
		}
		for _, j := range jobs {
			claimed[j.ID]++
			require.NoError(t, b.client.Complete(b.ctx, j))
		}
	}
	require.Len(t, claimed, keys*perKey)
	for id, n := range claimed {
		require.Equal(t, 1, n, "job %d was claimed %d times", id, n)
	}
}

// Guarantee 1: a locked candidate never makes another claim wait.
func TestClaimSkipsLockedCandidate(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "a", 1)
	b.enqueue(t, "b", 1)

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	// The claim locks a candidate's head row (ordered_heads): hold key a's.
	var lockedID int64
	require.NoError(t, tx.QueryRow(b.ctx, `SELECT job_id FROM ordered_heads WHERE key = 'a' FOR UPDATE`).Scan(&lockedID))

	// Were the claim to wait for the lock, it would hit this deadline.
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	jobs, err := b.client.Claim(ctx, 2)
	require.NoError(t, err)
	require.Len(t, jobs, 1)
	require.Equal(t, "b", jobs[0].Key)

	require.NoError(t, tx.Rollback(b.ctx))
	a := b.claimOne(t, b.client)
	require.Equal(t, lockedID, a.ID)
}

// The claim takes up to limit jobs in one statement, one per key.
func TestClaimBatchTakesOneHeadPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for k := range 5 {
		b.enqueue(t, fmt.Sprintf("k%d", k), 1, 2, 3)
	}
	jobs, err := b.client.Claim(b.ctx, 100)
	require.NoError(t, err)
	require.Len(t, jobs, 5)
	seen := map[string]bool{}
	for _, j := range jobs {
		require.Equal(t, int64(1), j.Seq)
		require.False(t, seen[j.Key])
		seen[j.Key] = true
	}
	jobs, err = b.client.Claim(b.ctx, 3)
	require.NoError(t, err)
	require.Empty(t, jobs)
}

// The NOT EXISTS guard is checked by the claim itself, not only implied by the head row: a
// head row wrongly pointing at a later job of its key while an earlier one is open, queued and
// due or running under an expired lease, is still not claimed.
func TestClaimGuardAppliesToReadyAndRecoveredJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Lease: time.Minute})
	ids := b.enqueue(t, "k", 1, 2, 3)
	first := b.claimOne(t, b.client)
	require.Equal(t, ids[0], first.ID)

	// The head row as the claim left it, to put back at the end.
	var saved []byte
	require.NoError(t, b.pool.QueryRow(b.ctx,
		`SELECT to_jsonb(h) FROM ordered_heads AS h WHERE h.key = 'k'`).Scan(&saved))

	// Corrupt the head row: a queued, due seq 2 as the head while seq 1 is open.
	tag, err := b.pool.Exec(b.ctx, `UPDATE ordered_heads SET job_id = $1, seq = 2, state = 'queued',
		available_at = now() - interval '1 second', lease_until = NULL WHERE key = 'k'`, ids[1])
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	b.claimNone(t, b.client)

	// A running seq 3 as the head, its lease expired and attempts left, while seqs 1 and 2
	// are open: it must not be recovered either.
	tag, err = b.pool.Exec(b.ctx, `UPDATE ordered_heads SET job_id = $1, seq = 3, state = 'running',
		attempts = 1, lease_until = now() - interval '1 second' WHERE key = 'k'`, ids[2])
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	b.claimNone(t, b.client)

	// The head row put back: the queue ends keeping its invariants, as the cleanup checks.
	tag, err = b.pool.Exec(b.ctx, `
		UPDATE ordered_heads AS h
		SET (job_id, seq, state, available_at, lease_until, claim_version, attempts, max_attempts,
		     attempted_at, claimed_by, batch_to, closed_to, closed_above)
		  = (o.job_id, o.seq, o.state, o.available_at, o.lease_until, o.claim_version, o.attempts,
		     o.max_attempts, o.attempted_at, o.claimed_by, o.batch_to, o.closed_to, o.closed_above)
		FROM jsonb_populate_record(NULL::ordered_heads, $1::jsonb) AS o
		WHERE h.key = o.key`, saved)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// CompleteMany completes the current claims in one statement, reports the stale ones as lost
// without touching them, and hands each completed key to its next job.
func TestCompleteManySettlesCurrentClaimsOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a1 := b.enqueue(t, "a", 1, 2)[0]
	b.enqueue(t, "b", 1, 2)
	b.enqueue(t, "c", 1)
	jobs, err := b.client.Claim(b.ctx, 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a/1", "b/1", "c/1"}, describe(jobs))

	// a/1's claim goes stale: its lease expires and another claim takes it.
	var stale *ordered.Job
	for _, j := range jobs {
		if j.ID == a1 {
			stale = j
		}
	}
	b.expireLease(t, a1)
	retaken := b.claimOne(t, b.client)
	require.Equal(t, a1, retaken.ID)

	lost, err := b.client.CompleteMany(b.ctx, jobs)
	require.NoError(t, err)
	require.Equal(t, []*ordered.Job{stale}, lost)
	require.Equal(t, "running", b.jobStatus(t, a1), "a lost claim changes nothing")

	next, err := b.client.Claim(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, []string{"b/2"}, describe(next), "b moved on; a is still running; c is drained")

	lost, err = b.client.CompleteMany(b.ctx, []*ordered.Job{retaken, next[0]})
	require.NoError(t, err)
	require.Empty(t, lost)
	require.Equal(t, []string{"a/2"}, describe(b.claimAll(t)))
}

func (b *testBundle) claimAll(t *testing.T) []*ordered.Job {
	t.Helper()
	jobs, err := b.client.Claim(b.ctx, 100)
	require.NoError(t, err)
	return jobs
}

// A batch may hold a stale and the current claim of the same job: the current one completes,
// in either order, and only the stale one is lost.
func TestCompleteManyMatchesClaimsNotJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ida := b.enqueue(t, "a", 1)[0]
	idb := b.enqueue(t, "b", 1)[0]
	first, err := b.client.Claim(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, first, 2)
	b.expireLease(t, ida)
	b.expireLease(t, idb)
	again, err := b.client.Claim(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, again, 2)
	byID := func(jobs []*ordered.Job, id int64) *ordered.Job {
		for _, j := range jobs {
			if j.ID == id {
				return j
			}
		}
		t.Fatalf("job %d not claimed", id)
		return nil
	}
	staleA, currentA := byID(first, ida), byID(again, ida)
	staleB, currentB := byID(first, idb), byID(again, idb)

	lost, err := b.client.CompleteMany(b.ctx, []*ordered.Job{staleA, currentA, currentB, staleB})
	require.NoError(t, err)
	require.ElementsMatch(t, []*ordered.Job{staleA, staleB}, lost)
	require.Equal(t, "done", b.jobStatus(t, ida))
	require.Equal(t, "done", b.jobStatus(t, idb))
}

// A completion batch that deadlocks with a transaction enqueuing to two of its keys out of
// key order is retried: the batch locks "a" and waits for "b", which the transaction holds
// and then asks for "a". The batch's side detects the deadlock (PostgreSQL checks once, a
// deadlock_timeout into a wait: 3 s for the batch, leaving time for the transaction to ask,
// and a minute for the transaction), is rolled back, and its retry completes both jobs.
func TestCompleteManyRetriesADeadlockWithAnEnqueue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "a", 1)
	b.enqueue(t, "b", 1)
	jobs := b.claimAll(t)
	require.Len(t, jobs, 2)
	cfg, err := pgxpool.ParseConfig(b.queue.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["deadlock_timeout"] = "3s"
	batchPool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(batchPool.Close)
	batchClient, err := ordered.NewClient(batchPool, nil)
	require.NoError(t, err)

	tx := b.beginTx(t)
	_, err = tx.Exec(b.ctx, `SET LOCAL deadlock_timeout = '1min'`)
	require.NoError(t, err)
	_, err = b.client.EnqueueTx(b.ctx, tx, validEvent("b", 2))
	require.NoError(t, err)

	type result struct {
		lost []*ordered.Job
		err  error
	}
	done := make(chan result, 1)
	go func() {
		lost, err := batchClient.CompleteMany(b.ctx, jobs)
		done <- result{lost, err}
	}()
	waitFor(t, 10*time.Second, "the batch waiting for key b", func() bool {
		return b.completionsBlockedBy(t, tx) == 1
	})
	_, err = b.client.EnqueueTx(b.ctx, tx, validEvent("a", 2))
	require.NoError(t, err, "the batch, not the enqueue, is chosen as the deadlock's victim")
	require.NoError(t, tx.Commit(b.ctx))

	r := <-done
	require.NoError(t, r.err)
	require.Empty(t, r.lost)
	for _, j := range jobs {
		require.Equal(t, "done", b.jobStatus(t, j.ID))
	}
	require.Len(t, b.claimAll(t), 2, "a/2 and b/2 are the keys' heads")
}

// A claim's time (Job.AttemptedAt) follows the completion it saw: a claim of a key's next job
// is never stamped before its predecessor's finish, even when the claim's statement began
// before that completion committed. The history checkers compare these two times.
func TestClaimTimeFollowsTheCompletionItSaw(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 1, 2)
	first := b.claimOne(t, b.client)

	// The claim statement arrives first and waits on a lock the test holds (one of this
	// test's schema: tests share the database); its statement time is taken then. The first job completes meanwhile, and the claim sees it done.
	hold, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer hold.Release()
	_, err = hold.Exec(b.ctx, `SELECT pg_advisory_lock(hashtext(current_schema()))`)
	require.NoError(t, err)
	claimer, err := b.pool.Acquire(b.ctx)
	require.NoError(t, err)
	defer claimer.Release()
	var pid int
	require.NoError(t, claimer.QueryRow(b.ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	claimed := make(chan []*pgconn.Result, 1)
	go func() {
		res, err := claimer.Conn().PgConn().Exec(b.ctx,
			`SELECT pg_advisory_lock(hashtext(current_schema())); SELECT id FROM ordered_jobs_claim(1, '1 minute')`).ReadAll()
		assert.NoError(t, err)
		claimed <- res
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(b.ctx,
			`SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting))
		return waiting
	}, time.Minute, 10*time.Millisecond, "the claim never waited on the lock")
	require.NoError(t, b.client.Complete(b.ctx, first))
	_, err = hold.Exec(b.ctx, `SELECT pg_advisory_unlock(hashtext(current_schema()))`)
	require.NoError(t, err)

	res := <-claimed
	require.Len(t, res, 2)
	require.Len(t, res[1].Rows, 1, "the claim did not take the key's next job")
	var finished, attempted time.Time
	require.NoError(t, b.pool.QueryRow(b.ctx, `
		SELECT (SELECT finished_at FROM ordered_jobs_now WHERE key = 'k' AND seq = 1),
		       (SELECT attempted_at FROM ordered_jobs_now WHERE key = 'k' AND seq = 2)`).Scan(&finished, &attempted))
	require.False(t, attempted.Before(finished),
		"seq 2 claimed at %s, before seq 1 finished at %s", attempted.Format(time.RFC3339Nano), finished.Format(time.RFC3339Nano))
}
