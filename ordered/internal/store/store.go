// Package store runs the queue's SQL. Each query lives in queries/*.sql, named after the store
// function that runs it; multi-step operations that must lock a key before touching its jobs
// are PL/pgSQL functions in the schema, called from here in one round trip.
package store

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

//go:embed queries/*.sql
var queries embed.FS

// query is the statement in queries/name, without its comments.
func query(name string) string {
	b, err := queries.ReadFile("queries/" + name)
	if err != nil {
		panic("store: missing query " + name)
	}
	return withoutComments(string(b))
}

// withoutComments is sql without its -- comments, each line's end kept. Drivers that put the
// arguments into the statement's text themselves (bun's pgdriver, database/sql drivers that
// interpolate) find the $n placeholders by their own reading of the text, and an apostrophe
// in a comment ("the job's id") starts a string literal for them. Quoted text ('...' and
// "...") is kept as it is; the statements hold no dollar-quoted text or /* */ comments.
func withoutComments(sql string) string {
	var out strings.Builder
	var quote byte // the quote of the literal or identifier we are in, 0 outside
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0 // a doubled quote closes and opens again: the same
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			if i < len(sql) {
				out.WriteByte('\n')
			}
			continue
		}
		out.WriteByte(c)
	}
	return out.String()
}

var (
	jobAppendPrepareSQL   = query("job_append_prepare.sql")
	jobBatchOutcomeSQL    = query("job_batch_outcome.sql")
	jobClaimLostSQL       = query("job_claim_lost.sql")
	jobClaimManySQL       = query("job_claim_many.sql")
	jobClaimBatchSQL      = query("job_claim_batch.sql")
	jobCompleteBatchSQL   = query("job_complete_batch.sql")
	jobLeaseExtendManySQL = query("job_lease_extend_many.sql")
	jobReleaseUnrunMany   = query("job_release_unrun_many.sql")
	jobCompleteManySQL    = query("job_complete_many.sql")
	jobCompleteOrAbortSQL = query("job_complete_or_abort.sql")
	jobEnqueueJSONSQL     = query("job_enqueue_json.sql")
	jobEnqueueManySQL     = query("job_enqueue_many.sql")
	jobEnqueueOneSQL      = query("job_enqueue_one.sql")
	jobExhaustedListSQL   = query("job_exhausted_list.sql")
	jobFailIfClaimedSQL   = query("job_fail_if_claimed.sql")
	jobFailedListSQL      = query("job_failed_list.sql")
	jobLeaseExtendSQL     = query("job_lease_extend.sql")
	jobReleaseForRetrySQL = query("job_release_for_retry.sql")
	jobReleaseUnrunSQL    = query("job_release_unrun.sql")
	jobReplaySQL          = query("job_replay.sql")
	jobSkipSQL            = query("job_skip.sql")
	keyBlockedListSQL     = query("key_blocked_list.sql")
	queueStatsSQL         = query("queue_stats.sql")
	queueStatsSharedSQL   = query("queue_stats_shared.sql")
	txRefuseSQL           = query("tx_refuse.sql")
)

// JobClaimManySQL is the claim statement, exported for plan tests.
var JobClaimManySQL = jobClaimManySQL

// DBTX is a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WithExecMode returns db with every statement run in mode, which pgx takes from a
// statement's first argument; mode 0 returns db as it is. It is how a client behind a
// transaction-mode pooler keeps every statement it runs, on its pool or in a caller's
// transaction, from relying on server-side session state.
func WithExecMode(db DBTX, mode pgx.QueryExecMode) DBTX {
	if m, ok := db.(modeDB); ok {
		db = m.db
	}
	if mode == 0 {
		return db
	}
	return modeDB{db: db, mode: mode}
}

// ModeArgs returns args with mode first, as pgx reads it (also through database/sql with
// pgx's stdlib driver); mode 0 returns args as they are.
func ModeArgs(mode pgx.QueryExecMode, args ...any) []any {
	if mode == 0 {
		return args
	}
	return append([]any{mode}, args...)
}

type modeDB struct {
	db   DBTX
	mode pgx.QueryExecMode
}

func (m modeDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return m.db.Exec(ctx, sql, ModeArgs(m.mode, args...)...)
}

func (m modeDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return m.db.Query(ctx, sql, ModeArgs(m.mode, args...)...)
}

func (m modeDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return m.db.QueryRow(ctx, sql, ModeArgs(m.mode, args...)...)
}

