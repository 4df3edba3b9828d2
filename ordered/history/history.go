// Package history checks what a run of handlers did against the guarantees of ordered, the
// way Jepsen checks a queue: from a record of the events enqueued, the attempts that started,
// the effects that took hold and the jobs' final states, it counts lost jobs, duplicated
// effects, re-executions and order inversions.
//
// Record with the database's clock (clock_timestamp()), as ordered does, so that times from
// different processes compare:
//
//   - a Start when a handler begins an attempt (in its own statement, so it survives the
//     attempt's failure);
//   - an Effect when the handler's effect takes hold: for a transactional handler, in the
//     transaction that completes the job (ordered.TxHandlerFunc), so it exists only if the
//     completion committed; for an at-least-once handler, wherever the effect is applied;
//   - each job's final Status and FinishedAt, read from ordered_jobs at the end.
package history

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
)

// ID is an event's identity.
type ID struct {
	Key string
	Seq int64
}

// String is "key/seq".
func (id ID) String() string { return fmt.Sprintf("%s/%d", id.Key, id.Seq) }

// Start is an attempt that began.
type Start struct {
	ID
	ClaimVersion int64
	At           time.Time
	// Batch identifies the batch claim the attempt ran under (a batch worker's), if any. A
	// batch's jobs run one after the other in one handler and are completed together, so an
	// event may start before an earlier event finished if that one started in the same batch
	// before it.
	Batch string
}

// Effect is a handler's effect that took hold. Order is the effect's position in the order
// effects were recorded (a sequence, or a serial column); within a key it is commit order,
// since a key's next job cannot start before the previous one's completion commits.
type Effect struct {
	ID
	ClaimVersion int64
	Order        int64
	// Batch identifies the batch claim the effect was applied under, if any (see
	// Start.Batch). A batch whose completion never committed runs again from its first
	// unfinished job, so an at-least-once effect may land before a replayed effect of an
	// earlier event if that event's effect landed in the same batch before it.
	Batch string
}

// Job is an enqueued event's final state: its status in ordered_jobs (queued, running, done,
// failed or blocked) and, when it finished, when.
type Job struct {
	ID
	Status     string
	FinishedAt time.Time
}

// History is what a run recorded.
type History struct {
	Enqueued []ID
	Jobs     []Job
	Starts   []Start
	Effects  []Effect
	// ExpectedFailures are the events meant to fail for good (poison); any other failure is
	// reported as unexpected.
	ExpectedFailures []ID
}

// Report is the outcome of Check.
type Report struct {
	Enqueued  int
	Completed int
	// Failed counts jobs failed for good (failed or blocked); Unexpected those not expected.
	Failed, UnexpectedFailures int
	// Held counts jobs waiting behind a blocked job of their key: not lost, held by policy.
	Held int
	// Lost counts enqueued events that never finished, were not failed and are not held.
	Lost int
	// DuplicateEffects counts effects beyond the first of an event.
	DuplicateEffects int
	// ReExecutions counts attempts beyond the first of an event (allowed: at-least-once).
	ReExecutions int
	// OrderInversions counts a key's later event starting before an earlier one finished, or
	// running while the key is blocked, or its effect landing before an earlier one's.
	OrderInversions int
	// Problems describes the anomalies, a line each (the first 20).
	Problems []string
}

// Clean reports whether the run kept every guarantee: nothing lost, no order inversion, no
// unexpected failure, and (when transactional is true) no duplicated effect.
func (r *Report) Clean(transactional bool) bool {
	return r.Lost == 0 && r.OrderInversions == 0 && r.UnexpectedFailures == 0 &&
		(!transactional || r.DuplicateEffects == 0)
}

const maxProblems = 20

func (r *Report) problem(format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Check checks a history.
func Check(h History) Report {
	r := Report{Enqueued: len(h.Enqueued)}
	jobs := make(map[ID]Job, len(h.Jobs))
	for _, j := range h.Jobs {
		jobs[j.ID] = j
	}
	expected := make(map[ID]bool, len(h.ExpectedFailures))
	for _, id := range h.ExpectedFailures {
		expected[id] = true
	}
	starts := make(map[ID][]Start)
	for _, s := range h.Starts {
		starts[s.ID] = append(starts[s.ID], s)
	}
	effects := make(map[ID][]Effect)
	for _, e := range h.Effects {
		effects[e.ID] = append(effects[e.ID], e)
	}

	// Each key's events in seq order.
	byKey := make(map[string][]ID)
	for _, id := range h.Enqueued {
		byKey[id.Key] = append(byKey[id.Key], id)
	}
	for _, ids := range byKey {
		slices.SortFunc(ids, func(a, b ID) int { return cmp.Compare(a.Seq, b.Seq) })
	}

	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		r.checkKey(byKey[key], jobs, starts, effects, expected)
	}
	return r
}

