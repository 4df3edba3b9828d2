package ordered

import (
	"errors"
	"fmt"
)

// ErrLeaseLost occurs when a completion, renewal, retry or failure is made for a claim that is
// no longer current: its lease expired, or the job was claimed again by another worker. Nothing
// was changed; the caller must stop working on the job and must not treat it as done.
var ErrLeaseLost = errors.New("ordered: lease lost: the job was reclaimed or its lease expired")

// ErrInvalidEvent occurs when an event cannot be enqueued as given; the error is an
// *InvalidEventError that names the event and the problem (or, for an empty batch, wraps
// ErrInvalidEvent itself).
var ErrInvalidEvent = errors.New("ordered: invalid event")

// ErrLateEvent occurs when an event's seq is below a job of the same key that has already
// started or finished: running it now would break the key's order. The error is a
// *LateEventError.
var ErrLateEvent = errors.New("ordered: late event")

// ErrDuplicateConflict occurs when an event's (Key, Seq) is already stored (queued, running,
// done or failed), or appears earlier in the same batch, with different content (payload by
// JSON equality, kind, run_at or max_attempts after defaults). The error is a
// *DuplicateConflictError. An identical duplicate is no error: it is a no-op.
var ErrDuplicateConflict = errors.New("ordered: duplicate event with different content")

// ErrNoPool is returned by a method that needs the Client's pool when NewClient was given none.
var ErrNoPool = errors.New("ordered: the client has no pool (NewClient was given nil): only the enqueues in a caller's transaction work")

// ErrNotFailed occurs when a replay or skip names a job that does not exist or has not failed.
var ErrNotFailed = errors.New("ordered: not a failed job")

// ErrReplayOutOfOrder occurs when a replay would run a job after later jobs of its key that
// already ran. Replay with force to accept that.
var ErrReplayOutOfOrder = errors.New("ordered: replay would run out of order")

// ErrLaterJobRunning occurs when a replay is asked while a later job of the key is running;
// two jobs of one key never run at once, so wait until it has finished.
var ErrLaterJobRunning = errors.New("ordered: a later job of the key is running")

// ErrSequenceMismatch occurs when events are enqueued for a key in another sequence mode than
// the key was created with (contiguous or not, see Config.Sequence): nothing was written. A
// key keeps its mode for good.
var ErrSequenceMismatch = errors.New("ordered: sequence mode mismatch")

// SequenceMismatchError is ErrSequenceMismatch for one key: Contiguous is the mode the key was
// created with.
type SequenceMismatchError struct {
	Key        string
	Contiguous bool
	msg        string
}

func (e *SequenceMismatchError) Error() string { return e.msg }

// Is reports whether target is ErrSequenceMismatch.
func (e *SequenceMismatchError) Is(target error) bool { return target == ErrSequenceMismatch }

// ErrNotContiguous occurs when a gap is released for a key that does not exist or is not
// contiguous.
var ErrNotContiguous = errors.New("ordered: not a contiguous key")

// ErrNoGap occurs when a gap is released for a contiguous key that misses no seq below an
// open job: nothing changed.
var ErrNoGap = errors.New("ordered: the key has no gap")

// ErrBacklogFull occurs when an enqueue would take the queue past Config.MaxBacklog queued jobs;
// nothing was written. Retry later, or shed load.
var ErrBacklogFull = errors.New("ordered: backlog full")

// InvalidEventError is returned for an event that cannot be enqueued; nothing of its batch was
// written. The client checks events before it sends them, and the database checks them again
// by the same rules (SQLSTATE ORD07, see docs/sql.md): either way the error is this one.
type InvalidEventError struct {
	// Index is the event's position in its batch, from 0 (-1 when the database did not name
	// it).
	Index int
	Key   string
	Seq   int64
	// Field is the offending field: "key", "seq", "kind", "payload", "run_at",
	// "max_attempts"; from the database's JSON form also an unknown field's name, or "" for
	// an element that is not an event object.
	Field  string
	Reason string
}

// Error names the event by its index, key and seq, and the field at fault.
func (e *InvalidEventError) Error() string {
	field := e.Field + ": "
	if e.Field == "" {
		field = ""
	}
	return fmt.Sprintf("ordered: invalid event at index %d (key %q, seq %d): %s%s",
		e.Index, truncate(e.Key, 64), e.Seq, field, e.Reason)
}

// Is reports whether target is ErrInvalidEvent.
func (e *InvalidEventError) Is(target error) bool { return target == ErrInvalidEvent }

// LateEventError is returned when an event arrives after a later event of its key has
// started; nothing of its batch was written. An event at or below the key's archived history
// is not late: it is taken as archived (EnqueueResult.Archived).
type LateEventError struct {
	Key string
	Seq int64
	// LaterSeq is the seq of the job that already started, or -1 when the database did not
	// name it; for a contiguous key, the key's next seq.
	LaterSeq int64
	// Contiguous is set for an event of a contiguous key below its next seq: every seq below
	// that one has finished, was passed as a gap, or is below the key's first seq.
	Contiguous bool
}

// Error names the key, the late seq and, when known, the later seq that already started or
// the contiguous key's next seq.
func (e *LateEventError) Error() string {
	if e.Contiguous {
		return fmt.Sprintf("ordered: late event: key %q seq %d is below the key's next seq %d "+
			"(every seq before it has finished, was passed as a gap, or is below the key's first seq)",
			truncate(e.Key, 64), e.Seq, e.LaterSeq)
	}
	if e.LaterSeq < 0 {
		return fmt.Sprintf("ordered: late event: key %q seq %d arrived after a later event of the key had already started",
			truncate(e.Key, 64), e.Seq)
	}
	return fmt.Sprintf("ordered: late event: key %q seq %d arrived after seq %d had already started",
		truncate(e.Key, 64), e.Seq, e.LaterSeq)
}

// Is reports whether target is ErrLateEvent.
func (e *LateEventError) Is(target error) bool { return target == ErrLateEvent }

// DuplicateConflictError is returned for an event whose (Key, Seq) is already taken by an
// event with different content; nothing of its batch was written. Of two transactions that
// enqueue the same (Key, Seq) with different contents at once, the second waits for the first
// and gets this error once the first commits (under REPEATABLE READ or SERIALIZABLE a
// serialization failure, and this error when retried).
type DuplicateConflictError struct {
	// Index is the event's position in its batch, from 0 (-1 when the database did not name
	// it).
	Index int
	Key   string
	Seq   int64
	// Field is the first field that differs: "payload", "kind", "run_at" or "max_attempts".
	Field string
	// Stored is true when the other event is already stored, false when it came earlier in
	// the same batch.
	Stored bool
}

// Error names the event, the field that differs and where the other event is.
func (e *DuplicateConflictError) Error() string {
	where := "earlier in the same batch"
	if e.Stored {
		where = "already enqueued"
	}
	return fmt.Sprintf("ordered: duplicate event with different content: key %q seq %d is %s with a different %s",
		truncate(e.Key, 64), e.Seq, where, e.Field)
}

// Is reports whether target is ErrDuplicateConflict.
func (e *DuplicateConflictError) Is(target error) bool { return target == ErrDuplicateConflict }

// permanentError marks a handler error that must not be retried.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the job fails at once, without further attempts; the failure
// policy then decides what happens to its key.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
