package ordered

import "time"

// AssumeSlowHandlers makes w take its handlers for far slower than a claim, as if each had
// held its slot for an hour, so that it claims only for free slots (no prefetch) whatever the
// machine's load makes of the averages. Each slot hold moves the average an eighth toward
// the hold, and a claim gives up after claimTimeout: it holds for the tens of jobs a test runs.
func AssumeSlowHandlers(w *Worker) { w.slotTime.Store(int64(time.Hour)) }

// MapDBError is mapDBError, for comparing the errors the database raises with the client's.
func MapDBError(err error) error { return mapDBError(err) }

// CopyEveryBatch makes c write every batch in the default mode with COPY when its events are
// appends, however small, so that the enqueue tests can run through that path too.
func CopyEveryBatch(c *Client) { c.copyMinEvents = 1 }

// BatchesCopied is how many batch parts c wrote with COPY.
func BatchesCopied(c *Client) int64 { return c.copied.Load() }
