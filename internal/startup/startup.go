// Package startup retries what a process does with the database as it starts (connecting,
// checking the schema) while the server is unavailable for a moment: restarting, shutting
// down, or ending sessions. A worker that starts then waits a little instead of exiting.
package startup

import (
	"context"
	"errors"
	"io"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Tries bounds the tries of Retry; the waits between them add up to about 3 s.
const Tries = 6

// firstWait is the wait after the first try; each later one doubles it.
const firstWait = 100 * time.Millisecond

// Retry runs f until it succeeds, fails otherwise than by the server's unavailability (see
// Unavailable), Tries are spent, or ctx ends; it returns f's last error.
func Retry(ctx context.Context, f func() error) error {
	wait := firstWait
	for try := 1; ; try++ {
		err := f()
		if err == nil || !Unavailable(err) || try == Tries {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// Unavailable reports whether err is the server ending or refusing a session for a while:
// SQLSTATE 57P01 (terminated by an administrator: a restart, pg_terminate_backend), 57P02
// (a crash of another backend), 57P03 (starting up or shutting down) or 57P05 (idle session
// timeout), or a session cut without a word (reset, or closed, by the server or the network:
// how a session ended while it connects can end). A new session may well succeed. A refused
// connection is not one: nothing listens at that address.
func Unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "57P05":
			return true
		}
		return false
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNABORTED) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
