package faultproxy_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/faultproxy"
	"github.com/orderedq/ordered/internal/testdb"
)

// echoServer echoes every connection until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { _ = l.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return l.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	_, err := c.Write([]byte(msg))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	got := make([]byte, len(msg))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err)
	require.Equal(t, msg, string(got))
}

// requireSilent checks that nothing arrives on c, and that c is not closed, for a while.
func requireSilent(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	n, err := c.Read(make([]byte, 1))
	require.Zero(t, n, "data passed the blackhole")
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "the connection did not stay open")
}

// A blackholed proxy forwards nothing either way and closes nothing, for connections it held
// and ones it accepts meanwhile; healed, it delivers what it held and forwards again.
func TestBlackholeHoldsTrafficUntilHeal(t *testing.T) {
	p, err := faultproxy.New(echoServer(t))
	require.NoError(t, err)
	defer p.Close()

	before, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer before.Close()
	roundTrip(t, before, "hello")

	p.Blackhole()
	_, err = before.Write([]byte("held"))
	require.NoError(t, err)
	requireSilent(t, before)
	during, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer during.Close()
	_, err = during.Write([]byte("late"))
	require.NoError(t, err)
	requireSilent(t, during)

	p.Heal()
	require.NoError(t, before.SetReadDeadline(time.Now().Add(10*time.Second)))
	got := make([]byte, 4)
	_, err = io.ReadFull(before, got)
	require.NoError(t, err)
	require.Equal(t, "held", string(got))
	require.NoError(t, during.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = io.ReadFull(during, got)
	require.NoError(t, err)
	require.Equal(t, "late", string(got))
	roundTrip(t, before, "again")
}

// Close ends every connection.
func TestCloseEndsConnections(t *testing.T) {
	p, err := faultproxy.New(echoServer(t))
	require.NoError(t, err)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	roundTrip(t, c, "x")
	p.Blackhole()
	require.NoError(t, p.Close())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.True(t, errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || isReset(err), "got %v", err)
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

// postgresProxy is a proxy in front of the test database, closed when the test ends, and a
// configuration that connects through it.
func postgresProxy(t *testing.T) (*faultproxy.Proxy, *pgx.ConnConfig) {
	t.Helper()
	cfg, err := pgx.ParseConfig(testdb.DatabaseURL())
	require.NoError(t, err)
	p, err := faultproxy.New(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	host, port, err := net.SplitHostPort(p.Addr())
	require.NoError(t, err)
	n, err := strconv.ParseUint(port, 10, 16)
	require.NoError(t, err)
	cfg.Host, cfg.Port = host, uint16(n)
	return p, cfg
}

// In front of PostgreSQL, the next n sessions are refused as a server that is starting up
// refuses them, with the SQLSTATE given; the one after reaches the server.
func TestRefuseNextRefusesSessionsWithTheCodeGiven(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := postgresProxy(t)

	p.RefuseNext(2, "57P03", "the database system is starting up")
	for range 2 {
		_, err := pgx.ConnectConfig(ctx, cfg)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "57P03", pgErr.Code)
		require.Equal(t, "the database system is starting up", pgErr.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
}

// In front of PostgreSQL, the next session is reset as it starts, without an answer; the one
// after reaches the server. (One: pgx follows a failed connect with a cancel request, a
// connection of its own that a second cut could take.)
func TestCutNextResetsSessionsAsTheyStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, cfg := postgresProxy(t)

	p.CutNext(1)
	_, err := pgx.ConnectConfig(ctx, cfg)
	require.ErrorIs(t, err, syscall.ECONNRESET)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var one int
	require.NoError(t, conn.QueryRow(ctx, "SELECT 1").Scan(&one))
}