func (r *Report) checkKey(ids []ID, jobs map[ID]Job, starts map[ID][]Start, effects map[ID][]Effect, expected map[ID]bool) {
	var (
		finishedBy time.Time // the latest finish of the key's earlier events
		blockedBy  *ID       // an earlier event blocking the key
		lastEffect = Effect{Order: -1}
		prior      []priorEvent
		// the effects of the key's earlier events, event by event
		priorEffects [][]Effect
	)
	for _, id := range ids {
		job, ok := jobs[id]
		ss := starts[id]
		es := effects[id]
		if len(ss) > 1 {
			r.ReExecutions += len(ss) - 1
		}
		if len(es) > 1 {
			r.DuplicateEffects += len(es) - 1
			r.problem("%s: effect applied %d times", id, len(es))
		}

		// Order: no attempt before every earlier event finished, none while the key is blocked.
		for _, s := range ss {
			switch {
			case blockedBy != nil:
				r.OrderInversions++
				r.problem("%s started although %s blocks the key", id, *blockedBy)
			case s.At.Before(finishedBy) && !startedInBatch(prior, s):
				r.OrderInversions++
				r.problem("%s started at %s, before an earlier event of the key finished at %s",
					id, s.At.Format(time.RFC3339Nano), finishedBy.Format(time.RFC3339Nano))
			}
		}
		// Every effect of this event must land after every effect of the earlier ones (but
		// for the replays of a batch).
		for _, e := range es {
			if e.Order < lastEffect.Order && !replayedAfterBatch(priorEffects, e) {
				r.OrderInversions++
				r.problem("%s's effect landed before %s's", id, lastEffect.ID)
				break
			}
		}
		priorEffects = append(priorEffects, es)
		for _, e := range es {
			if e.Order > lastEffect.Order {
				lastEffect = e
			}
		}

		switch {
		case !ok:
			r.Lost++
			r.problem("%s was enqueued but has no job", id)
		case job.Status == "done":
			r.Completed++
			if len(es) == 0 {
				r.Lost++
				r.problem("%s is done but its effect is missing", id)
			}
		case job.Status == "failed" || job.Status == "blocked":
			r.Failed++
			if !expected[id] {
				r.UnexpectedFailures++
				r.problem("%s failed (%s) unexpectedly", id, job.Status)
			}
			if len(es) > 0 {
				r.problem("%s failed but has an effect", id)
			}
		case blockedBy != nil:
			r.Held++
		default:
			r.Lost++
			r.problem("%s never finished (status %s)", id, job.Status)
		}

		if ok && job.Status == "blocked" && blockedBy == nil {
			b := id
			blockedBy = &b
		}
		if ok && (job.Status == "done" || job.Status == "failed") && job.FinishedAt.After(finishedBy) {
			finishedBy = job.FinishedAt
		}
		if ok && (job.Status == "done" || job.Status == "failed") {
			prior = append(prior, priorEvent{finished: job.FinishedAt, starts: ss})
		}
	}
}

// priorEvent is an earlier event of a key, as startedInBatch needs it.
type priorEvent struct {
	finished time.Time
	starts   []Start
}

// startedInBatch reports whether s is a batch's start that every earlier event finishing
// after it preceded in the same batch.
func startedInBatch(prior []priorEvent, s Start) bool {
	if s.Batch == "" {
		return false
	}
	for _, p := range prior {
		if !p.finished.After(s.At) {
			continue
		}
		if !slices.ContainsFunc(p.starts, func(ps Start) bool { return ps.Batch == s.Batch && !ps.At.After(s.At) }) {
			return false
		}
	}
	return true
}

// replayedAfterBatch reports whether e is a batch's effect that every earlier event's effect
// landing after it follows an effect of that event in the same batch, before e: a replay.
func replayedAfterBatch(prior [][]Effect, e Effect) bool {
	if e.Batch == "" {
		return false
	}
	for _, es := range prior {
		if !slices.ContainsFunc(es, func(f Effect) bool { return f.Order > e.Order }) {
			continue
		}
		if !slices.ContainsFunc(es, func(f Effect) bool { return f.Batch == e.Batch && f.Order < e.Order }) {
			return false
		}
	}
	return true
}
