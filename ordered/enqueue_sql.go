package ordered

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// EnqueueSQLTx enqueues one event inside tx, a database/sql transaction (see EnqueueTx). Under
// Config.Pooler PoolerTransaction, tx must come from pgx's database/sql driver (stdlib), which
// takes the statement's exec mode from its arguments. Package orderedbun builds on it.
func (c *Client) EnqueueSQLTx(ctx context.Context, tx *sql.Tx, ev Event) (EnqueueResult, error) {
	return first(c.EnqueueManySQLTx(ctx, tx, []Event{ev}))
}

// EnqueueManySQLTx enqueues a batch inside tx, a database/sql transaction (see EnqueueSQLTx).
// On error the batch wrote nothing, and tx is aborted, whether the database or the client
// refused the batch: roll it back.
func (c *Client) EnqueueManySQLTx(ctx context.Context, tx *sql.Tx, events []Event) ([]EnqueueResult, error) {
	// refused aborts tx for err: the database's error aborted it already, but a refusal of the
	// client, or a statement never sent (ctx ended between two), did not.
	refused := func(err error) ([]EnqueueResult, error) {
		refuse(ctx, func(ctx context.Context) {
			_, _ = tx.ExecContext(ctx, store.TxRefuseSQL, store.ModeArgs(c.mode, err.Error())...) // it fails: that aborts tx
		})
		return nil, err
	}
	b, err := c.encodeBatch(events)
	if err == nil {
		err = c.admit(ctx, b)
	}
	if err == nil {
		err = ctx.Err() // a done ctx sends nothing, and so would leave tx as it is
	}
	if err != nil {
		return refused(err)
	}
	rows := make([][]store.EnqueuedJob, len(b.parts))
	for k := range b.parts {
		cols := &b.parts[k].columns
		if len(cols.Keys) == 1 && cols.FirstSeq == nil {
			// an append, or no row and nothing written: then the general path below
			job := store.EnqueuedJob{Ord: 1}
			err := tx.QueryRowContext(ctx, store.JobEnqueueOneSQL, store.ModeArgs(c.mode, cols.OneArgs()...)...).
				Scan(&job.ID)
			if err == nil {
				rows[k] = []store.EnqueuedJob{job}
				continue
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return refused(b.dbError(k, err))
			}
		}
		batchJSON, err := b.parts[k].json()
		if err != nil {
			return refused(err)
		}
		rows[k], err = scanEnqueueRows(tx.QueryContext(ctx, store.JobEnqueueJSONSQL, store.ModeArgs(c.mode, append([]any{string(batchJSON),
			cols.MaxKeyBytesLimit, cols.MaxAttemptsDefault}, cols.SequenceArgs()...)...)...))
		if err != nil {
			return refused(b.dbError(k, err))
		}
	}
	return b.results(rows), nil
}

// wireEvent is an event as ordered_enqueue reads it from JSON.
type wireEvent struct {
	Key         string          `json:"key"`
	Seq         int64           `json:"seq"`
	Kind        string          `json:"kind,omitempty"`
	Payload     json.RawMessage `json:"payload"`
	RunAt       *time.Time      `json:"run_at,omitempty"`
	MaxAttempts int32           `json:"max_attempts"`
}

// json encodes the part for ordered_enqueue, the form database/sql callers send.
func (p *batchPart) json() ([]byte, error) {
	c := &p.columns
	wire := make([]wireEvent, len(c.Keys))
	for i := range wire {
		wire[i] = wireEvent{Key: c.Keys[i], Seq: c.Seqs[i], Kind: c.Kinds[i], Payload: json.RawMessage(c.Payloads[i]),
			RunAt: c.RunAts[i], MaxAttempts: c.MaxAttempts[i]}
	}
	return json.Marshal(wire)
}

func scanEnqueueRows(rows *sql.Rows, err error) ([]store.EnqueuedJob, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.EnqueuedJob
	for rows.Next() {
		var r store.EnqueuedJob
		if err := rows.Scan(&r.Ord, &r.ID, &r.Duplicate); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
