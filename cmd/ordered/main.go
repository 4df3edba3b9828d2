// Command ordered operates an ordered queue: it migrates the schema. The rest of the CLI
// contract (enqueue, work, status, failed, replay, skip, archive, demo, bench, verify) is not
// built yet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/schema"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ordered:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: ordered migrate [--database-url URL]")
	}
	switch args[0] {
	case "migrate":
		fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
		url := fs.String("database-url", os.Getenv("DATABASE_URL"), "libpq URL (default $DATABASE_URL, then libpq defaults)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		conn, err := pgx.Connect(ctx, *url)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		versions, err := schema.Migrate(ctx, conn)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "migrated: %d migration(s) applied %v\n", len(versions), versions)
		return nil
	default:
		return fmt.Errorf("unknown command %q", args[0])
	}
}
