package pgcluster_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/netns"
	"github.com/orderedq/ordered/internal/pgcluster"
)

// queryPID connects to url and returns the backend's pid: a live server answered.
func queryPID(ctx context.Context, t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	return pid
}

// The whole life of a cluster. Without the server binaries Start fails, and so does this test:
// it never skips.
func TestClusterStartRestartStopClose(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	dir := c.Dir()
	require.DirExists(t, filepath.Join(dir, "data"))
	require.FileExists(t, c.LogFile())
	require.Positive(t, c.Port())
	require.Contains(t, c.URL(), "127.0.0.1:")

	conn, err := pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	var before int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&before))
	var fsync string
	require.NoError(t, conn.QueryRow(ctx, `SHOW fsync`).Scan(&fsync))
	require.Equal(t, "off", fsync)
	_, err = conn.Exec(ctx, `CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)`)
	require.NoError(t, err)

	port := c.Port()
	require.NoError(t, c.Restart(ctx))
	require.Equal(t, port, c.Port())
	// The restart cut the old session; a new one works at once, and the data is still there.
	require.Error(t, conn.Ping(ctx))
	require.NoError(t, conn.Close(ctx))
	require.NotZero(t, queryPID(ctx, t, c.URL()))
	conn, err = pgx.Connect(ctx, c.URL())
	require.NoError(t, err)
	var v int
	require.NoError(t, conn.QueryRow(ctx, `SELECT v FROM kept`).Scan(&v))
	require.Equal(t, 42, v)
	require.NoError(t, conn.Close(ctx))

	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Stop(ctx), "stopping a stopped server does nothing")
	_, err = pgx.Connect(ctx, c.URL())
	require.Error(t, err, "the server still answers after Stop")
	require.NoError(t, c.Restart(ctx), "Restart starts a stopped server")
	require.NotZero(t, queryPID(ctx, t, c.URL()))

	require.NoError(t, c.Close())
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "Close left the cluster's directory behind")
	_, err = pgx.Connect(ctx, c.URL())
	require.Error(t, err, "the server still answers after Close")
	require.NoError(t, c.Close(), "Close is idempotent")
	require.Error(t, c.Restart(ctx))
}

// Two clusters run side by side, each on its own port.
func TestClusterTwoAtOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := pgcluster.Start(ctx, pgcluster.Options{MaxConnections: 20})
	require.NoError(t, err)
	defer func() { require.NoError(t, a.Close()) }()
	b, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	require.NotEqual(t, a.Port(), b.Port())
	queryPID(ctx, t, a.URL())
	queryPID(ctx, t, b.URL())

	conn, err := pgx.Connect(ctx, a.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var maxConns string
	require.NoError(t, conn.QueryRow(ctx, `SHOW max_connections`).Scan(&maxConns))
	require.Equal(t, "20", maxConns)
}

// A BinDir without the server binaries is a clear error, and leaves nothing behind.
func TestClusterMissingBinaries(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	_, err := pgcluster.Start(context.Background(), pgcluster.Options{BinDir: empty})
	require.ErrorContains(t, err, "initdb")
	require.ErrorContains(t, err, empty)
}

