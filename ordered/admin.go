package ordered

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// FailedJob is a job that failed for good.
type FailedJob struct {
	ID      int64
	Key     string
	Seq     int64
	Kind    string
	Payload json.RawMessage
	// Blocking is true when the job holds its key (block policy) until replayed or skipped.
	Blocking    bool
	Attempts    int
	MaxAttempts int
	LastError   string
	CreatedAt   time.Time
	FinishedAt  time.Time
}

// FailedJobsParams filters FailedJobs.
type FailedJobsParams struct {
	// Key restricts the list to one key when not empty.
	Key string
	// Limit bounds the list; default 100.
	Limit int
}

// FailedJobs lists failed jobs by key and seq.
func (c *Client) FailedJobs(ctx context.Context, p FailedJobsParams) ([]FailedJob, error) {
	var key *string
	if p.Key != "" {
		key = &p.Key
	}
	rows, err := store.JobFailedList(ctx, c.db, key, cmpOr(p.Limit, 100))
	if err != nil {
		return nil, fmt.Errorf("ordered: list failed jobs: %w", err)
	}
	out := make([]FailedJob, len(rows))
	for i, r := range rows {
		out[i] = FailedJob{
			ID: r.ID, Key: r.Key, Seq: r.Seq, Kind: r.Kind, Payload: r.Payload,
			Blocking: r.Status == "blocked", Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
			LastError: deref(r.LastError), CreatedAt: r.CreatedAt,
		}
		if r.FinishedAt != nil {
			out[i].FinishedAt = *r.FinishedAt
		}
	}
	return out, nil
}

// BlockedKey is a key whose later jobs wait behind a failed job.
type BlockedKey struct {
	Key string
	// JobID and Seq name the failed job that holds the key.
	JobID     int64
	Seq       int64
	Since     time.Time
	LastError string
}

// BlockedKeys lists up to limit blocked keys (default 100).
func (c *Client) BlockedKeys(ctx context.Context, limit int) ([]BlockedKey, error) {
	rows, err := store.KeyBlockedList(ctx, c.db, cmpOr(limit, 100))
	if err != nil {
		return nil, fmt.Errorf("ordered: list blocked keys: %w", err)
	}
	out := make([]BlockedKey, len(rows))
	for i, r := range rows {
		out[i] = BlockedKey{Key: r.Key, JobID: r.JobID, Seq: r.Seq, LastError: deref(r.LastError)}
		if r.FinishedAt != nil {
			out[i].Since = *r.FinishedAt
		}
	}
	return out, nil
}

// ReplayParams modify Replay.
type ReplayParams struct {
	// Force replays even when later jobs of the key have already run, so this job will run
	// after them.
	Force bool
}

// Replay queues a failed job again with fresh attempts. If it blocked its key it runs before
// the key's later jobs. ErrReplayOutOfOrder: later jobs already ran (use Force);
// ErrLaterJobRunning: a later job is running now; ErrNotFailed: no such failed job.
func (c *Client) Replay(ctx context.Context, id int64, p ReplayParams) error {
	return c.replay(ctx, c.db, id, p)
}

// ReplayTx is Replay inside tx, so the job is queued again with the caller's own changes or
// not at all. On error tx is aborted: roll it back. Until tx ends, the job's key is locked:
// its enqueues and completions wait for tx.
func (c *Client) ReplayTx(ctx context.Context, tx pgx.Tx, id int64, p ReplayParams) error {
	return c.replay(ctx, c.in(tx), id, p)
}

func (c *Client) replay(ctx context.Context, db store.DBTX, id int64, p ReplayParams) error {
	if err := store.JobReplay(ctx, db, id, p.Force); err != nil {
		return mapDBError(err)
	}
	return nil
}

// Skip releases the key held by a blocked job: the job stays failed, for the record, and the
// key's next job may run. released is false when the job held nothing (it failed under the
// skip policy, or was skipped before): nothing changed. ErrNotFailed: no such failed job.
func (c *Client) Skip(ctx context.Context, id int64) (released bool, err error) {
	return c.skip(ctx, c.db, id)
}

// SkipTx is Skip inside tx, so the key is released with the caller's own changes or not at
// all. On error tx is aborted: roll it back. Until tx ends, the job's key is locked: its
// enqueues and completions wait for tx.
func (c *Client) SkipTx(ctx context.Context, tx pgx.Tx, id int64) (released bool, err error) {
	return c.skip(ctx, c.in(tx), id)
}

func (c *Client) skip(ctx context.Context, db store.DBTX, id int64) (bool, error) {
	released, err := store.JobSkip(ctx, db, id)
	if err != nil {
		return false, mapDBError(err)
	}
	return released, nil
}

