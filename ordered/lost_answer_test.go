package ordered_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// A completion batch whose connection fails after its commit, before its answer arrives, is
// found out, not mistaken for lost claims: CompleteMany reports no error and nothing lost.
func TestCompleteManyFindsOutABatchWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a1 := b.enqueue(t, "a", 1, 2)[0]
	b.enqueue(t, "b", 1)
	cut := &answerCutter{marker: "ordered_jobs_complete(", committed: func() bool {
		return b.hasStatus(a1, "done")
	}}
	c := b.clientCutBy(t, cut, nil)
	jobs, err := c.Claim(b.ctx, 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a/1", "b/1"}, describe(jobs))
	stale := jobs[0]
	if stale.Key != "b" {
		stale = jobs[1]
	}
	b.expireLease(t, stale.ID) // b/1's claim goes stale: lost, whatever the answer
	retaken := b.claimOne(t, b.client)
	require.Equal(t, stale.ID, retaken.ID)

	cut.arm(afterCommit)
	lost, err := c.CompleteMany(b.ctx, jobs)
	require.NoError(t, err)
	require.Equal(t, []*ordered.Job{stale}, lost)
	require.Equal(t, int32(1), cut.cuts.Load(), "the answer was not cut")
	require.Equal(t, "done", b.jobStatus(t, a1))
}

// So is a single completion's.
func TestCompleteFindsOutACompletionWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a1 := b.enqueue(t, "a", 1, 2)[0]
	cut := &answerCutter{marker: "ordered_jobs_complete(", committed: func() bool {
		return b.hasStatus(a1, "done")
	}}
	c := b.clientCutBy(t, cut, nil)
	job := b.claimOne(t, c)

	cut.arm(afterCommit)
	require.NoError(t, c.Complete(b.ctx, job))
	require.Equal(t, int32(1), cut.cuts.Load(), "the answer was not cut")
	require.Equal(t, "a/2", b.claimOne(t, b.client).IdempotencyKey())
}

// A batch whose connection fails before the statement reaches the server changed nothing,
// and CompleteMany says so.
func TestCompleteManyReportsABatchThatNeverRan(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	a1 := b.enqueue(t, "a", 1)[0]
	cut := &answerCutter{marker: "ordered_jobs_complete("}
	c := b.clientCutBy(t, cut, nil)
	job := b.claimOne(t, c)

	cut.arm(beforeSending)
	_, err := c.CompleteMany(b.ctx, []*ordered.Job{job})
	require.ErrorContains(t, err, "connection lost before the statement was sent")
	require.Equal(t, int32(1), cut.cuts.Load())
	require.Equal(t, "running", b.jobStatus(t, a1))
	require.NoError(t, c.Complete(b.ctx, job), "the claim still holds")
}

// The next job a worker's completion batch claimed runs at once when the batch's answer is
// lost after its commit, on its first attempt, not after its lease (a minute here) expires.
func TestWorkerRunsTheNextJobOfABatchWhoseAnswerWasLost(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ids := b.enqueue(t, "a", 1, 2)
	cut := &answerCutter{marker: "ordered_jobs_complete(", committed: func() bool {
		return b.hasStatus(ids[0], "done")
	}}
	c := b.clientCutBy(t, cut, &ordered.Config{Lease: time.Minute})
	var ran []string
	runCutAfterFirst(t, b, c, cut, func(j *ordered.Job) {
		ran = append(ran, fmt.Sprintf("%s attempt %d", j.IdempotencyKey(), j.Attempt))
	})
	require.Equal(t, []string{"a/2 attempt 1"}, ran)
}

