package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/internal/harness"
	"github.com/orderedq/ordered/internal/startup"
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
	url := a.url()
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
	if err := a.pooler.configure(cfg.ConnConfig); err != nil {
		return nil, err
	}
	if a.schema != "" {
		harness.SetSearchPath(cfg.ConnConfig, a.schema)
	}
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = "ordered"
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// A server restarting or ending sessions is asked again for a moment (see startup).
	if err := startup.Retry(ctx, func() error { return pool.Ping(ctx) }); err != nil {
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
	if err := startup.Retry(ctx, func() error { return schema.Check(ctx, pool) }); err != nil {
		pool.Close()
		return nil, nil, err
	}
	withPooler := ordered.Config{}
	if cfg != nil {
		withPooler = *cfg
	}
	withPooler.Pooler = a.pooler.Pooler
	c, err := ordered.NewClient(pool, &withPooler)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return c, pool, nil
}

// poolerFlag is --pooler: what stands between the CLI and PostgreSQL.
type poolerFlag struct{ ordered.Pooler }

func (f *poolerFlag) Set(s string) error {
	p, err := ordered.ParsePooler(s)
	if err != nil {
		return errors.New("want none, session or transaction")
	}
	f.Pooler = p
	return nil
}

func (f *poolerFlag) Type() string { return "none|session|transaction" }

// configure makes cc's statements safe behind the pooler: behind a transaction pooler, none
// may rely on a statement prepared by an earlier round trip, so the statement cache's default
// mode gives way to QueryExecModeCacheDescribe (Exec without a description cache). A mode the
// URL chose (default_query_exec_mode) that is safe there is kept.
func (f *poolerFlag) configure(cc *pgx.ConnConfig) error {
	if f.Pooler != ordered.PoolerTransaction {
		return nil
	}
	switch cc.DefaultQueryExecMode {
	case pgx.QueryExecModeDescribeExec:
		return errors.New("database URL: default_query_exec_mode=describe_exec does not work behind a transaction pooler " +
			"(it describes a statement and runs it in two round trips, which may reach different server connections)")
	case pgx.QueryExecModeCacheStatement:
		cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		if cc.DescriptionCacheCapacity == 0 {
			cc.DefaultQueryExecMode = pgx.QueryExecModeExec
		}
	}
	return nil
}