// A synchronous standby has every commit the primary acknowledged; killed, the primary is
// gone at once; promoted, the standby takes writes on its own port, where a multi-host URL
// finds it, and holds the acknowledged commit (a synchronous commit waits for the standby's
// flush, not its replay, so it is asked for only once the promotion has replayed it all).
// Closing both leaves nothing behind.
func TestStandbySynchronousPromoteAfterKill(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Close() })
	standby, err := primary.StartStandby(ctx, pgcluster.StandbyOptions{Synchronous: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Close() })
	require.NotEqual(t, primary.Port(), standby.Port())
	require.Error(t, primary.Promote(ctx), "a primary is promoted")

	conn, err := pgx.Connect(ctx, primary.URL())
	require.NoError(t, err)
	var syncState string
	require.NoError(t, conn.QueryRow(ctx,
		`SELECT sync_state FROM pg_stat_replication WHERE application_name = $1`,
		pgcluster.StandbyNameDefault).Scan(&syncState))
	require.Equal(t, "sync", syncState)
	_, err = conn.Exec(ctx, `CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)`)
	require.NoError(t, err)

	// The standby answers reads and refuses writes; the multi-host URL skips it.
	sconn, err := pgx.Connect(ctx, standby.URL())
	require.NoError(t, err)
	var inRecovery bool
	require.NoError(t, sconn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery))
	require.True(t, inRecovery)
	_, err = sconn.Exec(ctx, `CREATE TABLE refused (v int)`)
	require.ErrorContains(t, err, "25006")
	require.NoError(t, sconn.Close(ctx))
	both := pgcluster.MultiHostURL(standby, primary)
	require.Contains(t, both, "target_session_attrs=read-write")
	require.Equal(t, primary.Port(), serverPort(ctx, t, both))

	require.NoError(t, primary.Kill())
	require.Error(t, conn.Ping(ctx), "a session of the killed server still answers")
	_, err = pgx.Connect(ctx, primary.URL())
	require.Error(t, err, "the killed server still accepts connections")
	require.NoError(t, standby.Promote(ctx))
	require.Equal(t, standby.Port(), serverPort(ctx, t, both))
	sconn, err = pgx.Connect(ctx, standby.URL())
	require.NoError(t, err)
	defer sconn.Close(ctx)
	var v int
	require.NoError(t, sconn.QueryRow(ctx, `SELECT v FROM kept`).Scan(&v), "the acknowledged commit is not on the promoted standby")
	require.Equal(t, 42, v)
	_, err = sconn.Exec(ctx, `INSERT INTO kept VALUES (43)`)
	require.NoError(t, err, "the promoted standby refuses writes")
	require.Error(t, standby.Promote(ctx), "a promoted standby is promoted again")

	dirs := []string{primary.Dir(), standby.Dir()}
	require.NoError(t, primary.Close())
	require.NoError(t, standby.Close())
	for _, dir := range dirs {
		_, err = os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist, "Close left %s behind", dir)
	}
}

// An asynchronous standby streams without the primary waiting for it.
func TestStandbyAsynchronous(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := pgcluster.Start(ctx, pgcluster.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, primary.Close()) }()
	standby, err := primary.StartStandby(ctx, pgcluster.StandbyOptions{Name: "replica_1"})
	require.NoError(t, err)
	defer func() { require.NoError(t, standby.Close()) }()

	conn, err := pgx.Connect(ctx, primary.URL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var syncState, names string
	require.NoError(t, conn.QueryRow(ctx,
		`SELECT sync_state FROM pg_stat_replication WHERE application_name = 'replica_1'`).Scan(&syncState))
	require.Equal(t, "async", syncState)
	require.NoError(t, conn.QueryRow(ctx, `SHOW synchronous_standby_names`).Scan(&names))
	require.Empty(t, names)

	_, err = primary.StartStandby(ctx, pgcluster.StandbyOptions{Name: "Bad-Name"})
	require.ErrorContains(t, err, `"Bad-Name"`)
}

// serverPort connects to url and returns the port of the server it reached.
func serverPort(ctx context.Context, t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var port int
	require.NoError(t, conn.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&port))
	return port
}

// A cluster can listen on another address of this host too, and trust a network besides the
// local one: a connection to the link's address (from that address) is accepted, before and
// after a restart. Without the trusted network, pg_hba.conf refuses it.
func TestClusterListensOnMoreAddresses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n, err := netns.New(ctx, "pc")
	require.NoError(t, err, "a second address of this host comes from a network namespace's link")
	t.Cleanup(func() { require.NoError(t, n.Close()) })
	h, err := n.AddHost(ctx)
	require.NoError(t, err)

	c, err := pgcluster.Start(ctx, pgcluster.Options{
		ListenAddresses: []netip.Addr{h.Gateway}, TrustedNets: []netip.Prefix{h.Subnet}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.Positive(t, queryPID(ctx, t, c.URLAt(h.Gateway)))
	require.Positive(t, queryPID(ctx, t, c.URL()))
	require.NoError(t, c.Restart(ctx))
	require.Positive(t, queryPID(ctx, t, c.URLAt(h.Gateway)))

	untrusted, err := pgcluster.Start(ctx, pgcluster.Options{ListenAddresses: []netip.Addr{h.Gateway}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = untrusted.Close() })
	_, err = pgx.Connect(ctx, untrusted.URLAt(h.Gateway))
	require.ErrorContains(t, err, "no pg_hba.conf entry")
}
