package ordered

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// GapExpireBatchDefault is how many keys whose gap timed out one maintenance pass acts on.
const GapExpireBatchDefault = 100

// GapsLimitDefault bounds the keys Gaps lists when GapsParams.Limit is 0.
const GapsLimitDefault = 100

// SeqRange is a range of seqs, From to To inclusive.
type SeqRange struct{ From, To int64 }

// GapKey is a contiguous key and the seqs it misses.
type GapKey struct {
	Key string
	// NextSeq is the lowest seq of the key that has neither finished nor been passed.
	NextSeq int64
	// Missing is the key's lowest missing range below an open job; nil when it misses none.
	// While the key waits on a gap, Missing starts at NextSeq.
	Missing *SeqRange
	// Waiting is true when the key waits on the gap: it has open jobs and none may run.
	// Since is when it began to wait; Deadline when its gap policy acts (zero: never).
	Waiting         bool
	Since, Deadline time.Time
	// Blocked is true when the gap policy blocked the key for an operator (at BlockedAt).
	Blocked   bool
	BlockedAt time.Time
	// GapAction is the key's gap policy: "wait", "proceed" or "block".
	GapAction string
	// OpenJobs counts the key's open jobs, Running those of them running.
	OpenJobs, Running int64
}

// PassedGap is a range of seqs that a key passed: by its gap policy's timeout ("timeout") or
// by an operator ("released"). An event in it that arrives afterwards is late.
type PassedGap struct {
	Key      string
	Range    SeqRange
	PassedAt time.Time
	Reason   string
}

// GapsParams select what Gaps lists.
type GapsParams struct {
	// Key lists that one contiguous key, waiting or not; empty lists the keys waiting on a
	// gap, longest waiting first.
	Key string
	// Limit bounds the keys; default GapsLimitDefault.
	Limit int
}

// Gaps lists contiguous keys with the seqs they miss.
func (c *Client) Gaps(ctx context.Context, p GapsParams) ([]GapKey, error) {
	var key *string
	if p.Key != "" {
		key = &p.Key
	}
	rows, err := store.GapList(ctx, c.db, key, cmpOr(p.Limit, GapsLimitDefault))
	if err != nil {
		return nil, fmt.Errorf("ordered: gaps: %w", err)
	}
	out := make([]GapKey, len(rows))
	for i, r := range rows {
		g := GapKey{Key: r.Key, NextSeq: r.NextSeq, GapAction: r.GapAction, OpenJobs: r.OpenJobs, Running: r.Running}
		if r.FromSeq != nil {
			g.Missing = &SeqRange{From: *r.FromSeq, To: *r.ToSeq}
		}
		if r.Since != nil {
			g.Waiting, g.Since = true, *r.Since
		}
		if r.Deadline != nil {
			g.Deadline = *r.Deadline
		}
		if r.BlockedAt != nil {
			g.Blocked, g.BlockedAt = true, *r.BlockedAt
		}
		out[i] = g
	}
	return out, nil
}

// PassedGaps lists the ranges passed as gaps, of key (empty: of every key), latest first, up
// to limit (0: GapsLimitDefault).
func (c *Client) PassedGaps(ctx context.Context, key string, limit int) ([]PassedGap, error) {
	var k *string
	if key != "" {
		k = &key
	}
	rows, err := store.GapPassedList(ctx, c.db, k, cmpOr(limit, GapsLimitDefault))
	if err != nil {
		return nil, fmt.Errorf("ordered: passed gaps: %w", err)
	}
	out := make([]PassedGap, len(rows))
	for i, r := range rows {
		out[i] = PassedGap{Key: r.Key, Range: SeqRange{From: r.FromSeq, To: r.ToSeq}, PassedAt: r.PassedAt, Reason: r.Reason}
	}
	return out, nil
}

// ReleaseGap passes the lowest missing range of a contiguous key now, as its gap policy's
// timeout would: the range is recorded (PassedGaps), the key's later jobs may run, and an event
// of the range that arrives afterwards is late. It may be called before the key waits on the
// gap, while the job before it runs: that claim is unaffected, and once it finishes the key
// moves past the range. ErrNoGap: the key misses no seq below an open job (nothing changed);
// ErrNotContiguous: no contiguous key of that name.
func (c *Client) ReleaseGap(ctx context.Context, key string) (SeqRange, error) {
	return c.releaseGap(ctx, c.db, key)
}

// ReleaseGapTx is ReleaseGap inside tx, so the gap is passed with the caller's own changes or
// not at all. On error tx is aborted, except for ErrNoGap: roll it back. Until tx ends, the key
// is locked: its enqueues and completions wait for tx.
func (c *Client) ReleaseGapTx(ctx context.Context, tx pgx.Tx, key string) (SeqRange, error) {
	return c.releaseGap(ctx, c.in(tx), key)
}

func (c *Client) releaseGap(ctx context.Context, db store.DBTX, key string) (SeqRange, error) {
	from, to, ok, err := store.GapRelease(ctx, db, key)
	if err != nil {
		return SeqRange{}, mapDBError(err)
	}
	if !ok {
		return SeqRange{}, fmt.Errorf("%w: key %q misses no seq below an open job", ErrNoGap, key)
	}
	return SeqRange{From: from, To: to}, nil
}

// ExpireGaps applies the gap policy of up to limit keys whose gap stayed open past its timeout
// (a worker's maintenance does it every pass) and returns how many keys it acted on.
func (c *Client) ExpireGaps(ctx context.Context, limit int) (int, error) {
	n, err := store.GapExpire(ctx, c.db, cmpOr(limit, GapExpireBatchDefault))
	if err != nil {
		return 0, fmt.Errorf("ordered: expire gaps: %w", mapDBError(err))
	}
	return n, nil
}
