package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// The read queries of inspection: a job, a key's timeline, pages of failed jobs and blocked
// keys, running jobs and the done rate.
var (
	jobGetSQL          = query("job_get.sql")
	keyTimelineSQL     = query("key_timeline.sql")
	keyGetSQL          = query("key_get.sql")
	keyGapSQL          = query("key_gap.sql")
	keySearchSQL       = query("key_search.sql")
	jobFailedPageSQL   = query("job_failed_page.sql")
	keyBlockedPageSQL  = query("key_blocked_page.sql")
	jobRunningListSQL  = query("job_running_list.sql")
	jobWorkersSQL      = query("job_workers.sql")
	jobDoneByMinuteSQL = query("job_done_by_minute.sql")
)

// JobRow is a job as it runs (ordered_jobs_now), returned by JobGet and KeyTimeline.
type JobRow struct {
	ID           int64
	Key          string
	Seq          int64
	Kind         string
	Payload      json.RawMessage
	Status       string
	Head         bool
	Attempts     int
	MaxAttempts  int
	ClaimVersion int64
	LastError    *string
	LeaseUntil   *time.Time
	// LeaseLeftSeconds is lease_until minus now by the database's clock; nil unless running.
	LeaseLeftSeconds *float64
	AvailableAt      time.Time
	RunAt            *time.Time
	CreatedAt        time.Time
	AttemptedAt      *time.Time
	FinishedAt       *time.Time
	ClaimedBy        *string
}

func scanJobRow(r pgx.CollectableRow) (JobRow, error) {
	var j JobRow
	err := r.Scan(&j.ID, &j.Key, &j.Seq, &j.Kind, &j.Payload, &j.Status, &j.Head, &j.Attempts,
		&j.MaxAttempts, &j.ClaimVersion, &j.LastError, &j.LeaseUntil, &j.LeaseLeftSeconds,
		&j.AvailableAt, &j.RunAt, &j.CreatedAt, &j.AttemptedAt, &j.FinishedAt, &j.ClaimedBy)
	return j, err
}

// JobGet returns the job id; found is false when there is none.
func JobGet(ctx context.Context, db DBTX, id int64) (j JobRow, found bool, err error) {
	rows, err := db.Query(ctx, jobGetSQL, id)
	if err != nil {
		return JobRow{}, false, err
	}
	jobs, err := pgx.CollectRows(rows, scanJobRow)
	if err != nil || len(jobs) == 0 {
		return JobRow{}, false, err
	}
	return jobs[0], true, nil
}

// KeyTimeline lists up to limit jobs of key with a seq above afterSeq, in seq order.
func KeyTimeline(ctx context.Context, db DBTX, key string, afterSeq int64, limit int) ([]JobRow, error) {
	rows, err := db.Query(ctx, keyTimelineSQL, key, afterSeq, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanJobRow)
}

// KeyRow is a key's row in ordered_keys.
type KeyRow struct {
	Key         string
	SeqMax      int64
	ArchivedSeq int64
	CreatedAt   time.Time
	// NextSeq is a contiguous key's next seq (ordered_key_next_seq); nil for a key of the
	// default mode.
	NextSeq *int64
}

// KeyGet returns key's row; found is false when the key was never enqueued.
func KeyGet(ctx context.Context, db DBTX, key string) (k KeyRow, found bool, err error) {
	err = db.QueryRow(ctx, keyGetSQL, key).Scan(&k.Key, &k.SeqMax, &k.ArchivedSeq, &k.CreatedAt, &k.NextSeq)
	if errors.Is(err, pgx.ErrNoRows) {
		return KeyRow{}, false, nil
	}
	return k, err == nil, err
}

// KeyGapRow is the gap a contiguous key waits on (key_gap.sql): the missing seqs are NextSeq
// to FirstOpen-1.
type KeyGapRow struct {
	Since     time.Time
	Deadline  *time.Time
	BlockedAt *time.Time
	GapAction string
	NextSeq   int64
	FirstOpen *int64
}

// KeyGap returns the gap key waits on; found is false when it waits on none.
func KeyGap(ctx context.Context, db DBTX, key string) (g KeyGapRow, found bool, err error) {
	err = db.QueryRow(ctx, keyGapSQL, key).Scan(&g.Since, &g.Deadline, &g.BlockedAt, &g.GapAction, &g.NextSeq, &g.FirstOpen)
	if errors.Is(err, pgx.ErrNoRows) {
		return KeyGapRow{}, false, nil
	}
	return g, err == nil, err
}

