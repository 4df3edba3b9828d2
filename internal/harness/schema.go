package harness

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// Pool connects to the schema with at most maxConns connections.
func (s *Schema) Pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(s.BaseURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	SetSearchPath(cfg.ConnConfig, s.Name)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// SetSearchPath makes every connection that cc opens work in schema: its search_path is set
// once it is connected, as a session setting, not as a startup parameter
// (options=-csearch_path=...), which PgBouncer refuses. It runs before any AfterConnect that cc
// already has.
func SetSearchPath(cc *pgx.ConnConfig, schema string) {
	then := cc.AfterConnect
	path := []byte(pgx.Identifier{schema}.Sanitize())
	cc.AfterConnect = func(ctx context.Context, conn *pgconn.PgConn) error {
		if err := conn.ExecParams(ctx, setSearchPathSQL, [][]byte{path}, nil, nil, nil).Read().Err; err != nil {
			return fmt.Errorf("set search_path: %w", err)
		}
		if then != nil {
			return then(ctx, conn)
		}
		return nil
	}
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
