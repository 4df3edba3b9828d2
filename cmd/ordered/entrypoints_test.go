package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// The entry points of an enqueue: the Go client, the CLI on a JSON Lines file, and the two SQL
// functions called as a producer in another language calls them.
const (
	viaGo      = "go"       // Client.EnqueueMany
	viaCLI     = "cli"      // the CLI: ordered enqueue FILE
	viaSQLJSON = "sql-json" // SELECT * FROM ordered_enqueue($1::jsonb)
	viaSQLRows = "sql-rows" // SELECT * FROM ordered_enqueue_events(ordered_event[])
)

var entryPoints = []string{viaGo, viaCLI, viaSQLJSON, viaSQLRows}

// entryAnswer is what an entry point answered, reduced to what all of them can say.
type entryAnswer struct {
	// class: "ok", "invalid" (ORD07, *InvalidEventError, a bad line), "conflict" (ORD05,
	// *DuplicateConflictError), "late" (ORD01, *LateEventError), or "server": PostgreSQL refused
	// the input itself before ordered saw the event (invalid UTF-8, JSON that does not parse).
	class string
	// field is the field named by an invalid event or a conflict ("" for none, such as an
	// element that is not an event).
	field string
	// index is the bad event's position in the input, from 0 (-1 for "ok" and "server").
	index int
}

func (a entryAnswer) String() string { return fmt.Sprintf("%s %q at %d", a.class, a.field, a.index) }

// entryCase is one input, given to every entry point that can express it.
type entryCase struct {
	name string
	// setup enqueues and claims what must be stored before the input arrives.
	setup func(t *testing.T, c *ordered.Client)
	// lines is the input as JSON Lines; the CLI reads them, ordered_enqueue gets them as one
	// JSON array. A bad case's input starts with a good event, which must not be stored.
	lines []string
	// events is the Go client's input; nil: decoded from lines. noGo: Go cannot say it.
	events []ordered.Event
	noGo   bool
	// rows is an SQL expression of the ordered_event[] for ordered_enqueue_events; "": built
	// from the Go events, one parameter array per field.
	rows   string
	noRows bool
	want   entryAnswer
	// wantBy overrides want for some entry points.
	wantBy map[string]entryAnswer
}

var goodLine = `{"key":"good","seq":1}`

func invalid(field string) entryAnswer  { return entryAnswer{"invalid", field, 1} }
func conflict(field string) entryAnswer { return entryAnswer{"conflict", field, 1} }

var (
	refusedByServer = entryAnswer{"server", "", -1}
	accepted        = entryAnswer{"ok", "", -1}
)

