package startup

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
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
