package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered"
)

// pool connects to the database; an empty URL means the libpq defaults.
func (a *app) pool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	url := a.databaseURL
	if url == "" {
		url = os.Getenv("DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database URL: %w", err)
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
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// client connects and returns a client with cfg; close the pool when done.
func (a *app) client(ctx context.Context, cfg *ordered.Config, maxConns int32) (*ordered.Client, *pgxpool.Pool, error) {
	pool, err := a.pool(ctx, maxConns)
	if err != nil {
		return nil, nil, err
	}
	c, err := ordered.NewClient(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}
