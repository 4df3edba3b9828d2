package ordered_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// requireSerializationFailure asserts err is PostgreSQL's 40001.
func requireSerializationFailure(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "want a serialization failure, got %v", err)
	require.Equal(t, "40001", pgErr.Code)
}

// An EnqueueTx in a REPEATABLE READ or SERIALIZABLE transaction whose snapshot predates a
// change of the key's head fails with a serialization error; retried, it leaves the key
// claimable. It never computes heads from the stale snapshot (which would strand the key).
func TestEnqueueTxRepeatableReadAfterCompletion(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.enqueue(t, "k", 10)
			running := b.claimOne(t, b.client)

			tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
			require.NoError(t, err)
			defer tx.Rollback(b.ctx)                                  //nolint:errcheck
			_, err = tx.Exec(b.ctx, `SELECT 1 FROM ordered_jobs_now`) // takes the snapshot
			require.NoError(t, err)

			require.NoError(t, b.client.Complete(b.ctx, running)) // k/10 done after the snapshot
			_, err = b.client.EnqueueTx(b.ctx, tx, ordered.Event{Key: "k", Seq: 20})
			requireSerializationFailure(t, err)
			require.NoError(t, tx.Rollback(b.ctx))

			tx, err = b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
			require.NoError(t, err)
			_, err = b.client.EnqueueTx(b.ctx, tx, ordered.Event{Key: "k", Seq: 20})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(b.ctx))
			require.Equal(t, int64(20), b.claimOne(t, b.client).Seq)
		})
	}
}

// With k/10 completed and k/20 claimed after a REPEATABLE READ snapshot, an enqueue of k/15
// from that snapshot must not be accepted (it would run after k/20, or strand the key).
func TestEnqueueTxRepeatableReadMissesStartedLaterJob(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.enqueue(t, "k", 10, 20)
	first := b.claimOne(t, b.client)

	tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	_, err = tx.Exec(b.ctx, `SELECT 1 FROM ordered_jobs_now`)
	require.NoError(t, err)

	require.NoError(t, b.client.Complete(b.ctx, first))
	require.Equal(t, int64(20), b.claimOne(t, b.client).Seq)
	_, err = b.client.EnqueueTx(b.ctx, tx, ordered.Event{Key: "k", Seq: 15})
	requireSerializationFailure(t, err)
	require.NoError(t, tx.Rollback(b.ctx))

	_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 15})
	require.ErrorIs(t, err, ordered.ErrLateEvent)
}

