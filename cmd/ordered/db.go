package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/schema"
)

// connectTimeoutDefault bounds each connection attempt when neither the URL's connect_timeout
// nor PGCONNECT_TIMEOUT sets a limit: a server that accepts and never answers would otherwise
// hold a command forever.
const connectTimeoutDefault = 10 * time.Second

// pool connects to the database; an empty URL means the libpq defaults. ctx bounds the
// connecting only (a signal cancels it).
func (a *app) pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	url := a.databaseURL
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
	}
	// connect_timeout=0 is libpq's "wait forever", and is kept when asked for.
	if cfg.ConnConfig.ConnectTimeout == 0 && !strings.Contains(url, "connect_timeout") && os.Getenv("PGCONNECT_TIMEOUT") == "" {
		cfg.ConnConfig.ConnectTimeout = connectTimeoutDefault
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "ordered"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("connect to %s:%d: interrupted", cfg.ConnConfig.Host, cfg.ConnConfig.Port)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, fmt.Errorf("connect: %w (no answer within %v; connect_timeout in the URL sets the limit)",
				err, cfg.ConnConfig.ConnectTimeout)
		}
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// client connects, checks that the schema is migrated and returns a client with cfg; close
// the pool when done.
func (a *app) client(ctx context.Context, cfg *ordered.Config, maxConns int32) (*ordered.Client, *pgxpool.Pool, error) {
	pool, err := a.pool(ctx, maxConns)
	if err != nil {
		return nil, nil, err
	}
	if err := schema.Check(ctx, pool); err != nil {
		pool.Close()
		return nil, nil, err
	}
	c, err := ordered.NewClient(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}
