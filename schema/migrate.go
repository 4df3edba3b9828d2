package schema

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed migrations/*.sql functions/*.sql
var files embed.FS

//go:embed queries/migrator_tables.sql
var migratorTablesSQL string

// Migration is one embedded schema version: tables, indexes, types.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Function is one embedded SQL function definition, re-applied whenever its text changes.
type Function struct {
	// Name is the file's name without .sql: the function it defines.
	Name string
	SQL  string
	// Checksum identifies the text: the hex SHA-256 of SQL.
	Checksum string
}

// Applied reports what Migrate did.
type Applied struct {
	// Migrations are the versions applied, in order.
	Migrations []int
	// Functions are the function files applied (new or changed), by name.
	Functions []string
}

// Migrations returns the embedded migrations in version order.
func Migrations() ([]Migration, error) { return migrationsIn(files) }

// Functions returns the embedded function definitions in name order.
func Functions() ([]Function, error) { return functionsIn(files) }

func migrationsIn(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, "migrations")
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
		body, err := fs.ReadFile(fsys, path.Join("migrations", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("ordered: read migration %s: %w", e.Name(), err)
		}
		ms = append(ms, Migration{Version: version, Name: name, SQL: string(body)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

func functionsIn(fsys fs.FS) ([]Function, error) {
	entries, err := fs.ReadDir(fsys, "functions")
	if err != nil {
		return nil, fmt.Errorf("ordered: read functions: %w", err)
	}
	fns := make([]Function, 0, len(entries))
	for _, e := range entries {
		body, err := fs.ReadFile(fsys, path.Join("functions", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("ordered: read function %s: %w", e.Name(), err)
		}
		sum := sha256.Sum256(body)
		fns = append(fns, Function{
			Name: strings.TrimSuffix(e.Name(), ".sql"), SQL: string(body), Checksum: hex.EncodeToString(sum[:]),
		})
	}
	return fns, nil
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

	migrationsTableSQL = `CREATE TABLE ordered_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

	functionsTableSQL = `CREATE TABLE ordered_functions (
    name       text        PRIMARY KEY,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

	appliedVersionsSQL  = `SELECT version FROM ordered_migrations`
	recordVersionSQL    = `INSERT INTO ordered_migrations (version, name) VALUES ($1, $2)`
	appliedFunctionsSQL = `SELECT name, checksum FROM ordered_functions`
	recordFunctionSQL   = `INSERT INTO ordered_functions (name, checksum) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET checksum = excluded.checksum, applied_at = now()`
	forgetFunctionsSQL = `DELETE FROM ordered_functions WHERE name <> ALL ($1::text[])`

	// The functions that producers call from sessions of their own keep the search_path in
	// force when they are created (SET search_path FROM CURRENT): the queue's schema alone.
	pinSearchPathSQL = `SELECT set_config('search_path', quote_ident(current_schema()), true)`

	// A function may call one defined in a later file: the bodies are checked once all exist.
	bodiesUncheckedSQL = `SET LOCAL check_function_bodies = off`
	bodiesCheckedSQL   = `SET LOCAL check_function_bodies = on`
)

// Migrate applies every embedded migration not yet recorded, then every function file that is
// new or whose text changed since it was applied, all in one transaction, and reports what it
// applied (nothing when the schema is current). It holds an advisory lock while it works, so it
// is safe to run concurrently, and safe while workers run: they see the old definitions or the
// new ones, never a mix. On a current schema it writes nothing, so a role without the CREATE
// privilege may run it. A database that has migrations this binary does not know is an error
// wrapping ErrSchemaNewer.
func Migrate(ctx context.Context, conn Conn) (*Applied, error) {
	return migrate(ctx, conn, files)
}

// migrate is Migrate with the migrations and functions of fsys.
func migrate(ctx context.Context, conn Conn, fsys fs.FS) (*Applied, error) {
	ms, err := migrationsIn(fsys)
	if err != nil {
		return nil, err
	}
	fns, err := functionsIn(fsys)
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
	var migrationsSchema, functionsSchema, current, encoding string
	if err := tx.QueryRow(ctx, migratorTablesSQL).Scan(&migrationsSchema, &functionsSchema, &current, &encoding); err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	// Keys and payloads are Unicode: another encoding would refuse some valid events with its
	// own errors (SQLSTATE 22P05) or, as SQL_ASCII, store bytes it never checks.
	if encoding != "UTF8" {
		return nil, fmt.Errorf("ordered: migrate: the database's encoding is %s, and a queue needs UTF8: "+
			"keys and payloads are Unicode; create the database with ENCODING 'UTF8'", encoding)
	}
	// A queue that the search_path finds past its first schema cannot be migrated from here:
	// its new objects would be created in the first schema, apart from it.
	for _, found := range []string{migrationsSchema, functionsSchema} {
		if found != "" && found != current {
			return nil, fmt.Errorf("ordered: migrate: the search_path finds the queue in schema %q, "+
				"but its first schema is %q, where migrate would create the queue's objects: "+
				"put %q first in the search_path to migrate that queue, or leave it out to create one in %q",
				found, current, found, current)
		}
	}
	for _, t := range []struct {
		have bool
		sql  string
	}{{migrationsSchema != "", migrationsTableSQL}, {functionsSchema != "", functionsTableSQL}} {
		if t.have {
			continue
		}
		if _, err := tx.Exec(ctx, t.sql); err != nil {
			return nil, fmt.Errorf("ordered: migrate: %w", err)
		}
	}
	applied := &Applied{}
	if applied.Migrations, err = applyMigrations(ctx, tx, ms); err != nil {
		return nil, err
	}
	if applied.Functions, err = applyFunctions(ctx, tx, fns); err != nil {
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	return applied, nil
}

// applyMigrations applies the migrations not recorded yet, in version order.
func applyMigrations(ctx context.Context, tx pgx.Tx, ms []Migration) ([]int, error) {
	rows, err := tx.Query(ctx, appliedVersionsSQL)
	if err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	if err := compareVersions(ms, done); errors.Is(err, ErrSchemaNewer) {
		return nil, err
	}
	var versions []int
	for _, m := range ms {
		if slices.Contains(done, m.Version) {
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
	return versions, nil
}

// applyFunctions applies the function files whose checksums differ from the recorded ones:
// first with body checks off (a function may call one defined in a later file), then again
// with them on, so an error in a body fails the migration.
func applyFunctions(ctx context.Context, tx pgx.Tx, fns []Function) ([]string, error) {
	rows, err := tx.Query(ctx, appliedFunctionsSQL)
	if err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	recorded := map[string]string{}
	var name, sum string
	if _, err := pgx.ForEachRow(rows, []any{&name, &sum}, func() error {
		recorded[name] = sum
		return nil
	}); err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	var changed []Function
	names := make([]string, len(fns))
	gone := len(recorded)
	for i, f := range fns {
		names[i] = f.Name
		if sum, ok := recorded[f.Name]; ok {
			gone--
			if sum == f.Checksum {
				continue
			}
		}
		changed = append(changed, f)
	}
	if len(changed) == 0 && gone == 0 {
		return nil, nil
	}
	if _, err := tx.Exec(ctx, pinSearchPathSQL); err != nil {
		return nil, fmt.Errorf("ordered: migrate: %w", err)
	}
	for _, check := range []string{bodiesUncheckedSQL, bodiesCheckedSQL} {
		if _, err := tx.Exec(ctx, check); err != nil {
			return nil, fmt.Errorf("ordered: migrate: %w", err)
		}
		for _, f := range changed {
			if _, err := tx.Exec(ctx, f.SQL); err != nil {
				return nil, fmt.Errorf("ordered: function %s: %w", f.Name, err)
			}
		}
	}
	applied := make([]string, len(changed))
	for i, f := range changed {
		if _, err := tx.Exec(ctx, recordFunctionSQL, f.Name, f.Checksum); err != nil {
			return nil, fmt.Errorf("ordered: migrate: %w", err)
		}
		applied[i] = f.Name
	}
	if gone > 0 {
		if _, err := tx.Exec(ctx, forgetFunctionsSQL, names); err != nil {
			return nil, fmt.Errorf("ordered: migrate: %w", err)
		}
	}
	return applied, nil
}
