package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
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

// MaxLineBytes bounds one JSON Lines line, its line end aside: the CLI's payload limit (the
// library's default) plus room for the rest of the event.
const MaxLineBytes = ordered.MaxPayloadBytesDefault + 64<<10

// utf8BOM is skipped at the start of an input.
var utf8BOM = []byte("\xef\xbb\xbf")

// eventFields are the fields of an event line, named exactly so.
var eventFields = [...]string{"key", "seq", "kind", "payload", "run_at", "max_attempts"}

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

// eventReader reads JSON Lines events a chunk at a time.
type eventReader struct {
	sc   *bufio.Scanner
	line int // the number of the last line read
}

func newEventReader(in io.Reader) *eventReader {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes+len("\r\n")) // a line at the limit, and its end
	return &eventReader{sc: sc}
}

// next reads the next chunk of events, none at the end of the input; lines[i] is the line of
// events[i]. Blank lines are skipped.
func (r *eventReader) next() (events []ordered.Event, lines []int, err error) {
	for size := 0; len(events) < EnqueueChunk && size < EnqueueChunkBytes && r.sc.Scan(); {
		r.line++
		line := r.sc.Bytes() // without its line end
		if len(line) > MaxLineBytes {
			return nil, nil, lineTooLong(r.line)
		}
		raw := line
		if r.line == 1 {
			raw = bytes.TrimPrefix(raw, utf8BOM)
		}
		raw = bytes.TrimLeft(raw, " \t\r") // JSON's whitespace; the scanner took the newline
		lead := len(line) - len(raw)
		raw = bytes.TrimRight(raw, " \t\r")
		if len(raw) == 0 {
			continue
		}
		ev, err := parseEvent(raw, lead)
		if err != nil {
			return nil, nil, fmt.Errorf("line %d: %w; nothing was enqueued", r.line, err)
		}
		events = append(events, ev)
		lines = append(lines, r.line)
		size += len(raw)
	}
	if err := r.sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, nil, lineTooLong(r.line + 1)
		}
		return nil, nil, err
	}
	return events, lines, nil
}

// lineTooLong is the error of a line longer than MaxLineBytes.
func lineTooLong(line int) error {
	return fmt.Errorf("line %d: longer than %d bytes; nothing was enqueued", line, MaxLineBytes)
}

// eventChunk is one chunk of events as eventReader.next returns it.
type eventChunk struct {
	events []ordered.Event
	lines  []int
	err    error
}

// send sends the chunks of the input on out, up to the first that is empty (the end) or
// fails, or until ctx is done.
func (r *eventReader) send(ctx context.Context, out chan<- eventChunk) {
	for {
		events, lines, err := r.next()
		select {
		case out <- eventChunk{events, lines, err}:
		case <-ctx.Done():
			return
		}
		if err != nil || len(events) == 0 {
			return
		}
	}
}

// readEvents reads a whole input into memory, for the demo's small files.
func readEvents(in io.Reader) ([]ordered.Event, []int, error) {
	r := newEventReader(in)
	var events []ordered.Event
	var lines []int
	for {
		chunk, chunkLines, err := r.next()
		if err != nil || len(chunk) == 0 {
			return events, lines, err
		}
		events, lines = append(events, chunk...), append(lines, chunkLines...)
	}
}

// parseEvent decodes one line strictly: one JSON object whose field names are eventFields
// exactly (encoding/json alone would match "KEY" to key and let a repeated field overwrite
// the first), nothing after it. raw starts at byte lead of its line: a syntax error names the
// column of the line where it is, and the field whose value it is in.
func parseEvent(raw []byte, lead int) (ordered.Event, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	invalid := func(err error) error { return fmt.Errorf("not a valid event object%s", syntaxProblem(raw, lead, err)) }
	if tok, err := dec.Token(); err != nil {
		return ordered.Event{}, invalid(err)
	} else if tok != json.Delim('{') {
		return ordered.Event{}, invalid(errors.New("not an object"))
	}
	var values [len(eventFields)]json.RawMessage
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ordered.Event{}, invalid(err)
		}
		name, _ := tok.(string) // inside an object, Token returns names as strings
		i := slices.Index(eventFields[:], name)
		switch {
		case i < 0:
			return ordered.Event{}, fmt.Errorf("unknown field %q", truncateBytes([]byte(name), 64))
		case values[i] != nil:
			return ordered.Event{}, fmt.Errorf("field %q given twice", name)
		}
		if err := dec.Decode(&values[i]); err != nil {
			return ordered.Event{}, fmt.Errorf("%s: not valid JSON%s", name, syntaxProblem(raw, lead, err))
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return ordered.Event{}, invalid(err)
	}
	if _, err := dec.Token(); err == nil {
		return ordered.Event{}, errors.New("more than one JSON value on the line")
	} else if err != io.EOF {
		return ordered.Event{}, fmt.Errorf("data after the event object: %v", err)
	}
	return eventOf(values)
}