// One table of bad (and good) input through every entry point: each gives the same answer,
// stores nothing for bad input, and stores the same rows for good input.
func TestEntryPointsAgree(t *testing.T) {
	t.Parallel()
	bigPayload := `"` + strings.Repeat("x", ordered.MaxPayloadBytesDefault+1000) + `"`
	key300 := strings.Repeat("k", 300)
	kind1000 := strings.Repeat("k", 1000)
	startA5 := func(t *testing.T, c *ordered.Client) {
		_, err := c.Enqueue(context.Background(), ordered.Event{Key: "a", Seq: 5})
		require.NoError(t, err)
		jobs, err := c.Claim(context.Background(), 1)
		require.NoError(t, err)
		require.Len(t, jobs, 1)
	}
	storeA1 := func(t *testing.T, c *ordered.Client) {
		_, err := c.Enqueue(context.Background(), ordered.Event{Key: "a", Seq: 1, Payload: json.RawMessage(`{"n":1}`)})
		require.NoError(t, err)
	}
	cases := []entryCase{
		{name: "good batch with an identical repeat and defaults", lines: []string{
			`{"key":"a","seq":1,"payload":{"n":1,"m":[1,2]}}`,
			`{"key":"a","seq":2,"kind":"k","max_attempts":3,"run_at":"2030-01-02T03:04:05.1234567+02:00"}`,
			`{"key":"b","seq":0,"payload":null,"kind":null,"run_at":null,"max_attempts":null}`,
			`{"key":"a","seq":1,"payload":{"m":[1,2],"n":1.0}}`,
			`{"key":"c","seq":9,"max_attempts":0}`,
		}, want: accepted},
		{name: "negative seq on a new key", lines: []string{`{"key":"a","seq":-1}`}, want: invalid("seq")},
		{name: "null key", lines: []string{`{"key":null,"seq":1}`},
			events: []ordered.Event{{Key: "good", Seq: 1}, {Key: "", Seq: 1}},
			rows:   `ARRAY[ROW('good', 1, NULL, NULL, NULL, NULL)::ordered_event, ROW(NULL, 1, NULL, NULL, NULL, NULL)::ordered_event]`,
			want:   invalid("key")},
		{name: "missing key", lines: []string{`{"seq":1}`}, events: []ordered.Event{{Key: "good", Seq: 1}, {Seq: 1}}, noRows: true,
			want: invalid("key")},
		{name: "null seq", lines: []string{`{"key":"a","seq":null}`}, noGo: true,
			rows: `ARRAY[ROW('good', 1, NULL, NULL, NULL, NULL)::ordered_event, ROW('a', NULL, NULL, NULL, NULL, NULL)::ordered_event]`,
			want: invalid("seq")},
		{name: "null payload is JSON null", lines: []string{`{"key":"a","seq":1,"payload":null}`},
			rows: `ARRAY[ROW('a', 1, NULL, NULL, NULL, NULL)::ordered_event]`, want: accepted},
		{name: "misspelt field", lines: []string{`{"key":"a","seq":1,"paylaod":{}}`}, noGo: true, noRows: true,
			want: invalid("paylaod")},
		{name: "field in upper case", lines: []string{`{"KEY":"a","seq":1}`}, noGo: true, noRows: true, want: invalid("KEY")},
		{name: "no max_attempts", lines: []string{`{"key":"a","seq":1}`}, want: accepted},
		{name: "empty key", lines: []string{`{"key":"","seq":1}`}, want: invalid("key")},
		{name: "key of 300 bytes", lines: []string{`{"key":"` + key300 + `","seq":1}`}, want: invalid("key")},
		{name: "key of 255 bytes", lines: []string{`{"key":"` + key300[:255] + `","seq":1}`}, want: accepted},
		{name: "kind of 1000 bytes", lines: []string{`{"key":"a","seq":1,"kind":"` + kind1000 + `"}`}, want: invalid("kind")},
		{name: "control character in key", lines: []string{`{"key":"a\u001bb","seq":1}`}, want: invalid("key")},
		{name: "C1 control character in kind", lines: []string{`{"key":"a","seq":1,"kind":"a\u0085b"}`}, want: invalid("kind")},
		{name: "key not UTF-8", lines: []string{"{\"key\":\"a\xffb\",\"seq\":1}"},
			events: []ordered.Event{{Key: "good", Seq: 1}, {Key: "a\xffb", Seq: 1}},
			want:   invalid("key"), wantBy: map[string]entryAnswer{viaSQLJSON: refusedByServer, viaSQLRows: refusedByServer}},
		{name: "payload not JSON", lines: []string{`{"key":"a","seq":1,"payload":{nope}}`},
			events: []ordered.Event{{Key: "good", Seq: 1}, {Key: "a", Seq: 1, Payload: json.RawMessage(`{nope}`)}},
			want:   invalid("payload"),
			wantBy: map[string]entryAnswer{viaSQLJSON: refusedByServer, viaSQLRows: refusedByServer}},
		{name: "payload not an object", lines: []string{`{"key":"a","seq":1,"payload":[1,"x"]}`}, want: accepted},
		{name: "payload over the limit", lines: []string{`{"key":"a","seq":1,"payload":` + bigPayload + `}`}, want: invalid("payload")},
		{name: "negative max_attempts", lines: []string{`{"key":"a","seq":1,"max_attempts":-1}`}, want: invalid("max_attempts")},
		{name: "max_attempts over int32", lines: []string{`{"key":"a","seq":1,"max_attempts":3000000000}`}, noRows: true,
			want: invalid("max_attempts")},
		{name: "max_attempts not an integer", lines: []string{`{"key":"a","seq":1,"max_attempts":2.5}`}, noGo: true, noRows: true,
			want: invalid("max_attempts")},
		{name: "seq a string", lines: []string{`{"key":"a","seq":"7"}`}, noGo: true, noRows: true, want: invalid("seq")},
		{name: "run_at infinity", lines: []string{`{"key":"a","seq":1,"run_at":"infinity"}`},
			events: []ordered.Event{{Key: "good", Seq: 1}, {Key: "a", Seq: 1, RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}},
			rows:   `ARRAY[ROW('good', 1, NULL, NULL, NULL, NULL)::ordered_event, ROW('a', 1, NULL, NULL, 'infinity', NULL)::ordered_event]`,
			want:   invalid("run_at")},
		{name: "run_at -infinity", lines: []string{`{"key":"a","seq":1,"run_at":"-infinity"}`}, noGo: true,
			rows: `ARRAY[ROW('good', 1, NULL, NULL, NULL, NULL)::ordered_event, ROW('a', 1, NULL, NULL, '-infinity', NULL)::ordered_event]`,
			want: invalid("run_at")},
		{name: "run_at on a day that does not exist", lines: []string{`{"key":"a","seq":1,"run_at":"2026-02-29T00:00:00Z"}`},
			noGo: true, noRows: true, want: invalid("run_at")},
		{name: "repeat with other content", lines: []string{`{"key":"good","seq":1,"payload":{"n":2}}`}, want: conflict("payload")},
		{name: "repeat with another kind", lines: []string{`{"key":"good","seq":1,"kind":"x"}`}, want: conflict("kind")},
		{name: "stored with other content", setup: storeA1, lines: []string{`{"key":"a","seq":1,"payload":{"n":2}}`},
			want: conflict("payload")},
		{name: "stored with the same content", setup: storeA1, lines: []string{`{"key":"a","seq":1,"payload":{"n":1}}`},
			want: accepted},
		{name: "late event", setup: startA5, lines: []string{`{"key":"a","seq":3}`}, want: entryAnswer{"late", "", 1}},
		{name: "null element", lines: []string{`null`}, noGo: true,
			rows: `ARRAY[ROW('good', 1, NULL, NULL, NULL, NULL)::ordered_event, NULL]`, want: invalid("")},
		{name: "element not an object", lines: []string{`[1]`}, noGo: true, noRows: true, want: invalid("")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := orderedtest.New(t)
			c := q.Client(t, nil)
			input := tc.lines
			if tc.want.class != "ok" {
				input = append([]string{goodLine}, input...)
			}
			events := tc.events
			if events == nil && !tc.noGo {
				events = decodeEvents(t, input)
			}
			var stored []string
			var results []string
			for _, via := range entryPoints {
				if (via == viaGo && tc.noGo) || (via == viaSQLRows && tc.noRows) {
					continue
				}
				want := tc.want
				if w, ok := tc.wantBy[via]; ok {
					want = w
				}
				_, err := q.Pool.Exec(context.Background(), `TRUNCATE ordered_jobs, ordered_heads, ordered_keys RESTART IDENTITY`)
				require.NoError(t, err)
				if tc.setup != nil {
					tc.setup(t, c)
				}
				before := storedJobs(t, q)
				got, res := enqueueVia(t, via, q, c, input, events, tc.rows)
				require.Equal(t, want.String(), got.String(), "%s answers", via)
				after := storedJobs(t, q)
				if want.class != "ok" {
					require.Equal(t, before, after, "%s: nothing is stored", via)
					continue
				}
				if stored == nil {
					stored = after
				}
				require.Equal(t, stored, after, "%s stores what %s stored", via, entryPoints[0])
				if res != nil {
					if results == nil {
						results = res
					}
					require.Equal(t, results, res, "%s reports what the others report", via)
				}
			}
		})
	}
}

