package main

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/faultproxy"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// proxied returns q with its URL pointing at a fault proxy in front of its server.
func proxied(t *testing.T, q *orderedtest.Queue) (*orderedtest.Queue, *faultproxy.Proxy) {
	t.Helper()
	u, err := url.Parse(q.URL)
	require.NoError(t, err)
	p, err := faultproxy.New(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	u.Host = p.Addr()
	through := *q
	through.URL = u.String()
	return &through, p
}

// A worker cut off from the database (its connections blackholed, as by a partition) never
// hears that its claim is lost: by its own clock it ends its command's whole tree, SIGTERM and
// then SIGKILL after the grace, while the database still holds the lease, so no other worker
// can start the key's next job beside it. Healed, it never settles the lost claim and goes on
// by itself: the job runs again on its next attempt.
func TestWorkPartitionedWorkerEndsItsCommandBeforeTheLeaseExpires(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	through, proxy := proxied(t, q)
	r := newTreeRun(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	command := r.command(`if [ "$ORDERED_ATTEMPT" = 1 ]; then SCRIPT; else echo "$ORDERED_KEY/$ORDERED_SEQ#$ORDERED_ATTEMPT" >> "$ORDERED_TEST_DIR/again"; fi`)
	w := startCLIWorker(t, through, "--lease", "15s", "--kill-grace", "2s", "--exec", command)
	procs := r.waitTree(t, w, "1-1")

	proxy.Blackhole()
	requireTreeGone(t, w, procs, 30*time.Second, "the partitioned worker's command outlived its fence")
	var leased bool
	require.NoError(t, q.Pool.QueryRow(context.Background(),
		"SELECT status = 'running' AND lease_until > clock_timestamp() FROM ordered_jobs_now WHERE id = 1").Scan(&leased))
	require.True(t, leased, "the command must be gone while the database still holds its claim")
	requireTrapRan(t, r, "1-1")

	proxy.Heal()
	require.Eventually(t, func() bool { return strings.Contains(w.file("again"), "k/1#2") },
		60*time.Second, 50*time.Millisecond, "the healed worker did not run the job again; stderr:\n%s", w.stderr())
	require.Eventually(t, func() bool { return jobStatesAre(q.Pool, "k/1 done attempts=2") },
		30*time.Second, 50*time.Millisecond, "states %v", jobStates(t, q.Pool))
}

// A worker started while the server refuses sessions for a moment (starting up, SQLSTATE
// 57P03), or cuts one as it starts, does not exit: it asks again, starts once the server
// answers, and runs the queue's jobs. (A server that keeps refusing still ends it with a one-line error: see
// TestUnreachableDatabase for one that is not there at all.)
func TestWorkStartsOnceTheServerAnswers(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	through, proxy := proxied(t, q)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	proxy.RefuseNext(3, "57P03", "the database system is starting up")
	proxy.CutNext(1)
	drainThenStop(t, q, startCLIWorker(t, through, "--exec", "true"))
	require.Equal(t, []string{"k/1 done attempts=1"}, jobStates(t, q.Pool))
}
