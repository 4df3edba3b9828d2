package ordered

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// Event is one event to enqueue. Its key's events run one at a time, in Seq order.
type Event struct {
	// Key groups events that must run in order: a customer, an account, a conversation.
	Key string
	// Seq is the producer's sequence number within Key (0 or more). The pair (Key, Seq) is the
	// event's identity: enqueuing it again is a no-op.
	Seq int64
	// Kind names what the event is, for handlers and operators ("invoice.paid").
	Kind string
	// Payload is the event's JSON document; nil means JSON null.
	Payload json.RawMessage
	// RunAt delays the event; the zero time means now. A delayed event still holds back the
	// later events of its key.
	RunAt time.Time
	// MaxAttempts overrides Config.MaxAttempts for this event when positive.
	MaxAttempts int
}

// EnqueueResult reports what happened to one event.
type EnqueueResult struct {
	// ID is the event's job, new or existing.
	ID int64
	// Duplicate is true when (Key, Seq) was already enqueued: nothing was written.
	Duplicate bool
}

// Enqueue enqueues one event in its own transaction.
func (c *Client) Enqueue(ctx context.Context, ev Event) (EnqueueResult, error) {
	return first(c.EnqueueMany(ctx, []Event{ev}))
}

// EnqueueMany enqueues a batch in one transaction: all of it or, on any error, none of it.
func (c *Client) EnqueueMany(ctx context.Context, events []Event) ([]EnqueueResult, error) {
	return c.enqueue(ctx, c.db, events)
}

// EnqueueTx enqueues one event inside tx, so it commits or rolls back with the caller's own
// changes. Until tx ends, other enqueues and completions of the same key wait for it: keep
// such transactions short.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, ev Event) (EnqueueResult, error) {
	return first(c.EnqueueManyTx(ctx, tx, []Event{ev}))
}

// EnqueueManyTx enqueues a batch inside tx (see EnqueueTx). On error the batch wrote nothing,
// and tx is aborted: roll it back.
func (c *Client) EnqueueManyTx(ctx context.Context, tx pgx.Tx, events []Event) ([]EnqueueResult, error) {
	return c.enqueue(ctx, tx, events)
}

// EnqueueBun enqueues one event through bun: inside db's transaction when db is a bun.Tx,
// else in a transaction of its own. Under Config.Pooler PoolerTransaction, bun must run on
// pgx's database/sql driver (stdlib), which takes the statement's exec mode from its
// arguments.
func (c *Client) EnqueueBun(ctx context.Context, db bun.IDB, ev Event) (EnqueueResult, error) {
	return first(c.EnqueueManyBun(ctx, db, []Event{ev}))
}

// EnqueueManyBun enqueues a batch through bun (see EnqueueBun).
func (c *Client) EnqueueManyBun(ctx context.Context, db bun.IDB, events []Event) ([]EnqueueResult, error) {
	b, err := c.encodeBatch(events)
	if err != nil {
		return nil, err
	}
	batchJSON, err := b.json()
	if err != nil {
		return nil, err
	}
	if err := c.admit(ctx, len(b.unique)); err != nil {
		return nil, err
	}
	run := func(tx *sql.Tx) ([]store.EnqueuedJob, error) {
		return scanEnqueueRows(tx.QueryContext(ctx, store.JobEnqueueJSONSQL, store.ModeArgs(c.mode, string(batchJSON))...))
	}
	var rows []store.EnqueuedJob
	switch tx := db.(type) {
	case bun.Tx:
		rows, err = run(tx.Tx)
	case *bun.Tx:
		rows, err = run(tx.Tx)
	default:
		err = db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
			var err error
			rows, err = run(tx.Tx)
			return err
		})
	}
	if err != nil {
		return nil, mapDBError(err)
	}
	return b.results(rows), nil
}

func (c *Client) enqueue(ctx context.Context, db store.DBTX, events []Event) ([]EnqueueResult, error) {
	b, err := c.encodeBatch(events)
	if err != nil {
		return nil, err
	}
	if err := c.admit(ctx, len(b.unique)); err != nil {
		return nil, err
	}
	rows, err := store.JobEnqueueMany(ctx, c.in(db), &b.columns)
	if err != nil {
		return nil, mapDBError(err)
	}
	return b.results(rows), nil
}

// encodedBatch is a validated batch as sent to the database. An event repeated within the
// batch is sent once; its repeats report the same job, as duplicates.
type encodedBatch struct {
	columns store.EnqueueBatch
	unique  []int // unique[i]: the position in the batch of the i-th event sent
	sentAs  []int // sentAs[i]: the index in unique of event i
}