// Stats are the queue's counts at one moment. Queued, Running, Done, Failed and Blocked count
// jobs by status and add up to all jobs.
type Stats struct {
	Queued, Running, Done int64
	// Failed counts jobs failed for good that hold nothing: failed under the skip policy, or
	// skipped. Blocked counts those that hold their key (block policy) until replayed or
	// skipped; Failed + Blocked is every job failed for good.
	Failed, Blocked int64
	// BlockedKeys counts the keys held by blocked jobs: as many as Blocked, unless a forced
	// replay of an earlier job failed again behind a blocked one.
	BlockedKeys int64
	// ExpiredLeases counts running jobs whose lease has expired (crashed or stalled workers).
	ExpiredLeases int64
	// OldestReady is how long the oldest claimable job has been waiting.
	OldestReady time.Duration
	// CountedAt is when the counts were taken; zero when shared counts were never taken.
	CountedAt time.Time
	// GapKeys counts the contiguous keys waiting on a gap; GapBlockedKeys those of them that
	// their gap policy blocked for an operator. OldestGap is how long the oldest gap has held
	// its key (0: none).
	GapKeys, GapBlockedKeys int64
	OldestGap               time.Duration
}

// Stats counts the queue's jobs. It reads the whole table: on a deep queue, call it no more
// often than a worker's maintenance pass, which shares its counts as gauges.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	return statsOf(store.QueueStatsGet(ctx, c.db))
}

// sharedStats returns counts that any worker took at most maxAge ago (see
// ordered_stats_shared), so that the workers of a queue count its jobs once per interval
// between them.
func (c *Client) sharedStats(ctx context.Context, maxAge time.Duration) (Stats, error) {
	return statsOf(store.QueueStatsShared(ctx, c.db, maxAge))
}

func statsOf(s store.QueueStats, err error) (Stats, error) {
	if err != nil {
		return Stats{}, fmt.Errorf("ordered: stats: %w", err)
	}
	var countedAt time.Time
	if s.CountedAt != nil {
		countedAt = *s.CountedAt
	}
	return Stats{
		Queued: s.Queued, Running: s.Running, Done: s.Done, Failed: s.Failed, Blocked: s.Blocked,
		BlockedKeys: s.BlockedKeys, ExpiredLeases: s.ExpiredLeases,
		OldestReady: secondsDuration(s.OldestReadySeconds), CountedAt: countedAt,
		GapKeys: s.GapKeys, GapBlockedKeys: s.GapBlockedKeys,
		OldestGap: secondsDuration(s.OldestGapSeconds),
	}, nil
}

// secondsDuration is s seconds as a Duration, which holds about 292 years: an age beyond that
// (a job whose run_at is centuries ago) is the longest Duration, not an overflow.
func secondsDuration(s float64) time.Duration {
	if d := s * float64(time.Second); d < math.MaxInt64 {
		return time.Duration(max(d, 0))
	}
	return math.MaxInt64
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ArchiveParams bound one Archive call.
type ArchiveParams struct {
	// OlderThan keeps jobs finished more recently than this; 0 archives every done job.
	OlderThan time.Duration
	// Limit bounds the jobs deleted by one statement; default ArchiveBatchDefault.
	Limit int
	// All walks every key once, batch after batch, waiting for another archiver's batch
	// rather than passing: every done job finished OlderThan before the walk began is
	// deleted but those of keys another transaction holds at that moment (an enqueue, a
	// completion, an operator's action).
	// Without it, Archive deletes one batch, going on from where the last one stopped, and
	// nothing if another archiver is at work.
	All bool
}

// ArchiveBatchDefault is how many finished jobs one Archive statement deletes at most.
const ArchiveBatchDefault = 1000

// Archive deletes done jobs (failed jobs are kept for investigation), one bounded batch or,
// with All, every one, and returns how many it deleted. Each key remembers the highest seq
// archived, so a producer that re-sends an archived event gets a no-op
// (EnqueueResult.Archived) rather than running it again. Safe to run from many processes at
// once.
func (c *Client) Archive(ctx context.Context, p ArchiveParams) (int, error) {
	olderThan, limit := max(p.OlderThan, 0), cmpOr(p.Limit, ArchiveBatchDefault)
	if !p.All {
		n, _, err := store.JobArchive(ctx, c.db, olderThan, limit, false, nil)
		if err != nil {
			return 0, fmt.Errorf("ordered: archive: %w", err)
		}
		return int(n), nil
	}
	total, walk := 0, &store.ArchiveWalk{}
	for walk != nil {
		n, next, err := store.JobArchive(ctx, c.db, olderThan, limit, true, walk)
		total += int(n)
		if err != nil {
			return total, fmt.Errorf("ordered: archive: %w", err)
		}
		walk = next
	}
	return total, nil
}
