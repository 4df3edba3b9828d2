package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/policy"
)

// An input is read and sent a chunk at a time, all of it in one transaction: a chunk ends at
// EnqueueChunk events or EnqueueChunkBytes of lines, so memory stays bounded whatever the
// input's size.
const (
	EnqueueChunk      = 10_000
	EnqueueChunkBytes = 4 << 20
)

// sequenceFlags are enqueue's flags for the keys it creates: contiguous (gap-aware) or not.
type sequenceFlags struct {
	contiguous bool
	first      int64
	gap        string
	gapTimeout time.Duration
}

// sequence is the policy.Sequence the flags ask for, or an error naming the flag at fault.
func (f *sequenceFlags) sequence() (policy.Sequence, error) {
	actions := map[string]policy.GapAction{"wait": policy.GapWait, "proceed": policy.GapProceed, "block": policy.GapBlock}
	action, ok := actions[f.gap]
	switch {
	case !ok:
		return policy.Sequence{}, fmt.Errorf("--gap %q: want wait, proceed or block", f.gap)
	case !f.contiguous && (f.first != 0 || f.gap != "wait" || f.gapTimeout != 0):
		return policy.Sequence{}, errors.New("--first-seq, --gap and --gap-timeout need --contiguous")
	case !f.contiguous:
		return policy.Sequence{}, nil
	case f.first < 0:
		return policy.Sequence{}, fmt.Errorf("--first-seq %d: must be 0 or more", f.first)
	case action == policy.GapWait && f.gapTimeout != 0:
		return policy.Sequence{}, errors.New("--gap-timeout needs --gap proceed or --gap block")
	case action != policy.GapWait && f.gapTimeout <= 0:
		return policy.Sequence{}, fmt.Errorf("--gap %s needs a positive --gap-timeout", f.gap)
	}
	return policy.Sequence{Contiguous: true, First: f.first, Gap: policy.Gap{Action: action, Timeout: f.gapTimeout}}, nil
}

func (a *app) enqueueCmd() *cobra.Command {
	var seq sequenceFlags
	cmd := &cobra.Command{
		Use:   "enqueue [FILE|-]",
		Short: "Enqueue JSON Lines events from FILE or standard input, all or nothing",
		Long: fmt.Sprintf(`Enqueue reads one event per line:

  {"key":"cust-42","seq":7,"kind":"invoice.paid","payload":{...},"run_at":"2026-01-02T15:04:05Z"}

key and seq are required; kind, payload, run_at (RFC 3339) and max_attempts are optional
(max_attempts absent or 0: %d; a worker's --max-attempts caps it).
run_at is kept to the microsecond, a finer fraction cut (as ordered_enqueue cuts it); its
UTC offset is at most ±15:59, and 0001-01-01T00:00:00Z (which means no run_at) is refused.
Field names are exactly these (lower case), each at most once; another field, or anything
after the object, is an error. Keys and kinds are valid UTF-8 without control characters
(U+0000 to U+001F, U+007F to U+009F); a payload is JSON that PostgreSQL's jsonb stores as
sent: valid UTF-8, no \u0000, no UTF-16 surrogate escape without its pair (such as "\ud800"),
no object naming a member twice (jsonb would keep only the last), no number beyond
PostgreSQL's numeric (such as 1e200000); and at most 1 MiB, both as sent and as PostgreSQL
writes it back to workers (numbers without their exponent, so 1e131071 is 131072 bytes).
Blank lines, and a UTF-8 byte order mark at the start of the input, are skipped.

The input is read and sent in chunks inside one transaction, committed at its end: a bad
line is reported with its line number and nothing from the input is enqueued. SIGINT or
SIGTERM before the end of the input, also while it waits for more, enqueues nothing either.
An event already enqueued, or earlier in the input, with the same key, seq and content
(payload as JSON, kind, run_at, max_attempts) is counted as a duplicate, not an error;
with the same key and seq but other content it is an error, and nothing is enqueued.
An event at or below its key's archived history (see archive) is counted as a duplicate
and not run again: it cannot be compared any more, nor told from one never sent.

With --contiguous, the keys this input creates are contiguous (gap-aware): their seqs run in
an unbroken sequence from --first-seq, an event runs only once every lower seq of its key has
finished, and a missing seq is a gap that holds the key; --gap says what a gap open for
--gap-timeout does (wait: nothing, proceed: pass it, block: hold the key for an operator; see
ordered gaps). A key keeps the mode it was created with: an event for an existing key of the
other mode is an error, and nothing is enqueued, so the events of contiguous keys are always
enqueued with --contiguous; --first-seq, --gap and --gap-timeout apply to the keys the input
creates, and an existing key keeps its own.`, ordered.MaxAttemptsDefault),
		Args: atMostOne("FILE (or - for stdin)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, name := a.stdin, "stdin"
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				in, name = f, args[0]
			}
			sequence, err := seq.sequence()
			if err != nil {
				return err
			}
			return a.enqueue(cmd.Context(), in, name, sequence)
		},
	}
	cmd.Flags().BoolVar(&seq.contiguous, "contiguous", false, "the keys are contiguous (gap-aware): new ones are created so, existing ones must be")
	cmd.Flags().Int64Var(&seq.first, "first-seq", 0, "the first seq of a contiguous key")
	cmd.Flags().StringVar(&seq.gap, "gap", "wait", "what a contiguous key's gap open for --gap-timeout does: wait, proceed or block")
	cmd.Flags().DurationVar(&seq.gapTimeout, "gap-timeout", 0, "how long a gap stays open before --gap proceed or block applies")
	return cmd
}