// runCutAfterFirst runs a/1 and a/2 on a worker of c with one slot: the batch that completes
// a/1 (and claims a/2) has its answer cut by cut, and second runs as a/2's handler. It
// returns once a/2 has run.
func runCutAfterFirst(t *testing.T, b *testBundle, c *ordered.Client, cut *answerCutter, second func(*ordered.Job)) {
	t.Helper()
	ran := make(chan struct{})
	startWorker(t, b, c, ordered.HandlerFunc(func(_ context.Context, j *ordered.Job) error {
		switch j.Seq {
		case 1:
			cut.arm(afterCommit)
		case 2:
			second(j)
			close(ran)
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 1, PollInterval: time.Hour})
	select {
	case <-ran:
	case <-time.After(20 * time.Second):
		t.Fatal("a/2 did not run")
	}
	require.Equal(t, int32(1), cut.cuts.Load(), "the answer was not cut")
}

// A next job whose lease ran out before the batch's answer was known is not taken over: by
// then another worker may have claimed it. The job is recovered as any expired lease is, and
// it never runs in two places at once.
func TestWorkerLeavesANextJobWhoseLeaseRanOutMeanwhile(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ids := b.enqueue(t, "a", 1, 2, 3)
	leaseExpired := func(id int64) bool {
		var expired bool
		err := b.pool.QueryRow(b.ctx, `SELECT status = 'running' AND lease_until < clock_timestamp()
			FROM ordered_jobs_now WHERE id = $1`, id).Scan(&expired)
		return err == nil && expired
	}
	// The error reaches the worker only once the lease of a/2, claimed by the batch, is over.
	cut := &answerCutter{marker: "ordered_jobs_complete(", committed: func() bool {
		return b.hasStatus(ids[0], "done") && leaseExpired(ids[1])
	}}
	// Short, to run out while the answer is held; long enough for the claim that recovers a/2
	// to see it through on a busy machine.
	c := b.clientCutBy(t, cut, &ordered.Config{Lease: 2 * time.Second})
	other := b.newClient(t, &ordered.Config{Lease: time.Minute})
	var ran []string
	runCutAfterFirst(t, b, c, cut, func(j *ordered.Job) {
		ran = append(ran, fmt.Sprintf("worker: %s attempt %d", j.IdempotencyKey(), j.Attempt))
		// Another worker tries while this one runs it.
		if jobs, err := other.Claim(b.ctx, 1); err == nil && len(jobs) == 1 {
			ran = append(ran, "other: "+jobs[0].IdempotencyKey())
		}
	})
	// Attempt 1 is the batch's claim, whose answer was lost. A machine slow enough to let the
	// recovered claim's short lease run out too before the handler starts makes it attempt 3
	// or later; what matters is that a/2 ran once, here, and not on the lost claim.
	require.Len(t, ran, 1, "a/2 ran in two places: %v", ran)
	var attempt int
	_, err := fmt.Sscanf(ran[0], "worker: a/2 attempt %d", &attempt)
	require.NoError(t, err, ran[0])
	require.GreaterOrEqual(t, attempt, 2, "a/2 ran on the lost claim")
}

// A job of the batch done at the version the batch held may have been completed by another
// statement of the same claim. A batch that never reached the server is not mistaken for
// having committed because of it: its other claim, still live, is not reported lost.
func TestCompleteManyDoesNotTakeAnotherStatementsCommitForItsOwn(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "a", 1)
	kID := b.enqueue(t, "k", 1)[0]
	cut := &answerCutter{marker: "ordered_jobs_complete("}
	c := b.clientCutBy(t, cut, nil)
	j, k := b.claimAAndCompleteItElsewhere(t, c)

	cut.arm(beforeSending)
	_, err := c.CompleteMany(b.ctx, []*ordered.Job{j, k})
	require.ErrorContains(t, err, "connection lost before the statement was sent")
	require.Equal(t, "running", b.jobStatus(t, kID))
	require.NoError(t, c.Complete(b.ctx, k), "k's claim still holds")
}

// A batch that committed is credited with its own completions, not with an earlier
// statement's completion of one of its claims (the same claim completed twice).
func TestCompleteManyTakesItsOwnCommitNotAnEarlierOne(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "a", 1)
	kID := b.enqueue(t, "k", 1)[0]
	cut := &answerCutter{marker: "ordered_jobs_complete(", committed: func() bool {
		return b.hasStatus(kID, "done")
	}}
	c := b.clientCutBy(t, cut, nil)
	j, k := b.claimAAndCompleteItElsewhere(t, c)

	cut.arm(afterCommit)
	lost, err := c.CompleteMany(b.ctx, []*ordered.Job{j, k})
	require.NoError(t, err)
	require.Equal(t, int32(1), cut.cuts.Load(), "the answer was not cut")
	require.Equal(t, []*ordered.Job{j}, lost, "the batch completed k/1; a/1 was done before it")
}