// ClaimedJob is a row returned by JobClaimMany.
type ClaimedJob struct {
	ID           int64
	Key          string
	Seq          int64
	Kind         string
	Payload      json.RawMessage
	Attempts     int
	MaxAttempts  int
	ClaimVersion int64
	LeaseUntil   time.Time
	CreatedAt    time.Time
	AvailableAt  time.Time
	AttemptedAt  time.Time
	LastError    *string
	// Recovered is true when the job was taken back from a claim whose lease expired.
	Recovered bool
}

// JobClaimMany claims up to limit jobs, leased for lease.
func JobClaimMany(ctx context.Context, db DBTX, limit int, lease time.Duration) ([]ClaimedJob, error) {
	rows, err := db.Query(ctx, jobClaimManySQL, limit, lease)
	if err != nil {
		return nil, err
	}
	return collectClaimed(rows)
}

// JobClaimBatch claims up to limit heads, each with up to batch - 1 of its key's next jobs,
// leased for lease: key by key, in seq order.
func JobClaimBatch(ctx context.Context, db DBTX, limit, batch int, lease time.Duration) ([]ClaimedJob, error) {
	rows, err := db.Query(ctx, jobClaimBatchSQL, limit, batch, lease)
	if err != nil {
		return nil, err
	}
	return collectClaimed(rows)
}

// JobCompleteBatch is JobCompleteMany for batch workers: the next heads it claims are extended
// into batches of up to batch jobs.
func JobCompleteBatch(ctx context.Context, db DBTX, ids, versions []int64, nextLimit, batch int,
	lease time.Duration) (completed []Claim, claimed []ClaimedJob, err error) {
	rows, err := db.Query(ctx, jobCompleteBatchSQL, ids, versions, nextLimit, batch, lease)
	if err != nil {
		return nil, nil, err
	}
	return scanCompletion(rows)
}

// LeaseExtendMany renews the leases of the claims (ids[i], versions[i]) and returns the ids of
// those renewed; the others were lost.
func LeaseExtendMany(ctx context.Context, db DBTX, ids, versions []int64, lease time.Duration) ([]int64, error) {
	return queryIDs(ctx, db, jobLeaseExtendManySQL, ids, versions, lease)
}

// JobReleaseUnrunMany gives back the claims (ids[i], versions[i]) of jobs that never ran, their
// attempts not counted, and returns the ids of those given back; the others were lost.
func JobReleaseUnrunMany(ctx context.Context, db DBTX, ids, versions []int64) ([]int64, error) {
	return queryIDs(ctx, db, jobReleaseUnrunMany, ids, versions)
}

func queryIDs(ctx context.Context, db DBTX, sql string, args ...any) ([]int64, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

func collectClaimed(rows pgx.Rows) ([]ClaimedJob, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClaimedJob, error) {
		var j ClaimedJob
		err := r.Scan(&j.ID, &j.Key, &j.Seq, &j.Kind, &j.Payload, &j.Attempts, &j.MaxAttempts,
			&j.ClaimVersion, &j.LeaseUntil, &j.CreatedAt, &j.AvailableAt, &j.AttemptedAt, &j.LastError,
			&j.Recovered)
		return j, err
	})
}

// Claim is a job's id and claim version.
type Claim struct{ ID, Version int64 }

// JobCompleteMany completes the claims (ids[i], versions[i]) and claims up to nextLimit of the
// jobs that became their keys' heads, leased for lease. It returns the claims it completed
// (the others were lost) and the jobs it claimed.
func JobCompleteMany(ctx context.Context, db DBTX, ids, versions []int64, nextLimit int,
	lease time.Duration) (completed []Claim, claimed []ClaimedJob, err error) {
	rows, err := db.Query(ctx, jobCompleteManySQL, ids, versions, nextLimit, lease)
	if err != nil {
		return nil, nil, err
	}
	return scanCompletion(rows)
}

// JobCompleteOrAbort completes the claim (id, version) in the transaction db; a claim that is no
// longer current fails with SQLSTATE ORD06 and aborts the transaction.
func JobCompleteOrAbort(ctx context.Context, db DBTX, id, version int64) error {
	_, err := db.Exec(ctx, jobCompleteOrAbortSQL, id, version)
	return err
}

