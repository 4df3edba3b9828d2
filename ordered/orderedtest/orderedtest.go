// Package orderedtest gives tests a fresh, migrated queue of their own on a real PostgreSQL.
//
// Every call of New creates a new schema in the database named by DATABASE_URL (default: the
// server on 127.0.0.1:5432), migrates it and returns a pool whose search_path selects it, so
// tests run in parallel without seeing each other's jobs. The schema is dropped when the test
// ends. When no database can be reached, the test fails: it never skips.
package orderedtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/schema"
)

// DefaultURL is used when DATABASE_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

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
	// Pool is a pool on the schema, closed when the test ends.
	Pool *pgxpool.Pool
}

// MaxConnsDefault is the size of the pool New returns.
const MaxConnsDefault = 16

// New creates a fresh migrated queue for t and removes it when t ends.
func New(t testing.TB) *Queue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	base := DatabaseURL()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("orderedtest: no PostgreSQL at %s (set DATABASE_URL or run `make test`): %v", redact(base), err)
	}
	defer admin.Close(ctx)

	name := "ordered_test_" + randomHex(6)
	// The name is generated here, never taken from input; identifiers cannot be parameters.
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("orderedtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("orderedtest: drop schema %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("orderedtest: drop schema %s: %v", name, err)
		}
	})

	cfg, err := pgxpool.ParseConfig(base)
	if err != nil {
		t.Fatalf("orderedtest: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = name
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		// Lets a test find its own sessions in pg_stat_activity among other tests'.
		cfg.ConnConfig.RuntimeParams["application_name"] = name
	}
	cfg.MaxConns = MaxConnsDefault
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("orderedtest: %v", err)
	}
	t.Cleanup(pool.Close)
	if _, err := schema.Migrate(ctx, pool); err != nil {
		t.Fatalf("orderedtest: %v", err)
	}
	return &Queue{Schema: name, URL: withSearchPath(base, name), Pool: pool}
}

// Pool is New(t).Pool.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return New(t).Pool
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