// claimAAndCompleteItElsewhere claims a/1 and k/1 through c, and completes a/1's claim in
// another statement (b's client), as a handler completing its own job would.
func (b *testBundle) claimAAndCompleteItElsewhere(t *testing.T, c *ordered.Client) (a, k *ordered.Job) {
	t.Helper()
	jobs, err := c.Claim(b.ctx, 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a/1", "k/1"}, describe(jobs))
	a, k = jobs[0], jobs[1]
	if a.Key != "a" {
		a, k = k, a
	}
	require.NoError(t, b.client.Complete(b.ctx, a))
	return a, k
}

// What a lost batch did is read from the rows it wrote: a next job it claimed that another
// claim has taken since (its lease ran out) is not the batch's any more and is not returned.
func TestBatchOutcomeLeavesOutNextJobsClaimedSince(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "a", 1, 2)
	b.enqueue(t, "b", 1, 2)
	b.enqueue(t, "c", 1)
	jobs := b.claimAll(t)
	require.Len(t, jobs, 3)
	ids, versions, keys := batchOf(jobs)
	completed, next, err := store.JobCompleteMany(b.ctx, b.pool, ids, versions, len(ids), time.Minute)
	require.NoError(t, err)
	require.Len(t, completed, 3)
	require.Len(t, next, 2) // a/2 and b/2

	var b2 store.ClaimedJob
	for _, n := range next {
		if n.Key == "b" {
			b2 = n
		}
	}
	b.expireLease(t, b2.ID)
	require.Equal(t, "b/2", b.claimOne(t, b.client).IdempotencyKey())

	gotDone, gotNext, err := store.JobBatchOutcome(b.ctx, b.pool, ids, versions, keys, time.Minute)
	require.NoError(t, err)
	require.ElementsMatch(t, completed, gotDone)
	require.Len(t, gotNext, 1)
	require.Equal(t, "a", gotNext[0].Key)
	require.Equal(t, int64(2), gotNext[0].Seq)

	// A batch that did not commit shows nothing.
	gotDone, gotNext, err = store.JobBatchOutcome(b.ctx, b.pool, []int64{b2.ID}, []int64{b2.ClaimVersion}, []string{"b"}, time.Minute)
	require.NoError(t, err)
	require.Empty(t, gotDone)
	require.Empty(t, gotNext)
}

// A lost batch's next jobs that a REPEATABLE READ enqueue of their keys holds (it locks the
// keys' rows, then their heads) are taken over once the enqueue ends: the outcome locks the
// key rows first, as the enqueue does, so it waits rather than deadlock, and it neither skips
// them (one on its last attempt would fail unrun when its lease ran out) nor gives up.
func TestBatchOutcomeWaitsForAnEnqueueHoldingItsKeys(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, key := range []string{"a", "b"} {
		second := validEvent(key, 2)
		second.MaxAttempts = 1
		_, err := b.client.EnqueueMany(b.ctx, []ordered.Event{validEvent(key, 1), second})
		require.NoError(t, err)
	}
	jobs := b.claimAll(t)
	require.Len(t, jobs, 2)
	ids, versions, keys := batchOf(jobs)
	completed, next, err := store.JobCompleteMany(b.ctx, b.pool, ids, versions, len(ids), time.Minute)
	require.NoError(t, err)
	require.Len(t, next, 2) // a/2 and b/2, the running heads; suppose the answer was lost

	tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(b.ctx) }()
	_, err = b.client.EnqueueManyTx(b.ctx, tx, []ordered.Event{validEvent("a", 3), validEvent("b", 3)})
	require.NoError(t, err)

	type outcome struct {
		done []store.Claim
		next []store.ClaimedJob
		err  error
	}
	answered := make(chan outcome, 1)
	go func() {
		var o outcome
		o.done, o.next, o.err = store.JobBatchOutcome(b.ctx, b.pool, ids, versions, keys, time.Minute)
		answered <- o
	}()
	waitFor(t, 10*time.Second, "the outcome waiting for the enqueue", func() bool {
		return b.statementsBlockedBy(t, tx, `j\.xmin AS xid`) > 0
	})
	require.NoError(t, tx.Commit(b.ctx))
	o := <-answered
	require.NoError(t, o.err)
	require.ElementsMatch(t, completed, o.done)
	require.ElementsMatch(t, []string{"a/2", "b/2"}, []string{
		fmt.Sprintf("%s/%d", o.next[0].Key, o.next[0].Seq), fmt.Sprintf("%s/%d", o.next[1].Key, o.next[1].Seq)})
}

