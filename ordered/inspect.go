package ordered

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// ErrJobNotFound occurs when Job names a job that does not exist (or was archived).
var ErrJobNotFound = errors.New("ordered: no such job")

// JobStatus is where a job stands.
type JobStatus string

// The statuses of a job.
const (
	// JobQueued waits to run: it is its key's head (next to run) or waits behind it.
	JobQueued JobStatus = "queued"
	// JobRunning is claimed by a worker, under a lease.
	JobRunning JobStatus = "running"
	// JobDone completed.
	JobDone JobStatus = "done"
	// JobFailed failed for good and holds nothing: its key's later jobs proceed.
	JobFailed JobStatus = "failed"
	// JobBlocked failed for good and holds its key until replayed or skipped.
	JobBlocked JobStatus = "blocked"
)

// JobRecord is a job as it runs, for inspection: a later job of a running batch, queued in its
// row, reads as running, under its batch's lease and at the claim the batch returned for it.
type JobRecord struct {
	ID      int64
	Key     string
	Seq     int64
	Kind    string
	Payload json.RawMessage
	Status  JobStatus
	// Head marks the one open job of its key that may run now (or runs, or blocks it).
	Head        bool
	Attempts    int
	MaxAttempts int
	// ClaimVersion counts the job's claims; it is the fencing token of the current one.
	ClaimVersion int64
	// LastError is the error of the job's last failed attempt: the queue keeps no earlier ones.
	LastError string
	// LeaseUntil is when a running job's lease ends, and LeaseLeft how long that is from now
	// by the database's clock (negative: expired); both zero unless running.
	LeaseUntil time.Time
	LeaseLeft  time.Duration
	// ClaimedBy names the worker that claimed the job last (WorkerConfig.Name, the claiming
	// session's application_name): for a running job, the one that holds it.
	ClaimedBy string
	// AvailableAt is when the job may run (next retry time after a failed attempt).
	AvailableAt time.Time
	// RunAt is the time the event asked to run at; zero when it asked for none.
	RunAt     time.Time
	CreatedAt time.Time
	// AttemptedAt is when the last attempt started, FinishedAt when the job finished; zero
	// when none did.
	AttemptedAt time.Time
	FinishedAt  time.Time
}

func jobRecordOf(r store.JobRow) JobRecord {
	j := JobRecord{
		ID: r.ID, Key: r.Key, Seq: r.Seq, Kind: r.Kind, Payload: r.Payload,
		Status: JobStatus(r.Status), Head: r.Head, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
		ClaimVersion: r.ClaimVersion, LastError: deref(r.LastError), AvailableAt: r.AvailableAt,
		CreatedAt: r.CreatedAt, RunAt: derefTime(r.RunAt), AttemptedAt: derefTime(r.AttemptedAt),
		FinishedAt: derefTime(r.FinishedAt), LeaseUntil: derefTime(r.LeaseUntil),
		ClaimedBy: deref(r.ClaimedBy),
	}
	if r.LeaseLeftSeconds != nil {
		j.LeaseLeft = seconds(*r.LeaseLeftSeconds)
	}
	return j
}

// Job returns the job id (see JobRecord). ErrJobNotFound: no such job.
func (c *Client) Job(ctx context.Context, id int64) (JobRecord, error) {
	r, found, err := store.JobGet(ctx, c.db, id)
	switch {
	case err != nil:
		return JobRecord{}, fmt.Errorf("ordered: job %d: %w", id, err)
	case !found:
		return JobRecord{}, fmt.Errorf("%w: %d", ErrJobNotFound, id)
	}
	return jobRecordOf(r), nil
}

// KeyTimelineParams page KeyTimeline.
type KeyTimelineParams struct {
	// FromSeq is the lowest seq listed; 0 lists from the start.
	FromSeq int64
	// Limit bounds the jobs listed; default 100, at most InspectLimitMax.
	Limit int
}

// InspectLimitMax bounds one page of the inspection calls.
const InspectLimitMax = 1000

// KeyTimeline is a key's stored jobs in seq order (each as a JobRecord), one page of them.
type KeyTimeline struct {
	Key string
	// Found is false when the key was never enqueued (or the whole key was removed).
	Found bool
	// SeqMax is the highest seq ever enqueued for the key; ArchivedSeq the highest archived
	// (-1: none), whose jobs are no longer stored.
	SeqMax, ArchivedSeq int64
	FirstSeen           time.Time
	Jobs                []JobRecord
	// Gaps are the seqs missing between the page's jobs (and, on the first page, between the
	// archived history, or a contiguous key's next seq, and the first job): never enqueued,
	// as far as the queue knows.
	Gaps []SeqGap
	// Passed are the ranges a contiguous key passed as gaps (see Client.ReleaseGap), latest
	// first, as many as the page's Limit.
	Passed []PassedGap
	// NextSeq is the FromSeq of the next page; -1 when this is the last.
	NextSeq int64
	// Waiting is the gap a contiguous key waits on now; nil when it waits on none.
	Waiting *KeyGap
}

