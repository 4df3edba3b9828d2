package ordered_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
)

// Archive deletes done jobs in bounded batches, keeps failed ones, and a re-sent archived
// event is late, not run again.
func TestArchiveDeletesDoneJobsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for k := range 5 {
		b.enqueue(t, fmt.Sprintf("k%d", k), 1, 2)
	}
	for range 5 {
		j := b.claimOne(t, b.client)
		require.NoError(t, b.client.Complete(b.ctx, j))
	}
	failed := b.claimOne(t, b.client)
	_, err := b.client.Fail(b.ctx, failed, errors.New("poison"))
	require.NoError(t, err)

	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 3, n)
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 3})
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, 0, b.countStatus(t, "done"))
	require.Equal(t, 1, b.countStatus(t, "blocked"))

	// Nothing recent is archived while a retention applies.
	j := b.claimOne(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{OlderThan: 1e12})
	require.NoError(t, err)
	require.Zero(t, n)

	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k0", Seq: 1})
	var late *ordered.LateEventError
	require.ErrorAs(t, err, &late)
	require.Equal(t, int64(-1), late.LaterSeq)
}

// Beyond MaxBacklog queued jobs, enqueue fails with ErrBacklogFull and writes nothing.
func TestAdmissionLimitRefusesBeyondMaxBacklog(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	c := b.newClient(t, &ordered.Config{MaxBacklog: 5})
	_, err := c.EnqueueMany(b.ctx, []ordered.Event{{Key: "a", Seq: 1}, {Key: "a", Seq: 2}, {Key: "b", Seq: 1}})
	require.NoError(t, err)
	_, err = c.EnqueueMany(b.ctx, []ordered.Event{{Key: "c", Seq: 1}, {Key: "c", Seq: 2}, {Key: "c", Seq: 3}})
	require.ErrorIs(t, err, ordered.ErrBacklogFull)
	require.Equal(t, 3, b.countStatus(t, "queued"))
	_, err = c.EnqueueMany(b.ctx, []ordered.Event{{Key: "c", Seq: 1}, {Key: "c", Seq: 2}})
	require.NoError(t, err)
	_, err = c.Enqueue(b.ctx, ordered.Event{Key: "d", Seq: 1})
	require.ErrorIs(t, err, ordered.ErrBacklogFull)

	// Draining makes room again.
	j := b.claimOne(t, b.client)
	require.NoError(t, b.client.Complete(b.ctx, j))
	_, err = c.Enqueue(b.ctx, ordered.Event{Key: "d", Seq: 1})
	require.NoError(t, err)
}
