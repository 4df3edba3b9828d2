package startup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/faultproxy"
	"github.com/orderedq/ordered/internal/testdb"
)

// Only the server's unavailability is tried again; any other error ends Retry at once.
func TestRetryTriesAgainOnlyWhileTheServerIsUnavailable(t *testing.T) {
	t.Parallel()
	starting := fmt.Errorf("connect: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P03"})
	calls := 0
	require.NoError(t, Retry(context.Background(), func() error {
		if calls++; calls < 3 {
			return starting
		}
		return nil
	}))
	require.Equal(t, 3, calls)

	refused := &pgconn.PgError{Severity: "FATAL", Code: "28P01"} // password authentication failed
	calls = 0
	require.ErrorIs(t, Retry(context.Background(), func() error { calls++; return refused }), refused)
	require.Equal(t, 1, calls)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls = 0
	require.ErrorIs(t, Retry(ctx, func() error { calls++; return starting }), starting)
	require.Equal(t, 1, calls, "an ended context stops the tries")
	require.False(t, Unavailable(errors.New("dial tcp: connection refused")))
}

// A session cut as it starts (reset without an answer, as pg_terminate_backend or a fast
// shutdown can end one that is connecting) is tried again, and the next one gets through. A
// connection refused is not: nothing listens there.
func TestRetryTriesAgainWhenASessionIsCutAsItStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(testdb.DatabaseURL())
	require.NoError(t, err)
	proxy, err := faultproxy.New(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	require.NoError(t, err)
	defer proxy.Close()
	connect := func(addr string) error {
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		n, err := strconv.ParseUint(port, 10, 16)
		require.NoError(t, err)
		c := cfg.Copy()
		c.Host, c.Port = host, uint16(n)
		c.TLSConfig, c.Fallbacks = nil, nil // one session per connect
		conn, err := pgx.ConnectConfig(ctx, c)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	}

	// One cut: pgx follows a failed connect with a cancel request, a session of its own.
	proxy.CutNext(1)
	calls := 0
	require.NoError(t, Retry(ctx, func() error { calls++; return connect(proxy.Addr()) }))
	require.Equal(t, 2, calls)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())
	calls = 0
	require.ErrorIs(t, Retry(ctx, func() error { calls++; return connect(closed) }), syscall.ECONNREFUSED)
	require.Equal(t, 1, calls, "a refused connection fails at once")
}
