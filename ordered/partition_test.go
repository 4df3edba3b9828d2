package ordered_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/faultproxy"
	"github.com/orderedq/ordered/ordered"
)

// partitionedPool is a pool on the test's queue whose connections go through a fault proxy,
// to cut it off from the database as a partition would. The proxy heals when the test ends,
// before the workers started earlier are stopped.
func (b *testBundle) partitionedPool(t *testing.T) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(b.queue.URL)
	require.NoError(t, err)
	if strings.HasPrefix(cfg.ConnConfig.Host, "/") {
		t.Fatalf("the fault proxy forwards TCP; DATABASE_URL names a socket: %s", cfg.ConnConfig.Host)
	}
	proxy, err := faultproxy.New(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, proxy.Close()) })
	host, port, err := net.SplitHostPort(proxy.Addr())
	require.NoError(t, err)
	p, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	pool, err := pgxpool.NewWithConfig(b.ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, proxy
}

// A worker cut off from the database (its connections blackholed: no answer, no error, no
// close) cancels its handler by its own clock while the database still holds the lease, so
// the handler has stopped before another worker can claim the job, though it never hears
// that its claim is lost. Once the lease has expired another client takes the job; when the
// partition heals, the first worker leaves the lost claim alone and goes on working.
func TestWorkerFencesItselfWhenCutOff(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	pool, proxy := b.partitionedPool(t)
	// Lease 3s, heartbeats every second, StopGrace 1.2s: the handler is cancelled 1.5s after
	// the last renewal that succeeded, 1.5s before the database's lease can expire.
	const lease = 3 * time.Second
	c, err := ordered.NewClient(pool, &ordered.Config{Lease: lease})
	require.NoError(t, err)
	id := b.enqueue(t, "k", 1)[0]

	type cancellation struct {
		leaseHeld bool
		err       error
		cause     error
	}
	running := make(chan struct{})
	cancelled := make(chan cancellation, 1)
	var runs atomic.Int64
	reg := prometheus.NewRegistry()
	w := startWorker(t, b, c, ordered.HandlerFunc(func(ctx context.Context, j *ordered.Job) error {
		if j.Key != "k" {
			return nil
		}
		runs.Add(1)
		close(running)
		<-ctx.Done()
		var held bool
		err := b.pool.QueryRow(b.ctx, `SELECT clock_timestamp() < lease_until FROM ordered_jobs_now WHERE id = $1`, j.ID).Scan(&held)
		cancelled <- cancellation{leaseHeld: held, err: err, cause: context.Cause(ctx)}
		return ctx.Err()
	}), &ordered.WorkerConfig{PollInterval: 100 * time.Millisecond, StopGrace: 1200 * time.Millisecond, Registerer: reg})
	t.Cleanup(proxy.Heal) // before the worker stops, should the test end early
	select {
	case <-running:
	case <-time.After(30 * time.Second):
		t.Fatal("k/1 never ran")
	}

	proxy.Blackhole()
	select {
	case r := <-cancelled:
		require.NoError(t, r.err)
		require.ErrorIs(t, r.cause, ordered.ErrLeaseLost)
		require.True(t, r.leaseHeld, "the handler was cancelled only after the database's lease had run out")
	case <-time.After(30 * time.Second):
		t.Fatal("the handler of the cut-off worker was never cancelled")
	}

	other := b.newClient(t, &ordered.Config{Lease: time.Minute})
	var taken *ordered.Job
	waitFor(t, 30*time.Second, "another client claims k/1 once its lease expired", func() bool {
		jobs, err := other.Claim(b.ctx, 1)
		require.NoError(t, err)
		if len(jobs) == 1 {
			taken = jobs[0]
		}
		return taken != nil
	})
	require.Equal(t, id, taken.ID)
	require.Equal(t, 2, taken.Attempt)

	proxy.Heal()
	next := b.enqueue(t, "next", 1)[0]
	waitFor(t, 30*time.Second, "the healed worker runs a new job", func() bool { return b.jobStatus(t, next) == "done" })
	waitFor(t, 10*time.Second, "the lost claim counted", func() bool {
		return metricValue(t, reg, "ordered_lost_ownership_total") == 1
	})
	require.NoError(t, w.Stop(b.ctx)) // every job of the first worker settled, or given up
	var status string
	var version int64
	require.NoError(t, b.pool.QueryRow(b.ctx, `SELECT status, claim_version FROM ordered_jobs_now WHERE id = $1`, id).Scan(&status, &version))
	require.Equal(t, "running", status, "the first worker settled its lost claim")
	require.Equal(t, taken.ClaimVersion, version)
	require.NoError(t, other.Complete(b.ctx, taken), "the job's outcome is the second client's")
	require.Equal(t, int64(1), runs.Load(), "the first worker ran k/1 again")
}