func (b *encodedBatch) results(rows []store.EnqueuedJob) []EnqueueResult {
	sent := make([]EnqueueResult, len(b.unique))
	for _, r := range rows {
		sent[r.Ord-1] = EnqueueResult{ID: r.ID, Duplicate: r.Duplicate}
	}
	results := make([]EnqueueResult, len(b.sentAs))
	for i, u := range b.sentAs {
		results[i] = sent[u]
		if b.unique[u] != i {
			results[i].Duplicate = true
		}
	}
	return results
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

// json encodes the batch for ordered_enqueue, the form database/sql callers send.
func (b *encodedBatch) json() ([]byte, error) {
	c := &b.columns
	wire := make([]wireEvent, len(c.Keys))
	for i := range wire {
		wire[i] = wireEvent{Key: c.Keys[i], Seq: c.Seqs[i], Kind: c.Kinds[i], Payload: json.RawMessage(c.Payloads[i]),
			RunAt: c.RunAts[i], MaxAttempts: c.MaxAttempts[i]}
	}
	return json.Marshal(wire)
}

// encodeBatch validates events and lays them out for the database. The whole batch is checked
// before anything is sent, so a bad event writes nothing.
func (c *Client) encodeBatch(events []Event) (*encodedBatch, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrInvalidEvent)
	}
	type identity struct {
		key string
		seq int64
	}
	b := &encodedBatch{sentAs: make([]int, len(events))}
	seen := make(map[identity]int, len(events))
	cols := &b.columns
	for i, ev := range events {
		if err := c.validateEvent(i, ev); err != nil {
			return nil, err
		}
		id := identity{ev.Key, ev.Seq}
		if u, ok := seen[id]; ok {
			b.sentAs[i] = u
			continue
		}
		seen[id] = len(b.unique)
		b.sentAs[i] = len(b.unique)
		b.unique = append(b.unique, i)
		payload := string(ev.Payload)
		if payload == "" {
			payload = "null"
		}
		var runAt *time.Time
		if !ev.RunAt.IsZero() {
			t := ev.RunAt.Truncate(time.Microsecond) // PostgreSQL's resolution, on either form
			runAt = &t
		}
		cols.Keys = append(cols.Keys, ev.Key)
		cols.Seqs = append(cols.Seqs, ev.Seq)
		cols.Kinds = append(cols.Kinds, ev.Kind)
		cols.Payloads = append(cols.Payloads, payload)
		cols.RunAts = append(cols.RunAts, runAt)
		cols.MaxAttempts = append(cols.MaxAttempts, int32(cmpOr(ev.MaxAttempts, c.cfg.MaxAttempts)))
	}
	return b, nil
}

func (c *Client) validateEvent(i int, ev Event) error {
	bad := func(field, reason string, args ...any) error {
		return &InvalidEventError{Index: i, Key: ev.Key, Seq: ev.Seq, Field: field, Reason: fmt.Sprintf(reason, args...)}
	}
	switch {
	case ev.Key == "":
		return bad("key", "empty")
	case len(ev.Key) > c.cfg.MaxKeyBytes:
		return bad("key", "%d bytes, over the limit of %d", len(ev.Key), c.cfg.MaxKeyBytes)
	case !utf8.ValidString(ev.Key):
		return bad("key", "not valid UTF-8")
	case strings.ContainsRune(ev.Key, 0):
		return bad("key", "contains a NUL character, which PostgreSQL cannot store")
	case ev.Seq < 0:
		return bad("seq", "negative")
	case !utf8.ValidString(ev.Kind):
		return bad("kind", "not valid UTF-8")
	case strings.ContainsRune(ev.Kind, 0):
		return bad("kind", "contains a NUL character, which PostgreSQL cannot store")
	case len(ev.Kind) > c.cfg.MaxKeyBytes:
		return bad("kind", "%d bytes, over the limit of %d", len(ev.Kind), c.cfg.MaxKeyBytes)
	case !ev.RunAt.IsZero() && (ev.RunAt.Year() < 1 || ev.RunAt.Year() > 9999):
		return bad("run_at", "year %d, outside 1 to 9999", ev.RunAt.Year())
	case ev.MaxAttempts < 0:
		return bad("max_attempts", "negative")
	case ev.MaxAttempts > math.MaxInt32:
		return bad("max_attempts", "%d, over the limit of %d", ev.MaxAttempts, math.MaxInt32)
	case len(ev.Payload) > c.cfg.MaxPayloadBytes:
		return bad("payload", "%d bytes, over the limit of %d", len(ev.Payload), c.cfg.MaxPayloadBytes)
	case len(ev.Payload) > 0 && !json.Valid(ev.Payload):
		return bad("payload", "not valid JSON")
	case hasEscapedNUL(ev.Payload):
		return bad("payload", `contains \u0000, which PostgreSQL's jsonb cannot store`)
	}
	return nil
}

// hasEscapedNUL reports whether valid JSON holds the escape \u0000 in a string.
func hasEscapedNUL(payload []byte) bool {
	for i := 0; ; {
		j := bytes.Index(payload[i:], []byte(`\u0000`))
		if j < 0 {
			return false
		}
		at := i + j
		backslashes := 0
		for k := at - 1; k >= 0 && payload[k] == '\\'; k-- {
			backslashes++
		}
		if backslashes%2 == 0 { // the backslash of \u0000 is not itself escaped
			return true
		}
		i = at + 1
	}
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

func first(results []EnqueueResult, err error) (EnqueueResult, error) {
	if err != nil {
		return EnqueueResult{}, err
	}
	return results[0], nil
}

func cmpOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// Validate checks events as an enqueue would, without writing anything. The error is an
// *InvalidEventError naming the first bad event.
func (c *Client) Validate(events []Event) error {
	_, err := c.encodeBatch(events)
	return err
}
