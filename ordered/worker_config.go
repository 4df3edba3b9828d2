package ordered

import (
	"cmp"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults and limits of WorkerConfig.
const (
	WorkersDefault             = 10
	WorkersMin                 = 1
	PollIntervalDefault        = time.Second
	PollIntervalMin            = 10 * time.Millisecond
	MaintenanceIntervalDefault = 5 * time.Second
	RetentionDefault           = 24 * time.Hour
	// ClaimBatchMax bounds the jobs one claim statement takes.
	ClaimBatchMax = 100
)

// WorkerPoolConns is the size of the pool a worker opens for its own statements, apart from
// its handlers: one for the claim (the fetch loop runs one at a time), completeFlushesMax for
// the completion batches in flight, one for maintenance, one for the failures of jobs for good,
// one for the other per-job settlements (retries, give-backs), and renewConns left to the lease
// renewals. A failure waits for its key's row, which a producer's open transaction may hold for
// long: failures keep to their one place, so that however many wait, the retries, claims,
// completions and renewals still get connections. Renewals are single-row and short.
const WorkerPoolConns = 1 + completeFlushesMax + 1 + 1 + 1 + renewConns

// renewConns is the part of the worker's pool that no statement but a renewal can take.
const renewConns = 2

// WorkerConfig configures a Worker. Zero fields take their defaults.
//
// Connections: a started worker runs its own statements (claims, lease renewals, completion
// batches, retries, give-backs, maintenance) through a pool of its own of WorkerPoolConns
// connections, opened at Start from a copy of the client's pool's config (so its exec mode and
// hooks come along) and closed at Stop, so that handlers never starve them; without PollOnly
// it also holds one LISTEN connection. Handlers use the client's pool: a TxHandlerFunc holds
// one of its connections for the whole handler, so that pool needs MaxConns of at least
// Workers (NewWorker warns when it is smaller; the handlers then wait for connections, their
// leases renewed), plus whatever the application's own queries take. A handler that holds a
// connection of the pool (a TxHandlerFunc's transaction) and asks for another (Enqueue rather
// than EnqueueTx, say) needs two: with too few, every handler may hold one and wait for a
// second for ever. In all, a worker costs the server WorkerPoolConns + 1 connections beyond
// the client's pool.
type WorkerConfig struct {
	// Workers is how many handlers run at once. Default WorkersDefault. A job whose handler
	// succeeded waits for its completion batch without taking one of them (its lease is
	// renewed meanwhile); up to about 1,000 such jobs per worker run again after their leases
	// expire if the process dies before their batches commit. While handlers hold their slots
	// for less time than a claim's round trip takes, the worker claims ahead what its slots
	// would finish during one claim (up to a claim's worth); such a job waits for a slot, its
	// lease renewed, and goes back to the queue, its attempt not counted, if it waits longer
	// than four claims' round trips (at least 50 ms). So does a key's next job that a
	// completion batch claimed meanwhile.
	Workers int
	// PollInterval is how often an idle worker looks for work when no notification wakes it
	// (notifications are not durable); each wait is jittered. Default PollIntervalDefault.
	PollInterval time.Duration
	// PollOnly disables LISTEN/NOTIFY: the worker then looks for work every PollInterval.
	// Without it the worker holds one more connection than its pool's, outside the pool, for
	// LISTEN. Behind a transaction-mode pooler a worker polls whatever PollOnly says: set
	// Config.Pooler, or else it notices (its own notification does not arrive), warns and
	// stops listening.
	PollOnly bool
	// HeartbeatInterval is how often a running job's lease is renewed. Default Lease/3.
	HeartbeatInterval time.Duration
	// StopGrace is how long a handler may take to stop once its context is cancelled because
	// its lease is running out. While renewals fail (the database unreachable, a partition),
	// the worker cancels a handler StopGrace before its lease would expire by this process's
	// own clock (less a margin), so a handler that stops within StopGrace never overlaps
	// another worker's claim of its job. Default Lease/6; it must be shorter than
	// 9/10 of the lease less HeartbeatInterval.
	StopGrace time.Duration
	// MaintenanceInterval is how often the worker checks the queue's schema (see Worker.Err),
	// fails exhausted jobs of crashed workers, archives finished jobs and refreshes the gauges.
	// Default MaintenanceIntervalDefault.
	MaintenanceInterval time.Duration
	// MaxAttempts, when positive, caps the attempts of the jobs this worker runs: a job fails
	// for good after that many attempts even if it was enqueued with more.
	MaxAttempts int
	// JobTimeout, when positive, bounds each call of the handler (a batch worker's: each
	// batch): once it has run that long its context is cancelled, context.Cause giving an
	// error that wraps ErrJobTimeout. What the handler returns decides the outcome as ever; an
	// error returned after the timeout is recorded wrapped in that cause, and counts as an
	// attempt, so a job that always hangs fails for good once its attempts are spent. A handler
	// that ignores its context keeps its job, and so its key, until it returns: the lease is
	// renewed meanwhile. Default none.
	JobTimeout time.Duration
	// Retention is how long done jobs are kept before archival deletes them. Default
	// RetentionDefault; negative keeps them (archive with `ordered archive` instead).
	Retention time.Duration
	// Registerer receives the worker's metrics; nil registers none.
	Registerer prometheus.Registerer
	// MetricsLabels are constant labels on every metric of the worker, such as
	// {"queue": "billing"}. Workers on one Registerer with the same labels share their metrics;
	// the workers of two queues (two schemas) need labels of their own, with the same names.
	MetricsLabels prometheus.Labels

	// BatchSize is how many jobs of one key a batch worker (Client.NewBatchWorker) takes under
	// one claim, at most. Default BatchSizeDefault; at most BatchSizeMax. Other workers ignore
	// it.
	BatchSize int

	// Name identifies this worker: the application_name of the sessions that claim, so
	// pg_stat_activity shows it, and the claimed_by of every job it claims, so the dashboard
	// shows who holds a job. Default: the pool's application_name, else "ordered HOST:PID".
	Name string
}

// Worker runs a Handler over the queue's jobs: it claims what it can start now, renews the

// withDefaults returns a copy of c (nil: the zero config) with every zero field set to its
// default; lease is the client's, which the heartbeat and the stop grace are parts of.
func (c *WorkerConfig) withDefaults(lease time.Duration) WorkerConfig {
	var out WorkerConfig
	if c != nil {
		out = *c
	}
	out.Workers = cmp.Or(out.Workers, WorkersDefault)
	out.PollInterval = cmp.Or(out.PollInterval, PollIntervalDefault)
	out.HeartbeatInterval = cmp.Or(out.HeartbeatInterval, lease/3)
	out.StopGrace = cmp.Or(out.StopGrace, lease/6)
	out.MaintenanceInterval = cmp.Or(out.MaintenanceInterval, MaintenanceIntervalDefault)
	out.Retention = cmp.Or(out.Retention, RetentionDefault)
	return out
}

// validate names the first field of c (defaults filled in) that is out of bounds, for a
// client whose lease is lease.
func (c *WorkerConfig) validate(lease time.Duration) error {
	switch {
	case c.Workers < WorkersMin:
		return fmt.Errorf("ordered: WorkerConfig.Workers %d must be at least %d", c.Workers, WorkersMin)
	case c.PollInterval < PollIntervalMin:
		return fmt.Errorf("ordered: WorkerConfig.PollInterval %v is below the minimum %v", c.PollInterval, PollIntervalMin)
	case c.HeartbeatInterval <= 0 || c.HeartbeatInterval >= lease:
		return fmt.Errorf("ordered: WorkerConfig.HeartbeatInterval %v must be positive and shorter than the lease %v", c.HeartbeatInterval, lease)
	case c.StopGrace <= 0 || c.StopGrace >= lease*9/10-c.HeartbeatInterval:
		return fmt.Errorf("ordered: WorkerConfig.StopGrace %v must be positive and shorter than 9/10 of the lease %v less the heartbeat interval %v",
			c.StopGrace, lease, c.HeartbeatInterval)
	case c.MaxAttempts < 0:
		return fmt.Errorf("ordered: WorkerConfig.MaxAttempts %d must not be negative", c.MaxAttempts)
	case c.JobTimeout < 0:
		return fmt.Errorf("ordered: WorkerConfig.JobTimeout %v must not be negative (0: none)", c.JobTimeout)
	case c.BatchSize < 0 || c.BatchSize > BatchSizeMax:
		return fmt.Errorf("ordered: WorkerConfig.BatchSize %d must be between 1 and %d (0: the default)", c.BatchSize, BatchSizeMax)
	case c.MaintenanceInterval <= 0:
		return fmt.Errorf("ordered: WorkerConfig.MaintenanceInterval %v must be positive", c.MaintenanceInterval)
	}
	return nil
}

// defaultWorkerName is "ordered HOST:PID".
func defaultWorkerName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return fmt.Sprintf("ordered %s:%d", host, os.Getpid())
}
