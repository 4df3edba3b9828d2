package ordered

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/policy"
)

// Defaults and limits of Config.
const (
	LeaseDefault = 30 * time.Second
	LeaseMin     = 50 * time.Millisecond

	MaxAttemptsDefault = 25

	MaxKeyBytesDefault = 255
	// MaxKeyBytesMax keeps a key, with a seq beside it, within what a btree index entry holds
	// (about 2,700 bytes) however little it compresses.
	MaxKeyBytesMax = 2048

	MaxPayloadBytesDefault = 1 << 20
	MaxPayloadBytesMax     = 64 << 20

	// MaxErrorBytes bounds the error text stored with a job.
	MaxErrorBytes = 2048

	// ExhaustedBatchDefault is how many expired, exhausted jobs one maintenance pass fails.
	ExhaustedBatchDefault = 100
)

// Config configures a Client. The zero value is usable: NewClient gives every zero field its
// default, named in the field's comment.
type Config struct {
	// Lease is how long a claim owns its job before another worker may recover it; renew it for
	// longer work. Default LeaseDefault.
	Lease time.Duration

	// MaxAttempts is the default number of attempts of an event that sets none.
	// A job with no attempts left fails and goes to Policy. Default MaxAttemptsDefault.
	MaxAttempts int

	// Policy decides what a permanently failed head job does to its key.
	// Default policy.Always(policy.Block).
	Policy policy.Policy

	// Sequence gives each key its sequence mode, fixed when the key's first event is
	// enqueued: the default (nil: every key), or contiguous with a gap policy (see
	// policy.Sequence and docs/design.md, "Contiguous keys and gaps"). A batch whose keys
	// are of several modes is sent as one statement per mode, in one transaction.
	Sequence policy.Sequencer

	// Backoff spaces the retries of a job. Default policy.Exponential{} (1s doubling to 1h).
	Backoff policy.Backoff

	// MaxKeyBytes bounds an event's key. Default MaxKeyBytesDefault.
	MaxKeyBytes int

	// MaxPayloadBytes bounds an event's JSON payload, both as sent and as PostgreSQL writes it
	// back to workers (octet_length(payload::text), the SQL functions' rule): a number is
	// written without its exponent, so 1e131071 is 131072 bytes. Default MaxPayloadBytesDefault.
	MaxPayloadBytes int

	// MaxBacklog refuses enqueues (ErrBacklogFull) once this many jobs are queued; 0 means no
	// limit. The count is refreshed at most every BacklogCheckInterval, so the limit may be
	// passed by what is enqueued within one interval. A batch whose every event the queue
	// holds already (re-sent duplicates) adds no job and is never refused for the limit.
	MaxBacklog int64

	// Logger receives the client's structured logs. Default slog.Default().
	Logger *slog.Logger

	// Pooler says what stands between the client's pool and PostgreSQL. Behind a
	// transaction-mode pooler (PoolerTransaction) every statement the client runs, on its pool
	// and in callers' transactions, uses an exec mode that keeps no prepared statement on the
	// server, and workers poll instead of listening for notifications. Default PoolerNone.
	Pooler Pooler
}

// Pooler is the kind of connection pooler, if any, between a Client and PostgreSQL.
type Pooler int

const (
	// PoolerNone: the pool connects to PostgreSQL itself.
	PoolerNone Pooler = iota
	// PoolerSession: a pooler that gives each client connection a server connection for its
	// whole life (PgBouncer pool_mode = session). It changes nothing: the same as PoolerNone.
	PoolerSession
	// PoolerTransaction: a pooler that may hand each transaction, or each statement outside
	// one, to a different server connection (PgBouncer pool_mode = transaction), so nothing
	// that lives in a server session outlasts it: prepared statements, LISTEN, SET, session
	// advisory locks. The client then runs every statement in pgx's
	// QueryExecModeCacheDescribe (QueryExecModeExec when the pool's description cache is
	// disabled), unless the pool's DefaultQueryExecMode is already one of the modes safe
	// there, and its workers poll (see WorkerConfig.PollOnly).
	PoolerTransaction
)

// String is the pooler's name as ParsePooler reads it: "none", "session" or "transaction".
func (p Pooler) String() string {
	switch p {
	case PoolerNone:
		return "none"
	case PoolerSession:
		return "session"
	case PoolerTransaction:
		return "transaction"
	}
	return fmt.Sprintf("Pooler(%d)", int(p))
}

// ParsePooler reads a pooler's name: "none" (or empty), "session" or "transaction".
func ParsePooler(s string) (Pooler, error) {
	for _, p := range []Pooler{PoolerNone, PoolerSession, PoolerTransaction} {
		if s == p.String() {
			return p, nil
		}
	}
	if s == "" {
		return PoolerNone, nil
	}
	return 0, fmt.Errorf("ordered: unknown pooler %q (want none, session or transaction)", s)
}

// execMode is the exec mode the client passes with every statement; 0 leaves the pool's own.
// Behind a transaction pooler a statement must not depend on the server connection of an
// earlier round trip: the statement cache's named statements do (prepared on one server
// connection, used on another), and so does QueryExecModeDescribeExec (it describes the
// unnamed statement in one round trip and executes it in the next). QueryExecModeCacheDescribe
// parses and executes in the one round trip and keeps binary parameters (the arrays of the
// claim and completion statements); QueryExecModeExec sends them as text.
func execMode(p Pooler, poolMode pgx.QueryExecMode, describeCache bool) pgx.QueryExecMode {
	if p != PoolerTransaction {
		return 0
	}
	switch poolMode {
	case pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
		return 0
	}
	if !describeCache {
		return pgx.QueryExecModeExec
	}
	return pgx.QueryExecModeCacheDescribe
}

// BacklogCheckInterval is how often admission control recounts the queued jobs.
const BacklogCheckInterval = time.Second

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	out.Lease = cmp.Or(out.Lease, LeaseDefault)
	out.MaxAttempts = cmp.Or(out.MaxAttempts, MaxAttemptsDefault)
	out.MaxKeyBytes = cmp.Or(out.MaxKeyBytes, MaxKeyBytesDefault)
	out.MaxPayloadBytes = cmp.Or(out.MaxPayloadBytes, MaxPayloadBytesDefault)
	if out.Policy == nil {
		out.Policy = policy.Always(policy.Block)
	}
	if out.Backoff == nil {
		out.Backoff = policy.Exponential{}
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Lease < LeaseMin:
		return fmt.Errorf("ordered: Config.Lease %v is below the minimum %v", c.Lease, LeaseMin)
	case c.MaxAttempts < 1 || c.MaxAttempts > math.MaxInt32:
		return fmt.Errorf("ordered: Config.MaxAttempts %d must be between 1 and %d", c.MaxAttempts, math.MaxInt32)
	case c.MaxKeyBytes < 1 || c.MaxKeyBytes > MaxKeyBytesMax:
		return fmt.Errorf("ordered: Config.MaxKeyBytes %d must be between 1 and %d", c.MaxKeyBytes, MaxKeyBytesMax)
	case c.MaxBacklog < 0:
		return fmt.Errorf("ordered: Config.MaxBacklog %d must not be negative", c.MaxBacklog)
	case c.Pooler < PoolerNone || c.Pooler > PoolerTransaction:
		return fmt.Errorf("ordered: Config.Pooler %v is not a known pooler", c.Pooler)
	case c.MaxPayloadBytes < 1 || c.MaxPayloadBytes > MaxPayloadBytesMax:
		return fmt.Errorf("ordered: Config.MaxPayloadBytes %d must be between 1 and %d", c.MaxPayloadBytes, MaxPayloadBytesMax)
	}
	return nil
}