// syntaxProblem says where in its line, raw starting at byte lead of it, the syntax error err
// of encoding/json is, and what it is: " at column N (the place in the field's value as a JSON
// Pointer, when it is within one): problem". encoding/json's offsets count from where a value's
// decoding began, so the place is found again with jsontext, read as leniently (invalid UTF-8
// and repeated names are refused apart).
func syntaxProblem(raw []byte, lead int, err error) string {
	var syn *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return ": the line ends before its JSON does"
	case !errors.As(err, &syn):
		return ": " + err.Error()
	}
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowInvalidUTF8(true), jsontext.AllowDuplicateNames(true))
	for {
		_, readErr := dec.ReadToken()
		var located *jsontext.SyntacticError
		switch {
		case errors.As(readErr, &located):
			where := fmt.Sprintf(" at column %d", int64(lead)+located.ByteOffset+1)
			if p := located.JSONPointer; strings.Count(string(p), "/") > 1 {
				where += " (" + truncateBytes([]byte(p), 64) + ")"
			}
			return where + ": " + located.Err.Error()
		case readErr != nil:
			return ": " + err.Error()
		}
	}
}

// eventOf makes an event of its fields' JSON values, by eventFields; a null is an absent field.
func eventOf(values [len(eventFields)]json.RawMessage) (ordered.Event, error) {
	present := func(v json.RawMessage) bool { return v != nil && string(v) != "null" }
	key, seq, kind, payload, runAt, maxAttempts := values[0], values[1], values[2], values[3], values[4], values[5]
	var ev ordered.Event
	var err error
	if !present(key) {
		return ev, errors.New("missing key")
	}
	if ev.Key, err = jsonString(key); err != nil {
		return ev, fmt.Errorf("key: %w", err)
	}
	if !present(seq) {
		return ev, errors.New("missing seq")
	}
	if ev.Seq, err = strconv.ParseInt(string(seq), 10, 64); errors.Is(err, strconv.ErrRange) {
		return ev, fmt.Errorf("seq %s is out of range (0 to %d)", truncateBytes(seq, 32), int64(math.MaxInt64))
	} else if err != nil {
		return ev, fmt.Errorf("seq %s is not an integer", truncateBytes(seq, 32))
	}
	if present(kind) {
		if ev.Kind, err = jsonString(kind); err != nil {
			return ev, fmt.Errorf("kind: %w", err)
		}
	}
	ev.Payload = payload // checked by the library, which names the payload
	if present(runAt) {
		if err := json.Unmarshal(runAt, &ev.RunAt); err != nil {
			return ev, fmt.Errorf("run_at %s is not an RFC 3339 time", truncateBytes(runAt, 40))
		}
		if _, offset := ev.RunAt.Zone(); offset <= -16*3600 || offset >= 16*3600 {
			return ev, fmt.Errorf("run_at %s: its UTC offset is beyond ±15:59, which PostgreSQL refuses", truncateBytes(runAt, 40))
		}
		if ev.RunAt.IsZero() {
			return ev, fmt.Errorf("run_at %s: the earliest time there is, which the client takes for no run_at; "+
				"give a later time or none", truncateBytes(runAt, 40))
		}
	}
	if present(maxAttempts) {
		n, err := strconv.ParseInt(string(maxAttempts), 10, 64)
		switch {
		case errors.Is(err, strconv.ErrRange) || n > math.MaxInt32:
			return ev, fmt.Errorf("max_attempts %s is out of range (at most %d)", truncateBytes(maxAttempts, 32), math.MaxInt32)
		case err != nil:
			return ev, fmt.Errorf("max_attempts %s is not an integer", truncateBytes(maxAttempts, 32))
		}
		ev.MaxAttempts = int(n)
	}
	return ev, nil
}

// jsonString decodes a JSON string, refusing the text that encoding/json would replace with
// U+FFFD (invalid UTF-8, a UTF-16 surrogate escape without its pair): two different keys must
// not become one.
func jsonString(raw json.RawMessage) (string, error) {
	if raw[0] != '"' {
		return "", errors.New("not a string")
	}
	if !utf8.Valid(raw) {
		return "", errors.New("not valid UTF-8")
	}
	if r := loneSurrogate(raw); r >= 0 {
		return "", fmt.Errorf(`contains \u%04x, a UTF-16 surrogate without its pair`, r)
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}

// loneSurrogate is the first UTF-16 surrogate escape of the JSON string s that is not a high
// one followed by a low one, or -1.
func loneSurrogate(s []byte) int {
	hex := func(i int) int { // the escape \uXXXX at s[i:], or -1
		if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
			return -1
		}
		n, err := strconv.ParseUint(string(s[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return int(n)
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		r := hex(i)
		switch {
		case r < 0: // another escape: skip its character
			i++
		case r >= 0xD800 && r <= 0xDBFF:
			if low := hex(i + 6); low < 0xDC00 || low > 0xDFFF {
				return r
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return r
		default:
			i += 5
		}
	}
	return -1
}

// truncateBytes is b cut to at most n bytes, on a character boundary, for an error message.
func truncateBytes(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "..."
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
