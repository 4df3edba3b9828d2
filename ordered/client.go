package ordered

import (
	"github.com/jackc/pgx/v5/pgxpool"
)

// Client is the handle on a queue: it enqueues events, claims jobs and settles them, and runs
// the admin operations. It is safe for concurrent use.
type Client struct {
	pool *pgxpool.Pool
	cfg  *Config
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