// KeyGap is the gap a contiguous key waits on: the seqs Missing, since Since; its gap policy
// GapAction ("wait", "proceed" or "block") acts at Deadline (zero: never), or blocked the key
// at BlockedAt (Blocked).
type KeyGap struct {
	Missing         SeqRange
	Since, Deadline time.Time
	Blocked         bool
	BlockedAt       time.Time
	GapAction       string
}

// SeqGap is a run of seqs, From to To inclusive, with no stored job.
type SeqGap struct{ From, To int64 }

// KeyTimeline returns a page of key's jobs in seq order, with the key's high-water marks and
// the gaps in its sequence. Its cost is the page's rows: it reads the key's open and finished
// jobs through their (key, seq) indexes.
func (c *Client) KeyTimeline(ctx context.Context, key string, p KeyTimelineParams) (KeyTimeline, error) {
	limit := min(cmpOr(p.Limit, 100), InspectLimitMax)
	t := KeyTimeline{Key: key, ArchivedSeq: -1, NextSeq: -1}
	k, found, err := store.KeyGet(ctx, c.db, key)
	if err != nil {
		return t, fmt.Errorf("ordered: key timeline: %w", err)
	}
	if !found {
		return t, nil
	}
	t.Found, t.SeqMax, t.ArchivedSeq, t.FirstSeen = true, k.SeqMax, k.ArchivedSeq, k.CreatedAt
	rows, err := store.KeyTimeline(ctx, c.db, key, max(p.FromSeq, 0)-1, limit+1)
	if err != nil {
		return t, fmt.Errorf("ordered: key timeline: %w", err)
	}
	if len(rows) > limit {
		t.NextSeq = rows[limit].Seq
		rows = rows[:limit]
	}
	prev, check := p.FromSeq-1, p.FromSeq > 0
	switch {
	case check:
	case t.ArchivedSeq >= 0:
		prev, check = t.ArchivedSeq, true
	case k.NextSeq != nil && len(rows) > 0:
		// A contiguous key that archived nothing: its first missing seqs are those from its
		// next seq up to its first job (below the next seq every job is stored).
		prev, check = min(*k.NextSeq, rows[0].Seq)-1, true
	}
	for _, r := range rows {
		if check && r.Seq > prev+1 {
			t.Gaps = append(t.Gaps, SeqGap{From: prev + 1, To: r.Seq - 1})
		}
		prev, check = r.Seq, true
		t.Jobs = append(t.Jobs, jobRecordOf(r))
	}
	if t.Passed, err = c.PassedGaps(ctx, key, limit); err != nil {
		return t, fmt.Errorf("ordered: key timeline: %w", err)
	}
	if k.NextSeq != nil {
		g, waits, err := store.KeyGap(ctx, c.db, key)
		if err != nil {
			return t, fmt.Errorf("ordered: key timeline: %w", err)
		}
		if waits && g.FirstOpen != nil {
			t.Waiting = &KeyGap{Missing: SeqRange{From: g.NextSeq, To: *g.FirstOpen - 1}, Since: g.Since,
				Blocked: g.BlockedAt != nil, GapAction: g.GapAction}
			if g.Deadline != nil {
				t.Waiting.Deadline = *g.Deadline
			}
			if g.BlockedAt != nil {
				t.Waiting.BlockedAt = *g.BlockedAt
			}
		}
	}
	return t, nil
}

// SearchKeys lists up to limit keys (default 20, at most InspectLimitMax) that start with
// prefix, in key order.
func (c *Client) SearchKeys(ctx context.Context, prefix string, limit int) ([]string, error) {
	keys, err := store.KeySearch(ctx, c.db, prefix, "", min(cmpOr(limit, 20), InspectLimitMax))
	if err != nil {
		return nil, fmt.Errorf("ordered: search keys: %w", err)
	}
	return keys, nil
}

