package ordered_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/internal/store"
)

// Benchmarks of the hot paths, for comparing changes with benchstat. Speed is measured here and
// by `ordered bench`, never asserted by a test.

func benchEvents(n, keys int, offset int64) []ordered.Event {
	evs := make([]ordered.Event, n)
	for i := range evs {
		evs[i] = ordered.Event{Key: fmt.Sprintf("key-%05d", i%keys), Seq: offset + int64(i/keys),
			Kind: "bench", Payload: json.RawMessage(`{"amount_cents":1234,"currency":"EUR"}`)}
	}
	return evs
}

// BenchmarkEnqueueMany10k enqueues batches of 10,000 events over 1,000 keys.
func BenchmarkEnqueueMany10k(b *testing.B) {
	bb := setup(b, nil)
	b.ResetTimer()
	for i := range b.N {
		_, err := bb.client.EnqueueMany(bb.ctx, benchEvents(10_000, 1_000, int64(i)*10))
		require.NoError(b, err)
	}
	b.ReportMetric(float64(b.N*10_000)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkEnqueueOne enqueues one event per transaction.
func BenchmarkEnqueueOne(b *testing.B) {
	bb := setup(b, nil)
	b.ResetTimer()
	for i := range b.N {
		_, err := bb.client.Enqueue(bb.ctx, ordered.Event{Key: fmt.Sprintf("k%d", i%100), Seq: int64(i)})
		require.NoError(b, err)
	}
}

// BenchmarkClaimComplete claims and completes one job at a time over many keys.
func BenchmarkClaimComplete(b *testing.B) {
	bb := setup(b, nil)
	_, err := bb.client.EnqueueMany(bb.ctx, benchEvents(max(b.N, 1), 1_000, 0))
	require.NoError(b, err)
	b.ResetTimer()
	for range b.N {
		jobs, err := bb.client.Claim(bb.ctx, 1)
		require.NoError(b, err)
		require.Len(b, jobs, 1)
		require.NoError(b, bb.client.Complete(bb.ctx, jobs[0]))
	}
}

// BenchmarkClaimCompleteMany64 claims 64 jobs of distinct keys in one statement and completes
// them in one; b.N counts jobs.
func BenchmarkClaimCompleteMany64(b *testing.B) { benchClaimCompleteMany(b, 64) }

// BenchmarkClaimCompleteMany500 completes batches of 500, a worker's largest: the cost of a
// completion must stay linear in its batch.
func BenchmarkClaimCompleteMany500(b *testing.B) { benchClaimCompleteMany(b, 500) }

// benchClaimCompleteMany claims up to batch jobs of distinct keys (in claims of up to
// ordered.ClaimBatchMax) and completes them in one statement; b.N counts jobs.
func benchClaimCompleteMany(b *testing.B, batch int) {
	bb := setup(b, nil)
	_, err := bb.client.EnqueueMany(bb.ctx, benchEvents(max(b.N, batch), 1_000, 0))
	require.NoError(b, err)
	b.ResetTimer()
	for done := 0; done < b.N; {
		var jobs []*ordered.Job
		for want := min(batch, b.N-done); len(jobs) < want; {
			n := min(ordered.ClaimBatchMax, want-len(jobs))
			claimed, err := bb.client.Claim(bb.ctx, n)
			require.NoError(b, err)
			jobs = append(jobs, claimed...)
			if len(claimed) < n {
				break // every ready head is taken; their keys go on when these complete
			}
		}
		require.NotEmpty(b, jobs)
		lost, err := bb.client.CompleteMany(bb.ctx, jobs)
		require.NoError(b, err)
		require.Empty(b, lost)
		done += len(jobs)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkCompleteClaimNext300 is a worker's hot path on the ordered shape: batches of 300
// completions, each of which claims its key's next job in the same statement (300 keys, a
// backlog behind each); b.N counts jobs.
func BenchmarkCompleteClaimNext300(b *testing.B) {
	const keys = 300
	bb := setup(b, nil)
	perKey := (b.N+keys-1)/keys + 1 // the last batch still claims a next job
	for offset := 0; offset < perKey; offset += 100 {
		_, err := bb.client.EnqueueMany(bb.ctx, benchEvents(keys*min(100, perKey-offset), keys, int64(offset)))
		require.NoError(b, err)
	}
	_, err := bb.pool.Exec(bb.ctx, "ANALYZE ordered_jobs, ordered_keys")
	require.NoError(b, err)
	claimed, err := store.JobClaimMany(bb.ctx, bb.pool, keys, time.Hour)
	require.NoError(b, err)
	require.Len(b, claimed, keys)
	b.ResetTimer()
	for done := 0; done < b.N; {
		ids, versions := make([]int64, len(claimed)), make([]int64, len(claimed))
		for i, j := range claimed {
			ids[i], versions[i] = j.ID, j.ClaimVersion
		}
		completed, next, err := store.JobCompleteMany(bb.ctx, bb.pool, ids, versions, len(ids), time.Hour)
		require.NoError(b, err)
		require.Len(b, completed, len(ids))
		require.NotEmpty(b, next)
		done += len(completed)
		claimed = next
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkWorkerDrain64 is the whole worker path, handlers and the client included: a worker
// with 64 no-op handlers drains b.N jobs over 1,000 keys. Its
// allocations a job are the worker's and pgx's (testing counts every goroutine's).
func BenchmarkWorkerDrain64(b *testing.B) {
	bb := setup(b, nil)
	jobs, keys := b.N, min(b.N, 1_000)
	for offset := 0; offset < jobs; offset += 10 * keys {
		_, err := bb.client.EnqueueMany(bb.ctx, benchEvents(min(10*keys, jobs-offset), keys, int64(offset/keys)))
		require.NoError(b, err)
	}
	_, err := bb.pool.Exec(bb.ctx, "ANALYZE ordered_jobs, ordered_keys")
	require.NoError(b, err)
	var ran atomic.Int64
	drained := make(chan struct{})
	w, err := bb.client.NewWorker(ordered.HandlerFunc(func(context.Context, *ordered.Job) error {
		if ran.Add(1) == int64(jobs) {
			close(drained)
		}
		return nil
	}), &ordered.WorkerConfig{Workers: 64, PollInterval: time.Second})
	require.NoError(b, err)
	b.ReportAllocs()
	b.ResetTimer()
	require.NoError(b, w.Start(bb.ctx))
	<-drained
	b.StopTimer()
	require.NoError(b, w.Stop(bb.ctx))
	b.ReportMetric(float64(jobs)/b.Elapsed().Seconds(), "jobs/s")
}
