package harness

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/internal/pgcluster"
)

// LocalURL is the server tried when no database URL is given; ORDERED_LOCAL_URL replaces it
// (tests point it at a closed port).
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// localProbeTimeout bounds the attempt to reach LocalURL.
const localProbeTimeout = 3 * time.Second

// Database is the database of a run.
type Database struct {
	// URL connects to it.
	URL string
	// Private is true for a throwaway cluster that the run started: Close removes it, with
	// everything in it.
	Private bool
	close   func() error
}

// Close removes a private cluster; a server the run was given or found is left as it is.
func (d *Database) Close() {
	if d.close != nil {
		_ = d.close()
	}
}

// OpenDatabase picks the database of a run: url when it is not empty, else the server at
// LocalURL, else a private PostgreSQL cluster. It says on log which of the last two it took.
func OpenDatabase(ctx context.Context, url string, log io.Writer) (*Database, error) {
	if url != "" {
		return &Database{URL: url}, nil
	}
	local := cmp.Or(os.Getenv("ORDERED_LOCAL_URL"), LocalURL)
	probe, cancel := context.WithTimeout(ctx, localProbeTimeout)
	defer cancel()
	if conn, err := pgx.Connect(probe, local); err == nil {
		conn.Close(ctx)
		fmt.Fprintln(log, "using the PostgreSQL server on 127.0.0.1:5432")
		return &Database{URL: local}, nil
	}
	fmt.Fprintln(log, "no DATABASE_URL and no server on 127.0.0.1:5432: starting a private PostgreSQL cluster")
	cluster, err := pgcluster.Start(ctx, pgcluster.Options{})
	if err != nil {
		return nil, fmt.Errorf("start a private PostgreSQL: %w", err)
	}
	return &Database{URL: cluster.URL(), Private: true, close: cluster.Close}, nil
}
