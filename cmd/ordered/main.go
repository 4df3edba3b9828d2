// Command ordered operates an ordered queue from the shell: migrate the schema, enqueue JSON
// Lines, run workers that execute a command per job, inspect and repair failures, archive.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes the command line and returns the exit code; every failure is one line on
// stderr.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd(stdin, stdout, stderr)
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(stderr, "ordered:", escapeUnprintable(oneLine(strings.TrimPrefix(err.Error(), "ordered: "))))
		return 1
	}
	return 0
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
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
	stdin       io.Reader
	stdout      io.Writer
	stderr      io.Writer
}

func newRootCmd(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "ordered",
		Short: "Per-key ordered event processing on PostgreSQL",
		Long: `ordered runs a per-key ordered event queue in PostgreSQL: the events of one key run one
at a time, in sequence order, while different keys run in parallel.

The database is --database-url, else DATABASE_URL, else the libpq defaults (PGHOST, ...).
A connection attempt gives up after ` + connectTimeoutDefault.String() + ` unless the URL's connect_timeout (seconds; 0 waits
forever) or PGCONNECT_TIMEOUT sets another limit. The queue's commands need its schema
migrated to this version: run ordered migrate first.`,
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