// FailedJobsPageParams filter and page FailedJobsPage; zero fields filter nothing.
type FailedJobsPageParams struct {
	// KeyPrefix keeps the jobs whose key starts with it.
	KeyPrefix string
	// Kind keeps the jobs of this kind.
	Kind string
	// ErrorContains keeps the jobs whose last error contains it, ignoring case.
	ErrorContains string
	// Blocking keeps only the jobs that hold their key (true) or only those that don't
	// (false); nil keeps both.
	Blocking *bool
	// After resumes after this job's (key, seq): the Next of the previous page.
	After *FailedJobsCursor
	// Limit bounds the page; default 100, at most InspectLimitMax.
	Limit int
}

// FailedJobsCursor is where a page of failed jobs ends.
type FailedJobsCursor struct {
	Key string
	Seq int64
}

// FailedJobsPage is one page of failed jobs, in (key, seq) order.
type FailedJobsPage struct {
	Jobs []FailedJob
	// Next resumes after this page; nil when it is the last.
	Next *FailedJobsCursor
}

// FailedJobsPage lists one page of failed jobs (failed and blocked) in (key, seq) order,
// filtered. Pages are keyset-paged: each costs its own rows (and the failed rows its filters
// skip), however deep into the list it is.
func (c *Client) FailedJobsPage(ctx context.Context, p FailedJobsPageParams) (FailedJobsPage, error) {
	limit := min(cmpOr(p.Limit, 100), InspectLimitMax)
	q := store.FailedPageParams{Prefix: p.KeyPrefix, Blocking: p.Blocking, Limit: limit + 1}
	if p.Kind != "" {
		q.Kind = &p.Kind
	}
	if p.ErrorContains != "" {
		q.Error = &p.ErrorContains
	}
	if p.After != nil {
		q.AfterKey, q.AfterSeq = &p.After.Key, p.After.Seq
	}
	rows, err := store.JobFailedPage(ctx, c.db, q)
	if err != nil {
		return FailedJobsPage{}, fmt.Errorf("ordered: list failed jobs: %w", err)
	}
	var page FailedJobsPage
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		page.Next = &FailedJobsCursor{Key: last.Key, Seq: last.Seq}
	}
	page.Jobs = make([]FailedJob, len(rows))
	for i, r := range rows {
		page.Jobs[i] = FailedJob{
			ID: r.ID, Key: r.Key, Seq: r.Seq, Kind: r.Kind, Payload: r.Payload,
			Blocking: r.Status == "blocked", Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
			LastError: deref(r.LastError), CreatedAt: r.CreatedAt, FinishedAt: derefTime(r.FinishedAt),
		}
	}
	return page, nil
}

// BlockedKeysPageParams page BlockedKeysPage.
type BlockedKeysPageParams struct {
	// After resumes after this blocked job (the Next of the previous page); nil: the first page.
	After *FailedJobsCursor
	// Limit bounds the page; default 100, at most InspectLimitMax.
	Limit int
	// WaitingUpTo bounds the counting of each key's waiting jobs; default WaitingUpToDefault.
	WaitingUpTo int
}

// WaitingUpToDefault is how far BlockedKeysPage counts a key's waiting jobs by default.
const WaitingUpToDefault = 10000

// BlockedKeyDetail is a blocked key with the failed job that holds it.
type BlockedKeyDetail struct {
	BlockedKey
	Kind        string
	Attempts    int
	MaxAttempts int
	// Waiting counts the key's open jobs behind the blocked one, up to WaitingUpTo; WaitingMore
	// says there are more than that.
	Waiting     int64
	WaitingMore bool
}

// BlockedKeysPage is one page of blocked keys, in key order.
type BlockedKeysPage struct {
	Keys []BlockedKeyDetail
	// Next resumes after this page; nil when it is the last.
	Next *FailedJobsCursor
}

// BlockedKeysPage lists one page of blocked keys in key order, each with its blocked job and
// how many of the key's jobs wait behind it. A key held by two blocked jobs (a forced replay
// failed behind a blocked one) is listed once for each.
func (c *Client) BlockedKeysPage(ctx context.Context, p BlockedKeysPageParams) (BlockedKeysPage, error) {
	limit := min(cmpOr(p.Limit, 100), InspectLimitMax)
	upTo := cmpOr(p.WaitingUpTo, WaitingUpToDefault)
	var afterKey *string
	var afterSeq int64
	if p.After != nil {
		afterKey, afterSeq = &p.After.Key, p.After.Seq
	}
	rows, err := store.KeyBlockedPage(ctx, c.db, afterKey, afterSeq, limit+1, upTo+1)
	if err != nil {
		return BlockedKeysPage{}, fmt.Errorf("ordered: list blocked keys: %w", err)
	}
	var page BlockedKeysPage
	if len(rows) > limit {
		rows = rows[:limit]
		page.Next = &FailedJobsCursor{Key: rows[limit-1].Key, Seq: rows[limit-1].Seq}
	}
	page.Keys = make([]BlockedKeyDetail, len(rows))
	for i, r := range rows {
		page.Keys[i] = BlockedKeyDetail{
			BlockedKey: BlockedKey{Key: r.Key, JobID: r.JobID, Seq: r.Seq, Since: derefTime(r.FinishedAt),
				LastError: deref(r.LastError)},
			Kind: r.Kind, Attempts: r.Attempts, MaxAttempts: r.MaxAttempts,
			Waiting: min(r.Waiting, int64(upTo)), WaitingMore: r.Waiting > int64(upTo),
		}
	}
	return page, nil
}

