package ordered_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// BlockedKeysPage names each blocked key's failed head and counts the jobs behind it, up to
// the bound asked for; pages resume after the last key of the previous one.
func TestBlockedKeysPageCountsTheJobsWaitingBehind(t *testing.T) {
	t.Parallel()
	b := setup(t, blockPolicyCfg())
	for _, key := range []string{"a", "b", "c"} {
		b.enqueue(t, key, 0, 1, 2, 3, 4)
		j := b.claimOne(t, b.client)
		_, err := b.client.Fail(b.ctx, j, errors.New("boom "+key))
		require.NoError(t, err)
	}
	p, err := b.client.BlockedKeysPage(b.ctx, ordered.BlockedKeysPageParams{Limit: 2, WaitingUpTo: 3})
	require.NoError(t, err)
	require.Len(t, p.Keys, 2)
	require.Equal(t, "a", p.Keys[0].Key)
	require.Equal(t, "boom a", p.Keys[0].LastError)
	require.Equal(t, int64(3), p.Keys[0].Waiting)
	require.True(t, p.Keys[0].WaitingMore, "4 wait; counting stopped at 3")
	require.NotNil(t, p.Next)
	p, err = b.client.BlockedKeysPage(b.ctx, ordered.BlockedKeysPageParams{After: p.Next})
	require.NoError(t, err)
	require.Len(t, p.Keys, 1)
	require.Equal(t, "c", p.Keys[0].Key)
	require.Equal(t, int64(4), p.Keys[0].Waiting)
	require.False(t, p.Keys[0].WaitingMore)
	require.Nil(t, p.Next)
}

// RunningJobs lists the soonest lease to end first, so an expired one comes first with a
// negative LeaseLeft; Job shows the same lease.
func TestRunningJobsListExpiredLeasesFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Lease: time.Minute})
	b.enqueue(t, "x", 0)
	b.enqueue(t, "y", 0)
	first := b.claimOne(t, b.client)
	second := b.claimOne(t, b.client)
	b.expireLease(t, second.ID)
	run, err := b.client.RunningJobs(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, run, 2)
	require.Equal(t, second.ID, run[0].ID)
	require.Negative(t, run[0].LeaseLeft)
	require.Equal(t, first.ID, run[1].ID)
	require.Positive(t, run[1].LeaseLeft)
	j, err := b.client.Job(b.ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, ordered.JobRunning, j.Status)
	require.Equal(t, first.ClaimVersion, j.ClaimVersion)
	require.Positive(t, j.LeaseLeft)
}

// DoneByMinute counts the jobs done in the window by the minute they finished in.
func TestDoneByMinuteCountsDoneJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "d", 0, 1, 2)
	for range 3 {
		require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	}
	counts, err := b.client.DoneByMinute(b.ctx, time.Hour)
	require.NoError(t, err)
	var total int64
	for _, c := range counts {
		total += c.Count
		require.Equal(t, c.Minute, c.Minute.Truncate(time.Minute))
	}
	require.Equal(t, int64(3), total)
}

// A worker's claims record its name: RunningJobs, Workers and Job name the worker that holds
// a job, and a finished job keeps the name of its last claimer. Without a Name, a worker on a
// pool with an application_name goes by that, and on one without by "ordered HOST:PID".
func TestClaimsRecordTheWorkerThatHoldsThem(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for _, tc := range []struct {
		name, key, app, want string
	}{
		{"billing-worker-1", "named", "some-service", "billing-worker-1"},
		{"", "by-pool", "some-service", "some-service"},
		{"", "by-host", "", fmt.Sprintf("ordered %s:%d", hostname(t), os.Getpid())},
	} {
		pool := newAppPool(t, b.ctx, b.queue.URL, tc.app, 4)
		c, err := ordered.NewClient(pool, nil)
		require.NoError(t, err)
		id := b.enqueue(t, tc.key, 0)[0]
		started, release := make(chan struct{}), make(chan struct{})
		w := startWorker(t, b, c, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
			close(started)
			<-release
			return nil
		}), &ordered.WorkerConfig{Name: tc.name, PollInterval: 20 * time.Millisecond})
		<-started

		run, err := b.client.RunningJobs(b.ctx, 10)
		require.NoError(t, err)
		require.Len(t, run, 1)
		require.Equal(t, tc.want, run[0].ClaimedBy)
		workers, err := b.client.Workers(b.ctx, 10)
		require.NoError(t, err)
		require.Len(t, workers, 1)
		require.Equal(t, ordered.WorkerClaims{Name: tc.want, Running: 1, LastClaimedAt: workers[0].LastClaimedAt}, workers[0])
		require.False(t, workers[0].LastClaimedAt.IsZero())

		close(release)
		waitFor(t, 30*time.Second, "the job done", func() bool { return b.jobStatus(t, id) == "done" })
		j, err := b.client.Job(b.ctx, id)
		require.NoError(t, err)
		require.Equal(t, tc.want, j.ClaimedBy, "a finished job keeps its last claimer")
		workers, err = b.client.Workers(b.ctx, 10)
		require.NoError(t, err)
		require.Empty(t, workers, "a worker that holds nothing is not listed")
		require.NoError(t, w.Stop(b.ctx)) // the next case's job is for the next worker
	}
}

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	require.NoError(t, err)
	return h
}