// JobClaimLost fails with SQLSTATE ORD06 for the claim (id, version), which aborts the
// transaction db: a fenced write in a caller's transaction that found its claim lost calls it.
func JobClaimLost(ctx context.Context, db DBTX, id, version int64) error {
	_, err := db.Exec(ctx, jobClaimLostSQL, id, version)
	return err
}

// JobBatchOutcome finds what became of a completion batch of the claims (ids[i], versions[i])
// of jobs of keys[i] whose answer was lost: if it committed, the claims it completed and the
// next jobs it claimed that are still its own, leased again for lease; neither if it did not.
func JobBatchOutcome(ctx context.Context, db DBTX, ids, versions []int64, keys []string,
	lease time.Duration) (completed []Claim, claimed []ClaimedJob, err error) {
	rows, err := db.Query(ctx, jobBatchOutcomeSQL, ids, versions, keys, lease)
	if err != nil {
		return nil, nil, err
	}
	return scanCompletion(rows)
}

// scanCompletion reads the rows of a completion: completed claims, then claimed next jobs.
// The columns a completed claim leaves null are scanned into pgtype values of one struct for
// all rows, not into pointers: a pointer a column a row was most of a worker's allocations.
func scanCompletion(rows pgx.Rows) (completed []Claim, claimed []ClaimedJob, err error) {
	defer rows.Close()
	var r struct {
		done                                          bool
		key, kind                                     pgtype.Text
		seq, version                                  pgtype.Int8
		attempts, maxAttempts                         pgtype.Int4
		leaseUntil, createdAt, availableAt, attempted pgtype.Timestamptz
	}
	for rows.Next() {
		var j ClaimedJob
		if err := rows.Scan(&r.done, &j.ID, &r.key, &r.seq, &r.kind, &j.Payload, &r.attempts,
			&r.maxAttempts, &r.version, &r.leaseUntil, &r.createdAt, &r.availableAt, &r.attempted,
			&j.LastError, &j.Recovered); err != nil {
			return nil, nil, err
		}
		if r.done {
			completed = append(completed, Claim{ID: j.ID, Version: r.version.Int64})
			continue
		}
		j.Key, j.Seq, j.Kind, j.ClaimVersion = r.key.String, r.seq.Int64, r.kind.String, r.version.Int64
		j.Attempts, j.MaxAttempts = int(r.attempts.Int32), int(r.maxAttempts.Int32)
		j.LeaseUntil, j.CreatedAt = r.leaseUntil.Time, r.createdAt.Time
		j.AvailableAt, j.AttemptedAt = r.availableAt.Time, r.attempted.Time
		claimed = append(claimed, j)
	}
	return completed, claimed, rows.Err()
}

// JobFailParams are the arguments of JobFailIfClaimed.
type JobFailParams struct {
	ID      int64
	Version int64
	Error   string
	Block   bool
	// Expired requires an expired lease with no attempts left instead of a live lease.
	Expired bool
}

// JobFailIfClaimed fails a job for good; false if the claim did not qualify.
func JobFailIfClaimed(ctx context.Context, db DBTX, p JobFailParams) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, jobFailIfClaimedSQL, p.ID, p.Version, p.Error, p.Block, p.Expired).Scan(&ok)
	return ok, err
}

