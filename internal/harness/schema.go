package harness

import (
	"context"
	"net/url"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/schema"
)

// Schema is a schema of one run's own in the database at BaseURL, which the run drops at its
// end.
type Schema struct {
	BaseURL, Name string
}

// CreateSchema creates the schema name in the database at baseURL. The name is the caller's,
// never taken from input: identifiers cannot be parameters.
func CreateSchema(ctx context.Context, baseURL, name string) (*Schema, error) {
	conn, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, err
	}
	return &Schema{BaseURL: baseURL, Name: name}, nil
}

// URL is the database URL with its search_path on the schema, for the run's worker processes.
func (s *Schema) URL() (string, error) {
	u, err := url.Parse(s.BaseURL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("options", "-csearch_path="+s.Name)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Pool connects to the schema with at most maxConns connections.
func (s *Schema) Pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	u, err := s.URL()
	if err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// MigratedPool connects to the schema, as Pool does, and migrates it.
func (s *Schema) MigratedPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	pool, err := s.Pool(ctx, maxConns)
	if err != nil {
		return nil, err
	}
	if _, err := schema.Migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// Drop drops the schema with everything in it, on a connection of its own.
func (s *Schema) Drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.BaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE")
	return err
}
