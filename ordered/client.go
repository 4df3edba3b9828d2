package ordered

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// Client is the handle on a queue: it enqueues events, claims jobs and settles them, and runs
// the admin operations. It is safe for concurrent use.
type Client struct {
	pool *pgxpool.Pool
	cfg  *Config

	backlogMu      sync.Mutex
	backlog        int64
	backlogChecked time.Time
}

// NewClient returns a Client on pool, whose database must be migrated (schema.Migrate).
// cfg may be nil for the defaults.
func NewClient(pool *pgxpool.Pool, cfg *Config) (*Client, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Client{pool: pool, cfg: c}, nil
}

// Config returns the client's configuration, with defaults filled in.
func (c *Client) Config() Config { return *c.cfg }

// admit enforces Config.MaxBacklog for a batch of n events.
func (c *Client) admit(ctx context.Context, n int) error {
	if c.cfg.MaxBacklog == 0 {
		return nil
	}
	c.backlogMu.Lock()
	defer c.backlogMu.Unlock()
	if time.Since(c.backlogChecked) >= BacklogCheckInterval ||
		c.backlog+int64(n) > c.cfg.MaxBacklog {
		count, err := store.QueueBacklog(ctx, c.pool)
		if err != nil {
			return fmt.Errorf("ordered: count backlog: %w", err)
		}
		c.backlog, c.backlogChecked = count, time.Now()
	}
	if c.backlog+int64(n) > c.cfg.MaxBacklog {
		return fmt.Errorf("%w: %d jobs queued, %d more would pass the limit of %d",
			ErrBacklogFull, c.backlog, n, c.cfg.MaxBacklog)
	}
	c.backlog += int64(n)
	return nil
}