// JobReleaseUnrun gives back a claim without counting the attempt: its job never started
// (handlerErr nil), or its handler was cut short by the worker's stop and returned handlerErr.
// False if the claim was lost.
func JobReleaseUnrun(ctx context.Context, db DBTX, id, version int64, handlerErr *string) (bool, error) {
	var got int64
	err := db.QueryRow(ctx, jobReleaseUnrunSQL, id, version, handlerErr).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// LeaseExtend renews the claim's lease; ok is false if the claim was lost.
func LeaseExtend(ctx context.Context, db DBTX, id, version int64, lease time.Duration) (until time.Time, ok bool, err error) {
	err = db.QueryRow(ctx, jobLeaseExtendSQL, id, version, lease).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	return until, err == nil, err
}

// JobReleaseForRetry queues the claimed job again after delay; false if the claim was lost.
func JobReleaseForRetry(ctx context.Context, db DBTX, id, version int64, delay time.Duration, errText string) (bool, error) {
	var got int64
	err := db.QueryRow(ctx, jobReleaseForRetrySQL, id, version, delay, errText).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// ExhaustedJob is a running job whose lease expired with no attempts left.
type ExhaustedJob struct {
	ID           int64
	Key          string
	Seq          int64
	Kind         string
	Attempts     int
	MaxAttempts  int
	ClaimVersion int64
	LastError    *string
}

// JobExhaustedList lists up to limit exhausted jobs with expired leases.
func JobExhaustedList(ctx context.Context, db DBTX, limit int) ([]ExhaustedJob, error) {
	rows, err := db.Query(ctx, jobExhaustedListSQL, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ExhaustedJob, error) {
		var j ExhaustedJob
		err := r.Scan(&j.ID, &j.Key, &j.Seq, &j.Kind, &j.Attempts, &j.MaxAttempts, &j.ClaimVersion, &j.LastError)
		return j, err
	})
}

// JobReplay queues a failed job again.
func JobReplay(ctx context.Context, db DBTX, id int64, force bool) error {
	_, err := db.Exec(ctx, jobReplaySQL, id, force)
	return err
}

// JobSkip releases the key blocked by a failed job; released is false if the job blocked
// nothing.
func JobSkip(ctx context.Context, db DBTX, id int64) (released bool, err error) {
	err = db.QueryRow(ctx, jobSkipSQL, id).Scan(&released)
	return released, err
}

// FailedJob is a row returned by JobFailedList.
type FailedJob struct {
	ID          int64
	Key         string
	Seq         int64
	Kind        string
	Payload     json.RawMessage
	Status      string
	Attempts    int
	MaxAttempts int
	LastError   *string
	CreatedAt   time.Time
	FinishedAt  *time.Time
}

// JobFailedList lists failed jobs, of one key when key is not nil.
func JobFailedList(ctx context.Context, db DBTX, key *string, limit int) ([]FailedJob, error) {
	rows, err := db.Query(ctx, jobFailedListSQL, key, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanFailedJob)
}

// scanFailedJob reads a row of the failed-job queries, which share their columns.
func scanFailedJob(r pgx.CollectableRow) (FailedJob, error) {
	var j FailedJob
	err := r.Scan(&j.ID, &j.Key, &j.Seq, &j.Kind, &j.Payload, &j.Status, &j.Attempts,
		&j.MaxAttempts, &j.LastError, &j.CreatedAt, &j.FinishedAt)
	return j, err
}

// BlockedKey is a row returned by KeyBlockedList.
type BlockedKey struct {
	Key        string
	JobID      int64
	Seq        int64
	FinishedAt *time.Time
	LastError  *string
}

// KeyBlockedList lists keys held by a blocked job.
func KeyBlockedList(ctx context.Context, db DBTX, limit int) ([]BlockedKey, error) {
	rows, err := db.Query(ctx, keyBlockedListSQL, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (BlockedKey, error) {
		var k BlockedKey
		err := r.Scan(&k.Key, &k.JobID, &k.Seq, &k.FinishedAt, &k.LastError)
		return k, err
	})
}

// QueueStats is the row returned by QueueStatsGet.
type QueueStats struct {
	Queued, Running, Done, Failed, Blocked, BlockedKeys, ExpiredLeases int64
	OldestReadySeconds                                                 float64
	CountedAt                                                          *time.Time // nil: never counted
	GapKeys, GapBlockedKeys                                            int64
	OldestGapSeconds                                                   float64
}

// QueueStatsGet counts the queue's jobs now.
func QueueStatsGet(ctx context.Context, db DBTX) (QueueStats, error) {
	return scanStats(db.QueryRow(ctx, queueStatsSQL))
}

// QueueStatsShared returns the counts any worker took at most maxAge ago, counting them anew
// if there are none that young and no one else is counting.
func QueueStatsShared(ctx context.Context, db DBTX, maxAge time.Duration) (QueueStats, error) {
	return scanStats(db.QueryRow(ctx, queueStatsSharedSQL, maxAge))
}

func scanStats(row pgx.Row) (QueueStats, error) {
	var s QueueStats
	err := row.Scan(&s.Queued, &s.Running, &s.Done, &s.Failed, &s.Blocked, &s.BlockedKeys,
		&s.ExpiredLeases, &s.OldestReadySeconds, &s.CountedAt, &s.GapKeys, &s.GapBlockedKeys, &s.OldestGapSeconds)
	return s, err
}

var (
	listenProbeSQL   = query("listen_probe.sql")
	jobArchiveSQL    = query("job_archive.sql")
	queueBacklogSQL  = query("queue_backlog.sql")
	queueHoldsAllSQL = query("queue_holds_all.sql")
)

// ArchiveWalk is where a walk of Archive over every key is: the key it goes on after, and
// the time its cutoff counts from (zero: the first call's start).
type ArchiveWalk struct {
	After  string
	Before time.Time
}

// JobArchive deletes up to limit done jobs finished longer than olderThan ago, waiting for
// another archiver if wait. With walk nil, it goes on from the workers' shared cursor;
// otherwise it walks from the key after walk.After and returns the walk's next call (nil: the
// walk reached the end of the keys).
func JobArchive(ctx context.Context, db DBTX, olderThan time.Duration, limit int, wait bool, walk *ArchiveWalk) (n int64, next *ArchiveWalk, err error) {
	var from *string
	var before *time.Time
	if walk != nil {
		from = &walk.After
		if !walk.Before.IsZero() {
			before = &walk.Before
		}
	}
	var after *string
	var took time.Time
	if err = db.QueryRow(ctx, jobArchiveSQL, olderThan, limit, wait, from, before).Scan(&n, &after, &took); err != nil || after == nil {
		return n, nil, err
	}
	return n, &ArchiveWalk{After: *after, Before: took}, nil
}

// QueueBacklog counts queued jobs.
func QueueBacklog(ctx context.Context, db DBTX) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, queueBacklogSQL).Scan(&n)
	return n, err
}