// RunningJob is a job a worker holds now.
type RunningJob struct {
	ID           int64
	Key          string
	Seq          int64
	Kind         string
	Attempts     int
	MaxAttempts  int
	ClaimVersion int64
	// StartedAt is when the current attempt started.
	StartedAt  time.Time
	LeaseUntil time.Time
	// LeaseLeft is how long the lease has left by the database's clock; negative: expired
	// (the worker crashed or stalled, and the job will be taken back).
	LeaseLeft time.Duration
	// ClaimedBy names the worker that holds it (WorkerConfig.Name).
	ClaimedBy string
}

// RunningJobs lists up to limit running jobs (default 100, at most InspectLimitMax), the later
// jobs of running batches among them, the soonest lease to end first, so expired leases come
// first.
func (c *Client) RunningJobs(ctx context.Context, limit int) ([]RunningJob, error) {
	rows, err := store.JobRunningList(ctx, c.db, min(cmpOr(limit, 100), InspectLimitMax))
	if err != nil {
		return nil, fmt.Errorf("ordered: list running jobs: %w", err)
	}
	out := make([]RunningJob, len(rows))
	for i, r := range rows {
		out[i] = RunningJob{ID: r.ID, Key: r.Key, Seq: r.Seq, Kind: r.Kind, Attempts: r.Attempts,
			MaxAttempts: r.MaxAttempts, ClaimVersion: r.ClaimVersion, StartedAt: derefTime(r.AttemptedAt),
			LeaseUntil: r.LeaseUntil, LeaseLeft: seconds(r.LeaseLeftSeconds), ClaimedBy: deref(r.ClaimedBy)}
	}
	return out, nil
}

// WorkerClaims is a worker that holds running jobs, by the name its claims recorded.
type WorkerClaims struct {
	// Name is the worker's WorkerConfig.Name; empty for claims made without one.
	Name string
	// Running is how many jobs it holds, Expired how many of those leases ran out (a worker
	// that crashed or stalled).
	Running, Expired int
	// LastClaimedAt is when it claimed the newest of them.
	LastClaimedAt time.Time
}

// Workers lists up to limit workers (default 100, at most InspectLimitMax) that hold running
// jobs now, by name.
func (c *Client) Workers(ctx context.Context, limit int) ([]WorkerClaims, error) {
	rows, err := store.JobWorkers(ctx, c.db, min(cmpOr(limit, 100), InspectLimitMax))
	if err != nil {
		return nil, fmt.Errorf("ordered: list workers: %w", err)
	}
	out := make([]WorkerClaims, len(rows))
	for i, r := range rows {
		out[i] = WorkerClaims{Name: r.Name, Running: r.Running, Expired: r.Expired, LastClaimedAt: derefTime(r.LastClaimedAt)}
	}
	return out, nil
}

// MinuteCount is a count of jobs in one minute.
type MinuteCount struct {
	Minute time.Time
	Count  int64
}

// DoneByMinute counts the jobs done in each minute of the last window (minutes without any
// are left out), oldest first. Archived jobs are no longer counted.
func (c *Client) DoneByMinute(ctx context.Context, window time.Duration) ([]MinuteCount, error) {
	rows, err := store.JobDoneByMinute(ctx, c.db, window)
	if err != nil {
		return nil, fmt.Errorf("ordered: done by minute: %w", err)
	}
	out := make([]MinuteCount, len(rows))
	for i, r := range rows {
		out[i] = MinuteCount(r)
	}
	return out, nil
}

// RecentStats returns the counts that a worker or another caller took at most maxAge ago,
// counting anew when there are none that young and no one else is counting: many dashboards
// and workers then read the whole table once per maxAge between them. The oldest ready job's
// age is as of now. Stats.CountedAt says when the counts were taken.
func (c *Client) RecentStats(ctx context.Context, maxAge time.Duration) (Stats, error) {
	return c.sharedStats(ctx, maxAge)
}

func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
