package ordered

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/orderedq/ordered/policy"
)

// Defaults and limits of Config.
const (
	LeaseDefault = 30 * time.Second
	LeaseMin     = 50 * time.Millisecond

	MaxAttemptsDefault = 25

	MaxKeyBytesDefault = 255
	MaxKeyBytesMax     = 4096

	MaxPayloadBytesDefault = 1 << 20
	MaxPayloadBytesMax     = 64 << 20

	// MaxErrorBytes bounds the error text stored with a job.
	MaxErrorBytes = 2048

	// ExhaustedBatchDefault is how many expired, exhausted jobs one maintenance pass fails.
	ExhaustedBatchDefault = 100
)

// Config configures a Client. The zero value is usable: withDefaults fills every zero field.
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

	// Backoff spaces the retries of a job. Default policy.Exponential{} (1s doubling to 1h).
	Backoff policy.Backoff

	// MaxKeyBytes bounds an event's key. Default MaxKeyBytesDefault.
	MaxKeyBytes int

	// MaxPayloadBytes bounds an event's JSON payload. Default MaxPayloadBytesDefault.
	MaxPayloadBytes int

	// MaxBacklog refuses enqueues (ErrBacklogFull) once this many jobs are queued; 0 means no
	// limit. The count is refreshed at most every BacklogCheckInterval, so the limit may be
	// passed by what is enqueued within one interval.
	MaxBacklog int64

	// Logger receives the client's structured logs. Default slog.Default().
	Logger *slog.Logger
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
	case c.MaxPayloadBytes < 1 || c.MaxPayloadBytes > MaxPayloadBytesMax:
		return fmt.Errorf("ordered: Config.MaxPayloadBytes %d must be between 1 and %d", c.MaxPayloadBytes, MaxPayloadBytesMax)
	}
	return nil
}