// QueueHoldsAll reports whether the queue holds every event (keys[i], seqs[i]) already, as a
// job or in its key's archived history.
func QueueHoldsAll(ctx context.Context, db DBTX, keys []string, seqs []int64) (bool, error) {
	var held bool
	err := db.QueryRow(ctx, queueHoldsAllSQL, keys, seqs).Scan(&held)
	return held, err
}

// ListenProbe sends a notification with payload on the channel workers listen on.
func ListenProbe(ctx context.Context, db DBTX, payload string) error {
	_, err := db.Exec(ctx, listenProbeSQL, payload)
	return err
}

var (
	gapReleaseSQL = query("gap_release.sql")
	gapExpireSQL  = query("gap_expire.sql")
	gapListSQL    = query("gap_list.sql")
	gapPassedSQL  = query("gap_passed_list.sql")
)

// GapRelease passes the lowest missing range of a contiguous key now; ok is false when the key
// misses no seq below an open job.
func GapRelease(ctx context.Context, db DBTX, key string) (from, to int64, ok bool, err error) {
	err = db.QueryRow(ctx, gapReleaseSQL, key).Scan(&from, &to)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, nil
	}
	return from, to, err == nil, err
}

// GapExpire applies the gap policy of up to limit keys whose gap timed out.
func GapExpire(ctx context.Context, db DBTX, limit int) (int, error) {
	var n int
	err := db.QueryRow(ctx, gapExpireSQL, limit).Scan(&n)
	return n, err
}

// GapKey is a contiguous key with a missing range, as gap_list.sql returns it.
type GapKey struct {
	Key               string
	NextSeq           int64
	FromSeq, ToSeq    *int64 // the lowest missing range below an open job; nil: none
	Since, BlockedAt  *time.Time
	Deadline          *time.Time
	GapAction         string
	OpenJobs, Running int64
}

// GapList lists the keys waiting on a gap (key nil), oldest first, or the one key given,
// waiting or not, up to limit.
func GapList(ctx context.Context, db DBTX, key *string, limit int) ([]GapKey, error) {
	rows, err := db.Query(ctx, gapListSQL, key, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (GapKey, error) {
		var g GapKey
		err := r.Scan(&g.Key, &g.NextSeq, &g.FromSeq, &g.ToSeq, &g.Since, &g.BlockedAt, &g.Deadline,
			&g.GapAction, &g.OpenJobs, &g.Running)
		return g, err
	})
}

// PassedGap is a range of seqs passed as a gap.
type PassedGap struct {
	Key            string
	FromSeq, ToSeq int64
	PassedAt       time.Time
	Reason         string
}

// GapPassedList lists the passed ranges of a key (nil: of every key), latest first, up to limit.
func GapPassedList(ctx context.Context, db DBTX, key *string, limit int) ([]PassedGap, error) {
	rows, err := db.Query(ctx, gapPassedSQL, key, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PassedGap, error) {
		var g PassedGap
		err := r.Scan(&g.Key, &g.FromSeq, &g.ToSeq, &g.PassedAt, &g.Reason)
		return g, err
	})
}