// decodeEvents reads JSON Lines as the Go client's events.
func decodeEvents(t *testing.T, lines []string) []ordered.Event {
	t.Helper()
	events := make([]ordered.Event, len(lines))
	for i, line := range lines {
		var ev struct {
			Key         string          `json:"key"`
			Seq         int64           `json:"seq"`
			Kind        string          `json:"kind"`
			Payload     json.RawMessage `json:"payload"`
			RunAt       *time.Time      `json:"run_at"`
			MaxAttempts int             `json:"max_attempts"`
		}
		require.NoError(t, json.Unmarshal([]byte(line), &ev), "line %d", i+1)
		events[i] = ordered.Event{Key: ev.Key, Seq: ev.Seq, Kind: ev.Kind, Payload: ev.Payload, MaxAttempts: ev.MaxAttempts}
		if ev.RunAt != nil {
			events[i].RunAt = *ev.RunAt
		}
	}
	return events
}

// storedJobs lists every job with everything an enqueue wrote, by key and seq.
func storedJobs(t *testing.T, q *orderedtest.Queue) []string {
	t.Helper()
	rows, err := q.Pool.Query(context.Background(), `SELECT format('%s id=%s/%s %s kind=%s payload=%s run_at=%s max_attempts=%s head=%s',
			status, id, key, seq, kind, payload, coalesce(to_char(run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '-'),
			max_attempts, head)
		FROM ordered_jobs_now ORDER BY key, seq`)
	require.NoError(t, err)
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return jobs
}