// batchOf lays jobs' claims out as a completion batch sends them.
func batchOf(jobs []*ordered.Job) (ids, versions []int64, keys []string) {
	ids, versions, keys = make([]int64, len(jobs)), make([]int64, len(jobs)), make([]string, len(jobs))
	for i, j := range jobs {
		ids[i], versions[i], keys[i] = j.ID, j.ClaimVersion, j.Key
	}
	return ids, versions, keys
}

// hasStatus reports whether job id has status; usable off the test's goroutine.
func (b *testBundle) hasStatus(id int64, status string) bool {
	var got string
	err := b.pool.QueryRow(b.ctx, `SELECT status FROM ordered_jobs_now WHERE id = $1`, id).Scan(&got)
	return err == nil && got == status
}

// clientCutBy is a client whose connections cut severs; TLS is off so it can read them.
func (b *testBundle) clientCutBy(t *testing.T, cut *answerCutter, cfg *ordered.Config) *ordered.Client {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(b.queue.URL)
	require.NoError(t, err)
	pcfg.ConnConfig.TLSConfig = nil
	pcfg.ConnConfig.Fallbacks = nil
	pcfg.ConnConfig.DialFunc = cut.dial
	// One round trip a statement, its text in every one (no named prepared statements).
	pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(b.ctx, pcfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	c, err := ordered.NewClient(pool, cfg)
	require.NoError(t, err)
	return c
}

type cutMode int32

const (
	afterCommit   cutMode = iota + 1 // the answer is lost once the statement committed
	beforeSending                    // the statement never reaches the server
)

// answerCutter severs the connection of the next statement whose text holds marker, as a
// network failure would: before the statement is sent, or after it committed (committed
// reports that from another connection) and before its answer is read.
type answerCutter struct {
	marker    string
	committed func() bool
	mode      atomic.Int32
	cuts      atomic.Int32
}

func (a *answerCutter) arm(m cutMode) { a.mode.Store(int32(m)) }

func (a *answerCutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &cuttableConn{Conn: conn, cutter: a}, nil
}

type cuttableConn struct {
	net.Conn
	cutter *answerCutter
	// cutAnswer: this connection sent the marked statement; its answer is to be lost.
	cutAnswer atomic.Bool
}

func (c *cuttableConn) Write(p []byte) (int, error) {
	a := c.cutter
	if a.mode.Load() != 0 && bytes.Contains(p, []byte(a.marker)) {
		switch cutMode(a.mode.Swap(0)) {
		case beforeSending:
			a.cuts.Add(1)
			_ = c.Conn.Close()
			return 0, errors.New("test: connection lost before the statement was sent")
		case afterCommit:
			c.cutAnswer.Store(true)
		}
	}
	return c.Conn.Write(p)
}

func (c *cuttableConn) Read(p []byte) (int, error) {
	if c.cutAnswer.Swap(false) {
		for deadline := time.Now().Add(10 * time.Second); !c.cutter.committed() && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		c.cutter.cuts.Add(1)
		_ = c.Conn.Close()
		return 0, errors.New("test: connection lost after the statement committed")
	}
	return c.Conn.Read(p)
}
