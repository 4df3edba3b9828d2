// Package cli is the ordered command line: its root command and the subcommands of the CLI
// contract (migrate, enqueue, work, status, failed, replay, skip, gaps, archive, demo, bench,
// verify), each writing to the writers Main is given. The hidden subcommands are the
// processes that other commands start: the guard of each --exec command and the worker
// processes of the demo and the chaos run.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"
)

// Main executes the command line args and returns the exit code; every failure is one line on
// stderr. SIGINT and SIGTERM cancel the context the commands run with.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	fmt.Fprintln(stderr, "ordered:", escapeUnprintable(oneLine(strings.TrimPrefix(err.Error(), "ordered: ")))+poolerHint(err))
	return 1
}

// poolerHint names the likely cause of an error that prepared statements meet behind a
// pooler in transaction mode, whose connections change under a session: a statement prepared
// on one server connection is there already (42P05), or missing (26000), on another.
func poolerHint(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P05" || pgErr.Code == "26000") {
		return " (behind a connection pooler in transaction mode? run with --pooler transaction)"
	}
	return ""
}

// exitCode is a command's exit status that is no failure of its own to report: the guard
// exits with its command's status.
type exitCode int

func (c exitCode) Error() string { return "exit status " + strconv.Itoa(int(c)) }

// oneLine is s on one line: each run of white space that holds a line break or a tab becomes
// one space, and s is trimmed. A run of spaces alone is kept: it may be inside a key that the
// line quotes.
func oneLine(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		j := i
		for j < len(s) && strings.IndexByte(" \t\n\r", s[j]) >= 0 {
			j++
		}
		switch run := s[i:j]; {
		case j == i:
			b.WriteByte(s[i])
			j++
		case strings.ContainsAny(run, "\t\n\r"):
			b.WriteByte(' ')
		default:
			b.WriteString(run)
		}
		i = j
	}
	return strings.TrimSpace(b.String())
}

// escapeUnprintable writes each character of s that is not printable (strconv.IsPrint: a
// control or format character) or not valid UTF-8 as its Go escape (\x1b, \u202e), so that an
// error line cannot move the terminal's cursor or forge output.
func escapeUnprintable(s string) string {
	if isPrintable(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !strconv.IsPrint(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// app holds what every subcommand shares.
type app struct {
	databaseURL string
	pooler      poolerFlag
	// schema, when set, is the search_path of every connection, set per session: the worker
	// processes of the demo and the chaos run work in their run's schema.
	schema string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

// url is the database URL the commands connect to: --database-url, else DATABASE_URL; empty
// means the libpq defaults.
func (a *app) url() string {
	if a.databaseURL != "" {
		return a.databaseURL
	}
	return os.Getenv("DATABASE_URL")
}

const rootLong = `ordered runs a per-key ordered event queue in PostgreSQL: the events of one key run one
at a time, in sequence order, while different keys run in parallel.

The database is --database-url, else DATABASE_URL, else the libpq defaults (PGHOST, ...).
A connection attempt gives up after %s unless the URL's connect_timeout (seconds; 0 waits
forever) or PGCONNECT_TIMEOUT sets another limit. The queue's commands need its schema
migrated to this version: run ordered migrate first.`

func newRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "ordered",
		Short:         "Per-key ordered event processing on PostgreSQL",
		Long:          fmt.Sprintf(rootLong, connectTimeoutDefault),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().StringVar(&a.databaseURL, "database-url", "",
		"libpq connection URL (default $DATABASE_URL, then the libpq defaults)")
	root.PersistentFlags().Var(&a.pooler, "pooler",
		"connection pooler in front of PostgreSQL; transaction: no prepared statements, work polls")
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(
		a.migrateCmd(),
		a.enqueueCmd(),
		a.workCmd(),
		a.statusCmd(),
		a.failedCmd(),
		a.replayCmd(),
		a.skipCmd(),
		a.gapsCmd(),
		a.archiveCmd(),
		a.uiCmd(),
		a.demoCmd(),
		a.demoWorkerCmd(),
		a.verifyCmd(),
		a.benchCmd(),
		a.verifyWorkerCmd(),
		a.execGuardCmd(),
	)
	return root
}
