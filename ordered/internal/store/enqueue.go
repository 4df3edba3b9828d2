package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// JobEnqueueJSONSQL is the enqueue statement for callers that run it through database/sql:
// its arguments are the batch as a JSON array of objects with key, seq, kind, payload,
// run_at and max_attempts, then EnqueueBatch's MaxKeyBytes and MaxAttempts.
var JobEnqueueJSONSQL = jobEnqueueJSONSQL

// EnqueuedJob is a row returned by JobEnqueueMany: the event's 1-based position in the batch.
// An archived event (at or below its key's archived history, no longer stored) is a duplicate
// with ID 0.
type EnqueuedJob struct {
	Ord       int
	ID        int64
	Duplicate bool
}

// Archived reports whether the event is at or below its key's archived history.
func (e EnqueuedJob) Archived() bool { return e.Duplicate && e.ID == 0 }

// EnqueueBatch is a batch of events to enqueue, one slice per column, all of one length.
type EnqueueBatch struct {
	Keys        []string
	Seqs        []int64
	Kinds       []string
	Payloads    []string     // JSON documents
	RunAts      []*time.Time // nil: now
	MaxAttempts []int32

	// The limits the database checks the batch against again: MaxKeyBytesLimit bounds keys and
	// kinds, MaxAttemptsDefault is the attempt limit of an event whose MaxAttempts is 0.
	MaxKeyBytesLimit   int32
	MaxAttemptsDefault int32

	// The sequence mode of the batch's keys: FirstSeq nil is the default mode; otherwise
	// the keys are contiguous from *FirstSeq, with the gap policy GapAction ("wait",
	// "proceed", "block") after GapTimeout (nil for wait).
	FirstSeq   *int64
	GapAction  string
	GapTimeout *time.Duration
}

// SequenceArgs are the batch's sequence parameters, in the order the enqueue queries take them.
func (b *EnqueueBatch) SequenceArgs() []any {
	action := b.GapAction
	if action == "" {
		action = "wait"
	}
	return []any{b.FirstSeq, action, b.GapTimeout}
}

// JobEnqueueMany enqueues a batch.
func JobEnqueueMany(ctx context.Context, db DBTX, b *EnqueueBatch) ([]EnqueuedJob, error) {
	rows, err := db.Query(ctx, jobEnqueueManySQL, append([]any{b.Keys, b.Seqs, b.Kinds, b.Payloads, b.RunAts,
		b.MaxAttempts, b.MaxKeyBytesLimit, b.MaxAttemptsDefault}, b.SequenceArgs()...)...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (EnqueuedJob, error) {
		var e EnqueuedJob
		err := r.Scan(&e.Ord, &e.ID, &e.Duplicate)
		return e, err
	})
}

// TxRefuseSQL aborts the caller's transaction it runs in (TxRefuse), for database/sql.
var TxRefuseSQL = txRefuseSQL

// TxRefuse aborts the transaction tx for a batch the client refused before sending it, with
// message as the database's error.
func TxRefuse(ctx context.Context, tx DBTX, message string) {
	_, _ = tx.Exec(ctx, txRefuseSQL, message) // it fails: that is what aborts tx
}

// JobEnqueueOneSQL is the statement of JobEnqueueOne's appends, for callers that run it
// through database/sql with OneArgs: it returns the job's id, or no row for an event that
// must take the general path (JobEnqueueJSONSQL), having written nothing.
var JobEnqueueOneSQL = jobEnqueueOneSQL

// OneArgs are the arguments of JobEnqueueOneSQL for the batch's only event.
func (b *EnqueueBatch) OneArgs() []any {
	return []any{b.Keys[0], b.Seqs[0], b.Kinds[0], b.Payloads[0], b.RunAts[0], b.MaxAttempts[0]}
}

// JobEnqueueOne enqueues the batch's only event, which is in the default mode: an append in
// one small statement, any other event (a duplicate, a late one, one below its key's head)
// through JobEnqueueMany.
func JobEnqueueOne(ctx context.Context, db DBTX, b *EnqueueBatch) (EnqueuedJob, error) {
	e := EnqueuedJob{Ord: 1}
	err := db.QueryRow(ctx, jobEnqueueOneSQL, b.OneArgs()...).Scan(&e.ID)
	if !errors.Is(err, pgx.ErrNoRows) {
		return e, err
	}
	rows, err := JobEnqueueMany(ctx, db, b)
	if err != nil {
		return e, err
	}
	if len(rows) != 1 {
		return e, fmt.Errorf("ordered: enqueue of one event returned %d rows", len(rows))
	}
	return rows[0], nil
}

// AppendPlan is how a batch of appends is written by COPY (JobAppendPrepare): Appends is false
// when some event is not an append, and then nothing else is set.
type AppendPlan struct {
	Appends bool
	IDs     []int64   // the new jobs' ids, one an event, in the order the events are written
	Now     time.Time // the transaction's now(): the available_at of an event without run_at
}

// JobAppendPrepare locks and writes the rows of keys, whose events (counts[i] of them, written
// key by key in the order of keys) have the seqs seqMins[i] to seqMaxs[i] and whose lowest
// event has runAts[i] and maxAttempts[i]; it plans the COPY of their events and writes the
// heads of the keys that had none.
func JobAppendPrepare(ctx context.Context, db DBTX, keys []string, seqMins, seqMaxs []int64,
	runAts []*time.Time, maxAttempts, counts []int32, events int) (AppendPlan, error) {
	var p AppendPlan
	var now pgtype.Timestamptz
	err := db.QueryRow(ctx, jobAppendPrepareSQL, keys, seqMins, seqMaxs, runAts, maxAttempts, counts, events).
		Scan(&p.Appends, &p.IDs, &now)
	p.Now = now.Time
	return p, err
}

// AppendColumns are the columns JobAppendCopy writes, in the order of its rows' values.
var AppendColumns = []string{"id", "key", "seq", "kind", "payload", "available_at", "max_attempts", "run_at"}

// JobAppendCopy writes planned appends (JobAppendPrepare) with COPY, one row of AppendColumns
// an event.
func JobAppendCopy(ctx context.Context, tx pgx.Tx, rows [][]any) error {
	_, err := tx.CopyFrom(ctx, pgx.Identifier{"ordered_jobs"}, AppendColumns, pgx.CopyFromRows(rows))
	return err
}