// KeySearch lists up to limit keys starting with prefix, after the key after.
func KeySearch(ctx context.Context, db DBTX, prefix, after string, limit int) ([]string, error) {
	rows, err := db.Query(ctx, keySearchSQL, prefix, after, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// FailedPageParams are the arguments of JobFailedPage; nil pointers filter nothing.
type FailedPageParams struct {
	Prefix   string
	Kind     *string
	Error    *string
	AfterKey *string
	AfterSeq int64
	Blocking *bool
	Limit    int
}

// JobFailedPage lists a page of failed jobs in (key, seq) order.
func JobFailedPage(ctx context.Context, db DBTX, p FailedPageParams) ([]FailedJob, error) {
	rows, err := db.Query(ctx, jobFailedPageSQL, p.Prefix, p.Kind, p.Error, p.AfterKey, p.AfterSeq,
		p.Blocking, p.Limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanFailedJob)
}

// BlockedKeyRow is a row returned by KeyBlockedPage.
type BlockedKeyRow struct {
	Key         string
	JobID       int64
	Seq         int64
	Kind        string
	Attempts    int
	MaxAttempts int
	LastError   *string
	FinishedAt  *time.Time
	// Waiting counts the key's open jobs behind the blocked one, up to the count asked for.
	Waiting int64
}

// KeyBlockedPage lists up to limit blocked keys after the blocked job (afterKey, afterSeq)
// (afterKey nil: from the start),
// counting each one's waiting jobs up to countUpTo.
func KeyBlockedPage(ctx context.Context, db DBTX, afterKey *string, afterSeq int64, limit, countUpTo int) ([]BlockedKeyRow, error) {
	rows, err := db.Query(ctx, keyBlockedPageSQL, afterKey, afterSeq, limit, countUpTo)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (BlockedKeyRow, error) {
		var k BlockedKeyRow
		err := r.Scan(&k.Key, &k.JobID, &k.Seq, &k.Kind, &k.Attempts, &k.MaxAttempts, &k.LastError,
			&k.FinishedAt, &k.Waiting)
		return k, err
	})
}

// RunningJobRow is a row returned by JobRunningList.
type RunningJobRow struct {
	ID               int64
	Key              string
	Seq              int64
	Kind             string
	Attempts         int
	MaxAttempts      int
	ClaimVersion     int64
	AttemptedAt      *time.Time
	LeaseUntil       time.Time
	LeaseLeftSeconds float64
	ClaimedBy        *string
}

// JobRunningList lists up to limit running jobs, the soonest lease to end first.
func JobRunningList(ctx context.Context, db DBTX, limit int) ([]RunningJobRow, error) {
	rows, err := db.Query(ctx, jobRunningListSQL, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (RunningJobRow, error) {
		var j RunningJobRow
		err := r.Scan(&j.ID, &j.Key, &j.Seq, &j.Kind, &j.Attempts, &j.MaxAttempts, &j.ClaimVersion,
			&j.AttemptedAt, &j.LeaseUntil, &j.LeaseLeftSeconds, &j.ClaimedBy)
		return j, err
	})
}

// MinuteCount is a row returned by JobDoneByMinute.
type MinuteCount struct {
	Minute time.Time
	Count  int64
}

// JobDoneByMinute counts done jobs by the minute they finished in over the last window;
// minutes without any are left out.
func JobDoneByMinute(ctx context.Context, db DBTX, window time.Duration) ([]MinuteCount, error) {
	rows, err := db.Query(ctx, jobDoneByMinuteSQL, window)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (MinuteCount, error) {
		var m MinuteCount
		err := r.Scan(&m.Minute, &m.Count)
		return m, err
	})
}

// WorkerRow is a row returned by JobWorkers.
type WorkerRow struct {
	Name          string
	Running       int
	Expired       int
	LastClaimedAt *time.Time
}

// JobWorkers lists the workers that hold running jobs, by name.
func JobWorkers(ctx context.Context, db DBTX, limit int) ([]WorkerRow, error) {
	rows, err := db.Query(ctx, jobWorkersSQL, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (WorkerRow, error) {
		var w WorkerRow
		err := r.Scan(&w.Name, &w.Running, &w.Expired, &w.LastClaimedAt)
		return w, err
	})
}