// enqueueVia sends the input through one entry point and reduces its answer; for accepted
// input it also returns the per-event results as "id dup" (nil from the CLI, which prints
// counts, checked here).
func enqueueVia(t *testing.T, via string, q *orderedtest.Queue, c *ordered.Client, lines []string,
	events []ordered.Event, rows string) (entryAnswer, []string) {
	t.Helper()
	ctx := context.Background()
	switch via {
	case viaGo:
		res, err := c.EnqueueMany(ctx, events)
		if err != nil {
			return goAnswer(t, err), nil
		}
		out := make([]string, len(res))
		for i, r := range res {
			out[i] = fmt.Sprintf("%d %v", r.ID, r.Duplicate)
		}
		return accepted, out
	case viaCLI:
		return cliAnswer(t, q, lines), nil
	case viaSQLJSON:
		return sqlAnswer(t, q, `SELECT ord, coalesce(id, 0), duplicate FROM ordered_enqueue($1::jsonb)`,
			"["+strings.Join(lines, ",")+"]")
	default:
		if rows != "" {
			return sqlAnswer(t, q, `SELECT ord, coalesce(id, 0), duplicate FROM ordered_enqueue_events(`+rows+`)`)
		}
		n := len(events)
		keys, seqs, kinds := make([]string, n), make([]int64, n), make([]string, n)
		payloads, runAts, attempts := make([]*string, n), make([]*time.Time, n), make([]int64, n)
		for i, ev := range events {
			keys[i], seqs[i], kinds[i], attempts[i] = ev.Key, ev.Seq, ev.Kind, int64(ev.MaxAttempts)
			if ev.Payload != nil {
				p := string(ev.Payload)
				payloads[i] = &p
			}
			if !ev.RunAt.IsZero() {
				runAts[i] = &ev.RunAt
			}
		}
		return sqlAnswer(t, q, `SELECT ord, coalesce(id, 0), duplicate FROM ordered_enqueue_events(ARRAY(
			SELECT ROW(e.key, e.seq, e.kind, e.payload::jsonb, e.run_at, e.max_attempts)::ordered_event
			FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[], $6::bigint[]::integer[])
			     WITH ORDINALITY AS e(key, seq, kind, payload, run_at, max_attempts, ord)
			ORDER BY e.ord))`, keys, seqs, kinds, payloads, runAts, attempts)
	}
}

func goAnswer(t *testing.T, err error) entryAnswer {
	t.Helper()
	var (
		inv  *ordered.InvalidEventError
		dup  *ordered.DuplicateConflictError
		late *ordered.LateEventError
	)
	switch {
	case errors.As(err, &inv):
		return entryAnswer{"invalid", inv.Field, inv.Index}
	case errors.As(err, &dup):
		return entryAnswer{"conflict", dup.Field, dup.Index}
	case errors.As(err, &late):
		return entryAnswer{"late", "", 1} // the only late event of the input
	}
	t.Fatalf("go: unexpected error %v", err)
	return entryAnswer{}
}

