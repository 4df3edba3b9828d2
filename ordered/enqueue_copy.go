package ordered

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/orderedq/ordered/ordered/internal/store"
)

// copyMinEvents is the size from which a batch in the default mode is written with COPY when
// every event of it is an append (above everything its key has): below it, the extra round
// trips (and a transaction of its own, for EnqueueMany) cost about what COPY saves.
const copyMinEvents = 100

// copies reports whether part is written with COPY when its events are appends, for a batch
// part from min events.
func (p batchPart) copies(min int) bool {
	return !p.sequence.Contiguous && len(p.columns.Keys) >= min
}

// enqueueByCopy writes part in tx with COPY if every event of it is an append, and reports
// false, having written nothing but its key rows, if some event is not. An append is no
// duplicate and not late, and the lowest event of a key with no open job is its head, which
// ordered_enqueue_append_prepare decides with the key rows locked, as ordered_enqueue_events
// would. The key rows stay locked until tx ends, so what it decided holds for the COPY.
func enqueueByCopy(ctx context.Context, tx pgx.Tx, db store.DBTX, cols *store.EnqueueBatch) ([]store.EnqueuedJob, bool, error) {
	// The keys once each, with the lowest and highest seq of their events. A part holds each
	// (key, seq) once (encodeBatch), so a key's lowest seq names one event.
	of := make(map[string]int)
	var keys []string
	var mins, maxs []int64
	var runAts []*time.Time
	for i, key := range cols.Keys {
		seq := cols.Seqs[i]
		k, ok := of[key]
		switch {
		case !ok:
			of[key] = len(keys)
			keys, mins, maxs, runAts = append(keys, key), append(mins, seq), append(maxs, seq), append(runAts, cols.RunAts[i])
		case seq < mins[k]:
			mins[k], runAts[k] = seq, cols.RunAts[i]
		case seq > maxs[k]:
			maxs[k] = seq
		}
	}
	plan, err := store.JobAppendPrepare(ctx, db, keys, mins, maxs, runAts, len(cols.Keys))
	if err != nil || !plan.Appends {
		return nil, false, err
	}
	// The rows go in (key, seq) order, as ordered_enqueue_events inserts them: a key's jobs
	// side by side in the table, and its index entries added in order.
	order := make([]int, len(cols.Keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(strings.Compare(cols.Keys[a], cols.Keys[b]), cmp.Compare(cols.Seqs[a], cols.Seqs[b]))
	})
	rows := make([][]any, len(cols.Keys))
	jobs := make([]store.EnqueuedJob, len(cols.Keys))
	for r, i := range order {
		key := cols.Keys[i]
		k := of[key]
		availableAt := plan.Now
		if cols.RunAts[i] != nil {
			availableAt = *cols.RunAts[i]
		}
		head := !plan.Open[k] && cols.Seqs[i] == mins[k]
		rows[r] = []any{plan.IDs[r], key, cols.Seqs[i], cols.Kinds[i], cols.Payloads[i], availableAt,
			cols.MaxAttempts[i], cols.RunAts[i], head}
		jobs[i] = store.EnqueuedJob{Ord: i + 1, ID: plan.IDs[r]}
	}
	if err := store.JobAppendCopy(ctx, tx, rows); err != nil {
		return nil, false, err
	}
	return jobs, true, nil
}
