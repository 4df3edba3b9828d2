// Package notifier owns a worker's LISTEN connection: it wakes the fetch loop when jobs are
// enqueued, and checks with a notification it sends itself that notifications arrive at all
// (behind a transaction-mode pooler they do not). Notifications are not durable, so the worker
// polls as well; the notifier only shortens the wait.
package notifier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/policy"
)

// Channel is the LISTEN/NOTIFY channel of enqueues; a notification's payload is the schema of
// the queue it concerns.
const Channel = "ordered_jobs"

const listenSQL = "LISTEN " + Channel

// ProbeTimeoutDefault bounds the wait for the notification a listener sends itself. Polling
// goes on meanwhile, so a slow answer costs nothing but the wait.
const ProbeTimeoutDefault = 10 * time.Second

// ErrNotificationsLost is a listener's own notification not arriving in time.
var ErrNotificationsLost = errors.New("ordered: notification not received")

// Notifier wakes its owner on the notifications of one queue.
type Notifier struct {
	// Connect opens the listening connection, apart from any pool.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	// Notify sends payload on Channel through another connection than the listener's: a
	// pooler could run a NOTIFY of the listening connection on the very server connection
	// that ran its LISTEN, and deliver it.
	Notify func(ctx context.Context, payload string) error
	// Topic is the payload that wakes: the queue's schema.
	Topic string
	// Wake is called on each notification of Topic, and after each LISTEN (what was sent
	// while nobody listened is lost).
	Wake func()
	// Logger receives the reconnections and the warning that notifications do not arrive.
	Logger *slog.Logger
	// PollInterval is how often the owner polls anyway; it is only logged.
	PollInterval time.Duration
	// ProbeTimeout is how long the self-sent notification may take; 0 is ProbeTimeoutDefault.
	ProbeTimeout time.Duration
}

// Run listens until ctx ends, reconnecting with backoff. When a connection's own notification
// does not arrive, it warns once and returns, leaving the owner to poll.
func (n *Notifier) Run(ctx context.Context) {
	backoff := policy.Exponential{Base: 50 * time.Millisecond, Max: 5 * time.Second}
	for failures := 0; ctx.Err() == nil; {
		listened, err := n.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrNotificationsLost) {
			n.Logger.Warn("ordered: the notification listener receives no notifications (is this a transaction-mode "+
				"pooler? then set Config.Pooler to PoolerTransaction, or run ordered work with --pooler transaction); polling for jobs instead",
				"poll_interval", n.PollInterval, "waited", n.probeTimeout())
			return
		}
		if listened {
			failures = 0 // it worked until now: the shortest wait, longer ones only if reconnecting fails
		}
		failures++
		wait := backoff.Delay(failures)
		n.Logger.Warn("ordered: notification listener disconnected; reconnecting", "error", err, "wait", wait)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (n *Notifier) probeTimeout() time.Duration {
	if n.ProbeTimeout > 0 {
		return n.ProbeTimeout
	}
	return ProbeTimeoutDefault
}

// listen holds one LISTEN connection until it fails or ctx ends. listened reports whether the
// LISTEN itself succeeded; ErrNotificationsLost, that the connection receives no notifications.
func (n *Notifier) listen(ctx context.Context) (listened bool, err error) {
	conn, err := n.Connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, listenSQL); err != nil {
		return false, err
	}
	n.Wake()
	probe := fmt.Sprintf("probe %s %x", n.Topic, rand.Uint64())
	if err := n.Notify(ctx, probe); err != nil {
		return false, err // as if the LISTEN had failed: back off
	}
	// The timer stops once the probe is in; the wait then goes on with ctx alone.
	probeCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	timer := time.AfterFunc(n.probeTimeout(), cancel)
	defer timer.Stop()
	for waitCtx := probeCtx; ; {
		note, err := conn.WaitForNotification(waitCtx)
		if err != nil {
			if waitCtx == probeCtx && ctx.Err() == nil && probeCtx.Err() != nil {
				return true, ErrNotificationsLost
			}
			return true, err
		}
		switch note.Payload {
		case n.Topic:
			n.Wake()
		case probe:
			timer.Stop()
			waitCtx = ctx
		}
	}
}
