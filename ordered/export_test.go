package ordered

import "time"

// AssumeSlowHandlers makes w take its handlers for far slower than a claim, as if each had
// held its slot for an hour, so that it claims only for free slots (no prefetch) whatever the
// machine's load makes of the averages. Each slot hold moves the average an eighth toward
// the hold, and a claim gives up after claimTimeout: it holds for the tens of jobs a test runs.
func AssumeSlowHandlers(w *Worker) { w.slotTime.Store(int64(time.Hour)) }

// MapDBError is mapDBError, for comparing the errors the database raises with the client's.
func MapDBError(err error) error { return mapDBError(err) }
