// Package testdb creates fresh migrated queues, each in a schema of its own, and empty
// databases, on a real PostgreSQL. It is the machinery of package orderedtest, kept apart so
// that the tests inside package ordered, which orderedtest imports, and schema's tests can use
// it too.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/invariant"
	"github.com/orderedq/ordered/schema"
)

// DefaultURL is used when DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// MaxConnsDefault is the size of the pool of a Queue.
const MaxConnsDefault = 16

// DatabaseURL returns DATABASE_URL, or DefaultURL when it is empty.
func DatabaseURL() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Queue is a migrated queue in a schema of its own.
type Queue struct {
	// Schema is the schema's name.
	Schema string
	// URL connects to the database with search_path set to Schema, for other processes.
	URL string
	// Pool is a pool on the schema.
	Pool *pgxpool.Pool
}

// New creates a fresh migrated queue for t and removes it when t ends, after checking that
// its rows keep the queue's invariants (package invariant): t fails on any broken one. When
// no database can be reached, t fails.
func New(t testing.TB) *Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	q, err := Create(ctx)
	if err != nil {
		t.Fatalf("orderedtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		switch broken, err := q.Violations(ctx); {
		case err != nil:
			t.Errorf("orderedtest: %v", err)
		case len(broken) > 0:
			t.Errorf("orderedtest: the queue's rows break its invariants: %s", strings.Join(broken, "; "))
		}
		if err := q.Drop(ctx); err != nil {
			t.Errorf("orderedtest: %v", err)
		}
	})
	return q
}

// Create creates a fresh migrated queue; Drop removes it. It serves where no testing.TB is at
// hand, as in a TestMain.
func Create(ctx context.Context) (*Queue, error) {
	base := DatabaseURL()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, fmt.Errorf("no PostgreSQL at %s (set DATABASE_URL or run `make test`): %w", redact(base), err)
	}
	defer admin.Close(ctx)

	name := "ordered_test_" + randomHex(6)
	// The name is generated here, never taken from input; identifiers cannot be parameters.
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create schema: %w", err)
	}
	q := &Queue{Schema: name, URL: withSearchPath(base, name)}
	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		return nil, withCleanup(err, q.Drop(ctx))
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		// Lets a test find its own sessions in pg_stat_activity among other tests'.
		cfg.ConnConfig.RuntimeParams["application_name"] = name
	}
	cfg.MaxConns = MaxConnsDefault
	if q.Pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, withCleanup(err, q.Drop(ctx))
	}
	if _, err := schema.Migrate(ctx, q.Pool); err != nil {
		return nil, withCleanup(err, q.Drop(ctx))
	}
	return q, nil
}

// Violations returns the invariants that the queue's rows break (see package invariant), on a
// connection of its own made as the pool's are: the test may have closed the pool.
func (q *Queue) Violations(ctx context.Context) ([]string, error) {
	conn, err := pgx.ConnectConfig(ctx, q.Pool.Config().ConnConfig)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	return invariant.Violations(ctx, conn)
}

// Drop closes the queue's pool and drops its schema.
func (q *Queue) Drop(ctx context.Context) error {
	if q.Pool != nil {
		q.Pool.Close()
	}
	conn, err := pgx.Connect(ctx, DatabaseURL())
	if err != nil {
		return fmt.Errorf("drop schema %s: %w", q.Schema, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{q.Schema}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("drop schema %s: %w", q.Schema, err)
	}
	return nil
}

// NewDatabase creates an empty database for t alone, dropped when t ends, and returns its URL.
// Its name starts with prefix; options follow the name in CREATE DATABASE and must be the
// caller's own constant (neither identifiers nor these options can be parameters).
func NewDatabase(t testing.TB, prefix, options string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := DatabaseURL()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("testdb: no PostgreSQL at %s: %v", redact(base), err)
	}
	defer admin.Close(ctx)
	dbname := prefix + "_" + randomHex(6)
	name := pgx.Identifier{dbname}.Sanitize()
	if _, err := admin.Exec(ctx, strings.TrimSpace("CREATE DATABASE "+name+" "+options)); err != nil {
		t.Fatalf("testdb: create database %s: %v", dbname, err)
	}
	t.Cleanup(func() {
		// No deadline of its own: DROP DATABASE waits for a checkpoint, which on a busy machine
		// with slow disks takes as long as it takes; the test binary's -timeout bounds it.
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("testdb: drop database %s: %v", dbname, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("testdb: drop database %s: %v", dbname, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	u.Path = "/" + dbname
	q := u.Query()
	q.Del("options") // a search_path of the base URL's would name a schema not there
	u.RawQuery = q.Encode()
	return u.String()
}

// withCleanup reports err, and a failed clean-up after it.
func withCleanup(err, cleanup error) error {
	if cleanup != nil {
		return fmt.Errorf("%w (and %v)", err, cleanup)
	}
	return err
}

// withSearchPath adds the libpq options parameter that selects schema to a URL.
func withSearchPath(base, schema string) string {
	u, err := url.Parse(base)
	if err != nil {
		return base
	}
	q := u.Query()
	q.Set("options", "-csearch_path="+schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "DATABASE_URL"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
