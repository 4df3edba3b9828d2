package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one embedded schema version.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return nil, fmt.Errorf("ordered: read migrations: %w", err)
	}
	var ms []Migration
	for _, e := range entries {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("ordered: migration file %q is not named NNN_name.sql", e.Name())
		}
		body, err := migrationFS.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("ordered: read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, Migration{Version: version, Name: name, SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Conn is what the migrator needs of a connection: pgx.Conn, pgxpool.Pool and pgxpool.Conn
// all have it.
type Conn interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

const (
	// The advisory lock is scoped to the current schema, so queues in different schemas of one
	// database migrate independently.
	migrateLockSQL = `SELECT pg_advisory_xact_lock(hashtext('ordered.migrate.' || current_schema()))`

	// Whether the current schema has the migrations table: CREATE TABLE IF NOT EXISTS needs the
	// CREATE privilege even when the table exists, and a role without it may check for updates.
	migrationsTableExistsSQL = `SELECT EXISTS (SELECT FROM pg_catalog.pg_class c
    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = 'ordered_migrations' AND n.nspname = current_schema())`

	migrationsTableSQL = `CREATE TABLE ordered_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

	appliedVersionsSQL = `SELECT version FROM ordered_migrations`

	recordVersionSQL = `INSERT INTO ordered_migrations (version, name) VALUES ($1, $2)`
)

// Migrate applies every embedded migration not yet recorded, in one transaction, and returns
// the versions it applied (none when the schema is current). It is safe to run concurrently.
// On a current schema it creates nothing, so a role without the CREATE privilege may run it.
// A database that has migrations this binary does not know is an error wrapping
// ErrSchemaNewer.
func Migrate(ctx context.Context, conn Conn) ([]int, error) {
	return migrateTo(ctx, conn, math.MaxInt)
}

// migrateTo is Migrate stopped after version last: tests upgrade an older schema with it.
func migrateTo(ctx context.Context, conn Conn, last int) ([]int, error) {
	ms, err := Migrations()
	if err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit

	if _, err := tx.Exec(ctx, migrateLockSQL); err != nil {
		return nil, fmt.Errorf("ordered: migrate: lock: %w", err)
	}
	var exists bool
	if err := tx.QueryRow(ctx, migrationsTableExistsSQL).Scan(&exists); err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, migrationsTableSQL); err != nil {
			return nil, fmt.Errorf("ordered: migrate: %w", err)
		}
	}
	rows, err := tx.Query(ctx, appliedVersionsSQL)
	if err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	if err := compare(ms, applied); errors.Is(err, ErrSchemaNewer) {
		return nil, err
	}
	done := make(map[int]bool, len(applied))
	for _, v := range applied {
		done[v] = true
	}

	var versions []int
	for _, m := range ms {
		if done[m.Version] || m.Version > last {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return nil, fmt.Errorf("ordered: migration %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, recordVersionSQL, m.Version, m.Name); err != nil {
			return nil, fmt.Errorf("ordered: migrate: %w", err)
		}
		versions = append(versions, m.Version)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	return versions, nil
}