// A replay moves its key's head. A CompleteTx or EnqueueTx in a REPEATABLE READ or
// SERIALIZABLE transaction whose snapshot predates the replay fails with a serialization
// error, rather than compute heads from the snapshot, where the replayed job is still failed
// (the completion would leave the key with no claimable head, the enqueue would make its new
// job the key's head above the replayed one).
func TestRepeatableReadAfterReplay(t *testing.T) {
	t.Parallel()
	for _, iso := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		// k/5 running again after a forced replay, k/7 failed (skip policy), k/9 queued.
		setupKey := func(t *testing.T) (*testBundle, *ordered.Job, int64) {
			t.Helper()
			b := setup(t, &ordered.Config{Policy: policy.Always(policy.Skip)})
			ids := b.enqueue(t, "k", 5, 7, 9)
			for range 2 {
				_, err := b.client.Fail(b.ctx, b.claimOne(t, b.client), ordered.Permanent(errors.New("boom")))
				require.NoError(t, err)
			}
			require.NoError(t, b.client.Replay(b.ctx, ids[0], ordered.ReplayParams{Force: true}))
			running := b.claimOne(t, b.client)
			require.Equal(t, int64(5), running.Seq)
			return b, running, ids[1]
		}
		snapshotThenReplay := func(t *testing.T, b *testBundle, id int64) pgx.Tx {
			t.Helper()
			tx, err := b.pool.BeginTx(b.ctx, pgx.TxOptions{IsoLevel: iso})
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			_, err = tx.Exec(b.ctx, `SELECT 1 FROM ordered_jobs_now`) // takes the snapshot
			require.NoError(t, err)
			require.NoError(t, b.client.Replay(b.ctx, id, ordered.ReplayParams{}))
			return tx
		}
		t.Run("CompleteTx "+string(iso), func(t *testing.T) {
			t.Parallel()
			b, running, k7 := setupKey(t)
			tx := snapshotThenReplay(t, b, k7)
			requireSerializationFailure(t, b.client.CompleteTx(b.ctx, tx, running))
			require.NoError(t, tx.Rollback(b.ctx))

			require.NoError(t, b.client.Complete(b.ctx, running))
			require.Equal(t, int64(7), b.claimOne(t, b.client).Seq, "the replayed job is the key's next")
		})
		t.Run("EnqueueTx "+string(iso), func(t *testing.T) {
			t.Parallel()
			// The key's only job failed (skip): the snapshot sees no head to lock.
			b := setup(t, &ordered.Config{Policy: policy.Always(policy.Skip)})
			k1 := b.enqueue(t, "k", 1)[0]
			_, err := b.client.Fail(b.ctx, b.claimOne(t, b.client), ordered.Permanent(errors.New("boom")))
			require.NoError(t, err)
			tx := snapshotThenReplay(t, b, k1)
			_, err = b.client.EnqueueTx(b.ctx, tx, ordered.Event{Key: "k", Seq: 5})
			requireSerializationFailure(t, err)
			require.NoError(t, tx.Rollback(b.ctx))

			_, err = b.client.Enqueue(b.ctx, ordered.Event{Key: "k", Seq: 5})
			require.NoError(t, err)
			var heads int
			require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT count(*) FROM ordered_jobs_now WHERE key = 'k' AND head`).Scan(&heads))
			require.Equal(t, 1, heads)
			require.Equal(t, int64(1), b.claimOne(t, b.client).Seq)
		})
	}
}

// Archival passes key rows another transaction holds (FOR NO KEY UPDATE SKIP LOCKED, in key
// order): an enqueue transaction that holds one key and then takes another neither waits for
// nor deadlocks with an archiver, and the key passed is archived once it is free.
func TestArchiveAndEnqueueDoNotDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const keys = 50
	for k := keys; k >= 1; k-- { // key rows created in reverse order of their names
		b.enqueue(t, fmt.Sprintf("k%03d", k), 1)
	}
	for range keys {
		require.NoError(t, b.client.Complete(b.ctx, b.claimOne(t, b.client)))
	}

	tx, err := b.pool.Begin(b.ctx)
	require.NoError(t, err)
	defer tx.Rollback(b.ctx) //nolint:errcheck
	_, err = b.client.EnqueueTx(b.ctx, tx, ordered.Event{Key: "k001", Seq: 2})
	require.NoError(t, err)

	// The archiver never waits for a key an enqueue holds: it passes it, and archives the rest.
	n, err := b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, keys-1, n, "every done job but the held key's")

	_, err = b.client.EnqueueTx(b.ctx, tx, ordered.Event{Key: fmt.Sprintf("k%03d", keys), Seq: 2})
	require.NoError(t, err, "the enqueue waited for or deadlocked with the archiver")
	require.NoError(t, tx.Commit(b.ctx))
	n, err = b.client.Archive(b.ctx, ordered.ArchiveParams{Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, 1, n, "the key passed is archived once it is free")
	require.Equal(t, 0, b.countStatus(t, "done"))
}

// A worker whose lease renewals keep failing (the database unreachable, say) cancels the
// handler once the lease has run out by its own clock: another worker may own the job by then.
func TestWorkerCancelsHandlerWhenLeaseRunsOutUnrenewed(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := b.pool.Exec(b.ctx, `
		CREATE FUNCTION renewals_down() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		    IF OLD.state = 'running' AND NEW.state = 'running' AND NEW.lease_until > OLD.lease_until
		       AND NEW.claim_version = OLD.claim_version THEN
		        RAISE EXCEPTION 'renewals are down';
		    END IF;
		    RETURN NEW;
		END $$;
		CREATE TRIGGER renewals_down BEFORE UPDATE ON ordered_heads FOR EACH ROW EXECUTE FUNCTION renewals_down()`)
	require.NoError(t, err)
	c := b.newClient(t, &ordered.Config{Lease: 900 * time.Millisecond})
	b.enqueue(t, "k", 1)
	started := make(chan time.Time, 1)
	cause := make(chan error, 1)
	startWorker(t, b, c, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		started <- time.Now()
		select {
		case <-ctx.Done():
			cause <- context.Cause(ctx)
		case <-time.After(20 * time.Second):
			cause <- errors.New("never cancelled")
		}
		return nil
	}), &ordered.WorkerConfig{PollInterval: time.Hour})
	at := <-started
	require.ErrorIs(t, <-cause, ordered.ErrLeaseLost)
	require.Less(t, time.Since(at), 3*time.Second, "cancelled long after the lease ran out")
}
