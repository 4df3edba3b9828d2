package schema

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNotMigrated occurs when the database lacks migrations that this binary has (none at all,
// or not the latest), or its functions are not this binary's. Migrate brings it up to date.
var ErrNotMigrated = errors.New("ordered: schema not migrated: run schema.Migrate or `ordered migrate`")

// ErrSchemaNewer occurs when the database has migrations that this binary does not know: a
// newer version of ordered migrated it, and this one may not speak its schema.
var ErrSchemaNewer = errors.New("ordered: schema is newer than this binary: upgrade ordered")

// Querier is what Check needs of a connection: pgx.Conn, pgx.Tx, pgxpool.Pool and pgxpool.Conn
// all have it.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

//go:embed queries/check.sql
var checkSQL string

// undefinedTable is PostgreSQL's SQLSTATE for a relation that does not exist.
const undefinedTable = "42P01"

// Check reports whether the queue that q's search_path finds is exactly what this binary embeds:
// nil if so; an error wrapping ErrNotMigrated if migrations are missing or function definitions
// are missing or differ from this binary's; one wrapping ErrSchemaNewer if the database has a
// migration this binary does not know; another error if the queue is not in the first schema
// of the search_path. It takes one round trip.
func Check(ctx context.Context, q Querier) error {
	_, err := CurrentSchema(ctx, q)
	return err
}

// CurrentSchema is Check that also returns the connection's current schema (the first on its
// search_path), in the same round trip: a worker needs both when it starts.
func CurrentSchema(ctx context.Context, q Querier) (string, error) {
	ms, err := Migrations()
	if err != nil {
		return "", err
	}
	fns, err := Functions()
	if err != nil {
		return "", err
	}
	var current, found string
	var applied []int
	var names, sums []string
	err = q.QueryRow(ctx, checkSQL).Scan(&current, &applied, &found, &names, &sums)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == undefinedTable:
		return "", fmt.Errorf("%w (the search_path finds no ordered_migrations or ordered_functions table)", ErrNotMigrated)
	case err != nil:
		return "", fmt.Errorf("ordered: check schema: %w", err)
	case found != current:
		// The queue's statements are unqualified: a queue created in the first schema later
		// would take this one's place under a running worker.
		return current, fmt.Errorf("ordered: the search_path finds the queue in schema %q, past its first schema %q: put %q first in the search_path", found, current, found)
	}
	if err := compareVersions(ms, applied); err != nil {
		return current, err
	}
	return current, compareFunctions(fns, names, sums)
}

// compareVersions checks the applied versions against the embedded migrations ms.
func compareVersions(ms []Migration, applied []int) error {
	known := make([]int, len(ms))
	for i, m := range ms {
		known[i] = m.Version
	}
	var unknown, missing []int
	for _, v := range applied {
		if !slices.Contains(known, v) {
			unknown = append(unknown, v)
		}
	}
	for _, v := range known {
		if !slices.Contains(applied, v) {
			missing = append(missing, v)
		}
	}
	latest := 0
	if len(known) > 0 {
		latest = known[len(known)-1]
	}
	switch {
	case len(unknown) > 0:
		return fmt.Errorf("%w (the database has migrations %v; this binary knows up to %d)", ErrSchemaNewer, unknown, latest)
	case len(missing) > 0:
		return fmt.Errorf("%w (migrations %v of %d not applied)", ErrNotMigrated, missing, latest)
	}
	return nil
}

// compareFunctions checks the recorded function checksums (names[i], sums[i]) against the
// embedded function files.
func compareFunctions(fns []Function, names, sums []string) error {
	recorded := make(map[string]string, len(names))
	for i, n := range names {
		recorded[n] = sums[i]
	}
	var stale []string
	for _, f := range fns {
		if recorded[f.Name] != f.Checksum {
			stale = append(stale, f.Name)
		}
	}
	if len(stale) > 0 {
		return fmt.Errorf("%w (functions %s are missing or differ from this binary's)", ErrNotMigrated, strings.Join(stale, ", "))
	}
	return nil
}
