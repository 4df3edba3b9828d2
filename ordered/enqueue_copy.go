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
// ordered_enqueue_append_prepare decides and writes with the key rows locked, as
// ordered_enqueue_events would. The key rows stay locked until tx ends, so what it decided
// holds for the COPY.
func enqueueByCopy(ctx context.Context, tx pgx.Tx, db store.DBTX, cols *store.EnqueueBatch) ([]store.EnqueuedJob, bool, error) {
	// The rows go in (key, seq) order, as ordered_enqueue_events inserts them: a key's jobs
	// side by side in the table, and its index entries added in order. Keys compare as bytes,
	// as the schema's keys do (COLLATE "C").
	order := make([]int, len(cols.Keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(strings.Compare(cols.Keys[a], cols.Keys[b]), cmp.Compare(cols.Seqs[a], cols.Seqs[b]))
	})
	// The keys once each, in that order, with the lowest and highest seq of their events, the
	// run_at and max_attempts of the lowest, and their number of events. A part holds each
	// (key, seq) once (encodeBatch), so a key's lowest seq names one event.
	var keys []string
	var mins, maxs []int64
	var runAts []*time.Time
	var maxAttempts, counts []int32
	for _, i := range order {
		if n := len(keys); n > 0 && keys[n-1] == cols.Keys[i] {
			maxs[n-1] = cols.Seqs[i]
			counts[n-1]++
			continue
		}
		keys, mins, maxs = append(keys, cols.Keys[i]), append(mins, cols.Seqs[i]), append(maxs, cols.Seqs[i])
		runAts, maxAttempts, counts = append(runAts, cols.RunAts[i]), append(maxAttempts, cols.MaxAttempts[i]), append(counts, 1)
	}
	plan, err := store.JobAppendPrepare(ctx, db, keys, mins, maxs, runAts, maxAttempts, counts, len(cols.Keys))
	if err != nil || !plan.Appends {
		return nil, false, err
	}
	rows := make([][]any, len(cols.Keys))
	jobs := make([]store.EnqueuedJob, len(cols.Keys))
	for r, i := range order {
		availableAt := plan.Now
		if cols.RunAts[i] != nil {
			availableAt = *cols.RunAts[i]
		}
		rows[r] = []any{plan.IDs[r], cols.Keys[i], cols.Seqs[i], cols.Kinds[i], cols.Payloads[i], availableAt,
			cols.MaxAttempts[i], cols.RunAts[i]}
		jobs[i] = store.EnqueuedJob{Ord: i + 1, ID: plan.IDs[r]}
	}
	if err := store.JobAppendCopy(ctx, tx, rows); err != nil {
		return nil, false, err
	}
	return jobs, true, nil
}