// A batch's later jobs stay queued in their rows while they run under the claim of its first
// job, which its key's head row holds: Stats, Job, KeyTimeline, RunningJobs and Workers show
// them running, as their claims returned them, and expired with their batch's lease.
func TestBatchLaterJobsShowAsRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Lease: time.Minute})
	b.enqueue(t, "k", 1, 2, 3, 4, 5)
	batches, err := b.client.ClaimBatch(b.ctx, 1, 3)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	batch := batches[0]
	require.Equal(t, []int64{1, 2, 3}, seqsOf(batch))
	b.enqueue(t, "e", 1, 2)
	batches, err = b.client.ClaimBatch(b.ctx, 1, 2)
	require.NoError(t, err)
	require.Len(t, batches, 1)
	stalled := batches[0]
	require.Equal(t, []int64{1, 2}, seqsOf(stalled))
	require.Equal(t, "e", stalled[0].Key)
	b.expireLease(t, stalled[0].ID)

	st, err := b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, [3]int64{2, 5, 2}, [3]int64{st.Queued, st.Running, st.ExpiredLeases}, "queued, running, expired")
	shared, err := store.QueueStatsShared(b.ctx, b.pool, 0)
	require.NoError(t, err)
	require.Equal(t, [3]int64{2, 5, 2}, [3]int64{shared.Queued, shared.Running, shared.ExpiredLeases}, "the shared counts")

	head, err := b.client.Job(b.ctx, batch[0].ID)
	require.NoError(t, err)
	require.NotEmpty(t, head.ClaimedBy)
	for _, j := range batch {
		rec, err := b.client.Job(b.ctx, j.ID)
		require.NoError(t, err)
		require.Equal(t, ordered.JobRunning, rec.Status, "seq %d", j.Seq)
		require.Equal(t, j.ClaimVersion, rec.ClaimVersion, "seq %d", j.Seq)
		require.Equal(t, j.Attempt, rec.Attempts, "seq %d", j.Seq)
		require.True(t, j.LeaseUntil.Equal(rec.LeaseUntil), "seq %d: lease %v, claimed until %v", j.Seq, rec.LeaseUntil, j.LeaseUntil)
		require.Positive(t, rec.LeaseLeft, "seq %d", j.Seq)
		require.Equal(t, head.ClaimedBy, rec.ClaimedBy, "seq %d", j.Seq)
	}
	tl, err := b.client.KeyTimeline(b.ctx, "k", ordered.KeyTimelineParams{})
	require.NoError(t, err)
	var statuses []ordered.JobStatus
	for _, j := range tl.Jobs {
		statuses = append(statuses, j.Status)
	}
	require.Equal(t, []ordered.JobStatus{"running", "running", "running", "queued", "queued"}, statuses)

	run, err := b.client.RunningJobs(b.ctx, 10)
	require.NoError(t, err)
	var listed []string
	for _, r := range run {
		listed = append(listed, fmt.Sprintf("%s/%d v%d", r.Key, r.Seq, r.ClaimVersion))
	}
	var want []string
	for _, j := range append(append([]*ordered.Job{}, stalled...), batch...) {
		want = append(want, fmt.Sprintf("%s/%d v%d", j.Key, j.Seq, j.ClaimVersion))
	}
	require.Equal(t, want, listed, "the expired batch first, each job at its claim")
	workers, err := b.client.Workers(b.ctx, 10)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	require.Equal(t, [2]int{5, 2}, [2]int{workers[0].Running, workers[0].Expired}, "running, expired")

	lost, err := b.client.CompleteMany(b.ctx, batch)
	require.NoError(t, err)
	require.Empty(t, lost)
	st, err = b.client.Stats(b.ctx)
	require.NoError(t, err)
	require.Equal(t, [4]int64{2, 2, 3, 2}, [4]int64{st.Queued, st.Running, st.Done, st.ExpiredLeases}, "queued, running, done, expired")
	rec, err := b.client.Job(b.ctx, batch[2].ID)
	require.NoError(t, err)
	require.Equal(t, ordered.JobDone, rec.Status)
	require.Equal(t, batch[2].ClaimVersion, rec.ClaimVersion)
}

// RunningJobs cut short lists the first of all running jobs by lease, key and seq: batches
// claimed in one statement share a lease, and a batch's later jobs are never listed without
// its head.
func TestRunningJobsCutShortListsTheFirstOfAll(t *testing.T) {
	t.Parallel()
	b := setup(t, &ordered.Config{Lease: time.Minute})
	var events []ordered.Event
	for k := range 50 {
		for seq := int64(1); seq <= 5; seq++ {
			events = append(events, ordered.Event{Key: fmt.Sprintf("k%02d", k), Seq: seq})
		}
	}
	_, err := b.client.EnqueueMany(b.ctx, events)
	require.NoError(t, err)
	batches, err := b.client.ClaimBatch(b.ctx, 50, 5)
	require.NoError(t, err)
	require.Len(t, batches, 50)

	describeRun := func(run []ordered.RunningJob) []string {
		var out []string
		for _, r := range run {
			out = append(out, fmt.Sprintf("%s/%d", r.Key, r.Seq))
		}
		return out
	}
	all, err := b.client.RunningJobs(b.ctx, 1000)
	require.NoError(t, err)
	require.Len(t, all, 250)
	require.True(t, slices.IsSortedFunc(all, func(x, y ordered.RunningJob) int {
		return cmp.Or(x.LeaseUntil.Compare(y.LeaseUntil), cmp.Compare(x.Key, y.Key), cmp.Compare(x.Seq, y.Seq))
	}), "sorted by lease, key and seq")
	first, err := b.client.RunningJobs(b.ctx, 10)
	require.NoError(t, err)
	require.Equal(t, describeRun(all[:10]), describeRun(first))
}