// enqueue streams the events of in to the queue in one transaction. The input is read apart,
// a chunk ahead, so that a signal (ctx done) ends the command also while it waits for input,
// which it may do for as long as a producer keeps its end open: the transaction, which holds
// the locks of the keys sent so far, is rolled back, and nothing is enqueued.
func (a *app) enqueue(ctx context.Context, in io.Reader, name string, sequence policy.Sequence) error {
	chunks := make(chan eventChunk, 1)
	go newEventReader(in).send(ctx, chunks)
	interrupted := fmt.Errorf("%s: interrupted before the end of the input; nothing was enqueued", name)
	next := func() ([]ordered.Event, []int, error) {
		select {
		case c := <-chunks:
			if ctx.Err() == nil {
				if c.err != nil {
					return nil, nil, fmt.Errorf("%s: %w", name, c.err)
				}
				return c.events, c.lines, nil
			}
		case <-ctx.Done():
		}
		return nil, nil, interrupted
	}
	events, lines, err := next()
	if err != nil {
		return err
	}
	// The queue is checked also for an empty input, as by every queue command: a producer's
	// pipeline that sends nothing yet learns now that its database is not the queue's.
	client, pool, err := a.client(ctx, &ordered.Config{Sequence: policy.AllKeys(sequence)}, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if len(events) == 0 {
		fmt.Fprintf(a.stdout, "no events in %s\n", name)
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after commit
	total, added, dups := 0, 0, 0
	for len(events) > 0 {
		res, err := client.EnqueueManyTx(ctx, tx, events)
		if err != nil && ctx.Err() != nil {
			return interrupted
		}
		if err != nil {
			return lineError(name, traceError(ctx, client, pool, tx, events, err), lines, events, total > 0)
		}
		for _, e := range res {
			if e.Duplicate {
				dups++
			} else {
				added++
			}
		}
		total += len(events)
		if events, lines, err = next(); err != nil {
			return err
		}
	}
	// The whole input is in: a signal now must not leave the commit's outcome unknown.
	if err := tx.Commit(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "enqueued %d events from %s (%d new, %d duplicates)\n", total, name, added, dups)
	return nil
}

// traceError traces err, an error of enqueuing events in tx that names no event, to the event
// that raised it when it is about one event's data (a cast, a limit, such as a number beyond
// PostgreSQL's numeric): tx is rolled back, then locate retries the events in a transaction of
// its own, rolled back too. Such an error does not depend on the events of earlier chunks,
// which that transaction no longer holds; err is returned as it is when no event raises one.
func traceError(ctx context.Context, client *ordered.Client, pool *pgxpool.Pool, tx pgx.Tx,
	events []ordered.Event, err error) error {
	if !isDataError(err) || tx.Rollback(ctx) != nil {
		return err
	}
	trace, beginErr := pool.Begin(ctx)
	if beginErr != nil {
		return err
	}
	defer trace.Rollback(ctx) //nolint:errcheck // nothing of it is kept
	if i, eventErr := locate(ctx, client, trace, events); i >= 0 {
		return &tracedError{index: i, err: eventErr}
	}
	return err
}

// isDataError reports whether err is a database error about the data sent (a data exception, an
// integrity constraint, a program limit), which one event may have raised.
func isDataError(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code[:2] {
	case "22", "23", "54":
		return true
	}
	return false
}

// locate finds the first of events that fails when enqueued after the ones before it, and its
// error, by enqueuing halves under savepoints of tx (about log2(len(events)) statements). It
// returns -1 when no single event fails.
func locate(ctx context.Context, client *ordered.Client, tx pgx.Tx, events []ordered.Event) (int, error) {
	at := 0
	for {
		n := max(len(events)/2, 1)
		sp, err := tx.Begin(ctx)
		if err != nil {
			return -1, err
		}
		_, enqueueErr := client.EnqueueManyTx(ctx, sp, events[:n])
		if enqueueErr == nil {
			if err := sp.Commit(ctx); err != nil || n == len(events) {
				return -1, err
			}
			at, events = at+n, events[n:]
			continue
		}
		if err := sp.Rollback(ctx); err != nil {
			return -1, err
		}
		if n == 1 {
			return at, enqueueErr
		}
		events = events[:n]
	}
}

// tracedError is a database error that locate traced to the event events[index] of a chunk.
type tracedError struct {
	index int
	err   error
}

func (e *tracedError) Error() string { return e.err.Error() }

// lineError names the input line of an enqueue error of the chunk events, whose lines are lines;
// sent: earlier chunks of the input were sent in the same transaction, which the error ends.
func lineError(name string, err error, lines []int, events []ordered.Event, sent bool) error {
	at, msg := -1, err.Error()
	var (
		traced   *tracedError
		invalid  *ordered.InvalidEventError
		conflict *ordered.DuplicateConflictError
		late     *ordered.LateEventError
		mismatch *ordered.SequenceMismatchError
	)
	switch {
	case errors.As(err, &traced):
		at = traced.index
	case errors.As(err, &invalid):
		at, msg = invalid.Index, invalid.Field+": "+invalid.Reason
	case errors.As(err, &conflict):
		at = conflict.Index
		earlier := -1
		if !conflict.Stored && at >= 0 && at < len(events) {
			earlier = slices.IndexFunc(events[:at], func(ev ordered.Event) bool {
				return ev.Key == conflict.Key && ev.Seq == conflict.Seq
			})
		}
		switch {
		case earlier >= 0 && earlier < len(lines):
			msg = fmt.Sprintf("duplicate event with different content: key %q seq %d is given on line %d with a different %s",
				truncateBytes([]byte(conflict.Key), 64), conflict.Seq, lines[earlier], conflict.Field)
		case conflict.Stored && sent:
			// The event it conflicts with may be of an earlier chunk, rolled back with this one.
			msg = fmt.Sprintf("duplicate event with different content: key %q seq %d is given earlier in the input, "+
				"or was enqueued before it, with a different %s", truncateBytes([]byte(conflict.Key), 64), conflict.Seq, conflict.Field)
		}
	case errors.As(err, &late):
		at = slices.IndexFunc(events, func(ev ordered.Event) bool { return ev.Key == late.Key && ev.Seq == late.Seq })
	case errors.As(err, &mismatch):
		at = slices.IndexFunc(events, func(ev ordered.Event) bool { return ev.Key == mismatch.Key })
	}
	msg = strings.TrimPrefix(msg, "ordered: ")
	if at >= 0 && at < len(lines) {
		return fmt.Errorf("%s: line %d: %s; nothing was enqueued", name, lines[at], msg)
	}
	return fmt.Errorf("%s: %s; nothing was enqueued", name, msg)
}