// cliAnswer runs `ordered enqueue FILE` on the lines (in this process, as runCLI runs the CLI)
// and reads its answer from its one-line error: the line it names, and the field its message
// names.
func cliAnswer(t *testing.T, q *orderedtest.Queue, lines []string) entryAnswer {
	t.Helper()
	file := filepath.Join(t.TempDir(), "events.jsonl")
	require.NoError(t, os.WriteFile(file, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	r := runCLI(t, q.URL, "", "enqueue", file)
	if r.code == 0 {
		require.Empty(t, r.stderr)
		require.Regexp(t, fmt.Sprintf(`^enqueued %d events from .* \(\d+ new, \d+ duplicates\)\n$`, len(lines)), r.stdout)
		return accepted
	}
	requireOneLineError(t, r)
	msg := r.stderr
	require.Contains(t, msg, "nothing was enqueued")
	var line int
	rest := msg[strings.Index(msg, "line "):]
	_, scanErr := fmt.Sscanf(rest, "line %d:", &line)
	require.NoError(t, scanErr, "cli names the line: %q", msg)
	switch {
	case strings.Contains(msg, "late event"):
		return entryAnswer{"late", "", line - 1}
	case strings.Contains(msg, "duplicate event with different content"):
		for _, f := range []string{"payload", "kind", "run_at", "max_attempts"} {
			if strings.HasSuffix(strings.TrimSuffix(msg, "; nothing was enqueued\n"), "different "+f) {
				return entryAnswer{"conflict", f, line - 1}
			}
		}
		return entryAnswer{"conflict", "", line - 1}
	}
	// The field is the one the message starts with ("seq: negative"), or names ("missing key",
	// `unknown field "paylaod"`, `seq "7" is not an integer`).
	reason := strings.TrimSuffix(strings.TrimPrefix(rest, fmt.Sprintf("line %d: ", line)), "; nothing was enqueued\n")
	for _, f := range []string{"key", "seq", "kind", "payload", "run_at", "max_attempts"} {
		if strings.HasPrefix(reason, f+": ") || strings.HasPrefix(reason, f+" ") || reason == "missing "+f {
			return entryAnswer{"invalid", f, line - 1}
		}
	}
	if name, ok := strings.CutPrefix(reason, "unknown field "); ok {
		return entryAnswer{"invalid", strings.Trim(name, `"`), line - 1}
	}
	return entryAnswer{"invalid", "", line - 1}
}

// sqlAnswer runs an enqueue statement as a producer in another language does, and reads the
// error's SQLSTATE and DETAIL.
func sqlAnswer(t *testing.T, q *orderedtest.Queue, sql string, args ...any) (entryAnswer, []string) {
	t.Helper()
	rows, err := q.Pool.Query(context.Background(), sql, args...)
	var out []string
	if err == nil {
		type row struct {
			Ord       int32
			ID        int64
			Duplicate bool
		}
		var got []row
		got, err = pgx.CollectRows(rows, pgx.RowToStructByPos[row])
		for i, r := range got {
			require.EqualValues(t, i+1, r.Ord, "rows come in ord order")
			out = append(out, fmt.Sprintf("%d %v", r.ID, r.Duplicate))
		}
	}
	if err == nil {
		return accepted, out
	}
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	var d struct {
		Ord   int    `json:"ord"`
		Field string `json:"field"`
	}
	switch pgErr.Code {
	case "ORD07", "ORD05":
		require.NoError(t, json.Unmarshal([]byte(pgErr.Detail), &d), "DETAIL is JSON: %s", pgErr.Detail)
		require.True(t, strings.HasPrefix(pgErr.Message, "ordered: "), pgErr.Message)
		class := map[string]string{"ORD07": "invalid", "ORD05": "conflict"}[pgErr.Code]
		if class == "invalid" {
			require.Contains(t, pgErr.Message, fmt.Sprintf("invalid event %d", d.Ord), "the message names the event")
		}
		return entryAnswer{class, d.Field, d.Ord - 1}, nil
	case "ORD01":
		return entryAnswer{"late", "", 1}, nil
	}
	// PostgreSQL's own refusal of the input: a data exception, never a constraint naming a
	// column of ordered's tables.
	require.True(t, strings.HasPrefix(pgErr.Code, "22"), "a data exception, not %s: %s", pgErr.Code, pgErr.Message)
	return refusedByServer, nil
}
