package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/policy"
)

// goodLines come before every bad line: they must not be enqueued either. With the blank line
// they take lines 1 to 3, so the bad line is line 4.
const goodLines = `{"key":"good","seq":1,"payload":{"n":1}}

{"key":"good","seq":2}
`

// A bad line is named by its number (blank lines count) in a one-line error, and nothing of the
// input is enqueued — not even the good lines before it.
func TestEnqueueBadLine(t *testing.T) {
	t.Parallel()
	bigPayload := `"` + strings.Repeat("x", ordered.MaxPayloadBytesDefault-1) + `"` // 1 MiB + 1 byte
	for _, tc := range []struct {
		name, line, want string
	}{
		{"not JSON", `key=a seq=1`, "not a valid event object"},
		{"truncated JSON", `{"key":"a","seq":1`, "not a valid event object"},
		{"not an object", `[1,2]`, "not a valid event object"},
		{"two values", `{"key":"a","seq":1} {"key":"a","seq":2}`, "more than one JSON value"},
		{"missing key", `{"seq":1}`, "missing key"},
		{"null key", `{"key":null,"seq":1}`, "missing key"},
		{"key not a string", `{"key":5,"seq":1}`, "not a valid event object"},
		{"empty key", `{"key":"","seq":1}`, "key: empty"},
		{"missing seq", `{"key":"a"}`, "missing seq"},
		{"negative seq", `{"key":"a","seq":-1}`, "seq: negative"},
		{"fractional seq", `{"key":"a","seq":1.5}`, "not an integer"},
		{"exponent seq", `{"key":"a","seq":1e3}`, "not an integer"},
		{"seq beyond int64", `{"key":"a","seq":9223372036854775808}`, "not an integer"},
		{"seq not a number", `{"key":"a","seq":"seven"}`, "not an integer"},
		{"seq a quoted number", `{"key":"a","seq":"7"}`, "not an integer"},
		{"unknown field", `{"key":"a","seq":1,"sequence":2}`, "unknown field"},
		{"bad run_at", `{"key":"a","seq":1,"run_at":"tomorrow"}`, "not a valid event object"},
		{"negative max_attempts", `{"key":"a","seq":1,"max_attempts":-1}`, "max_attempts: negative"},
		{"payload over the limit", `{"key":"a","seq":1,"payload":` + bigPayload + `}`, "payload: 1048577 bytes, over the limit of 1048576"},
		{"NUL in payload", `{"key":"a","seq":1,"payload":"a\u0000b"}`, "payload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := orderedtest.New(t)
			in := goodLines + tc.line + "\n" + `{"key":"good","seq":3}` + "\n"
			r := runCLI(t, q.URL, in, "enqueue")
			requireOneLineError(t, r)
			require.Regexp(t, `^ordered: stdin: line 4: `, r.stderr)
			require.Contains(t, r.stderr, tc.want)
			require.Contains(t, r.stderr, "nothing was enqueued")
			require.Less(t, len(r.stderr), 1024, "the error does not echo a whole line")
			require.Empty(t, r.stdout)
			require.Zero(t, jobCount(t, q.Pool), "nothing from the input is enqueued")
		})
	}
}

// A payload of exactly the limit is accepted.
func TestEnqueuePayloadAtLimit(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	payload := `"` + strings.Repeat("x", ordered.MaxPayloadBytesDefault-2) + `"`
	r := runCLI(t, q.URL, `{"key":"a","seq":1,"payload":`+payload+`}`, "enqueue")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "enqueued 1 events from stdin (1 new, 0 duplicates)\n", r.stdout)
	require.Equal(t, 1, jobCount(t, q.Pool))
}

// An event that arrives after a later event of its key started is a bad line too.
func TestEnqueueLateEventLine(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	c := newTestClient(t, q, time.Hour, policy.Block)
	_, err := c.Enqueue(ctx, ordered.Event{Key: "a", Seq: 5})
	require.NoError(t, err)
	require.NoError(t, c.Complete(ctx, claimIDs(t, c, 1)[1]))

	r := runCLI(t, q.URL, goodLines+`{"key":"a","seq":6}`+"\n"+`{"key":"a","seq":4}`+"\n", "enqueue")
	requireOneLineError(t, r)
	require.Regexp(t, `^ordered: stdin: line 5: `, r.stderr)
	require.Contains(t, r.stderr, "late event")
	require.Equal(t, []string{"a/5 done attempts=1"}, jobStates(t, q.Pool), "nothing from the input is enqueued")
}

// A line longer than the reader accepts is reported with its own number, blank lines counted.
func TestEnqueueLineTooLong(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	in := io.MultiReader(strings.NewReader("\n"+`{"key":"a","seq":1}`+"\n\n"+`{"key":"a","seq":2,"payload":"`),
		endless('x'))
	var stdout, stderr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, []string{"enqueue", "--database-url", q.URL}, in, &stdout, &stderr)
	r := cliResult{stdout: stdout.String(), stderr: stderr.String(), code: code}
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "longer than")
	require.Regexp(t, `^ordered: stdin: line 4: `, r.stderr, "the long line is line 4 (lines 1 and 3 are blank)")
	require.Zero(t, jobCount(t, q.Pool))
}

// endless is an infinite stream of one byte.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	chunk := bytes.Repeat([]byte{byte(e)}, 64<<10)
	for n := 0; n < len(p); {
		n += copy(p[n:], chunk) // copy, not a loop of stores: cheap under -race
	}
	return len(p), nil
}

// The input is a file argument, "-" or standard input; blank lines are skipped; duplicates
// (already enqueued, or repeated in the input) are counted, not errors.
func TestEnqueueSources(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "events.jsonl")
	require.NoError(t, os.WriteFile(file, []byte("\n"+goodLines+"\n\n"), 0o644))

	r := runCLI(t, q.URL, "", "enqueue", file)
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "enqueued 2 events from "+file+" (2 new, 0 duplicates)\n", r.stdout)

	in := goodLines + `{"key":"good","seq":3}` + "\n" + `{"key":"good","seq":3}` + "\n"
	r = runCLI(t, q.URL, in, "enqueue", "-")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "enqueued 4 events from stdin (1 new, 3 duplicates)\n", r.stdout)

	r = runCLI(t, q.URL, `{"key":"other","seq":0}`, "enqueue") // no trailing newline
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "enqueued 1 events from stdin (1 new, 0 duplicates)\n", r.stdout)

	require.Equal(t, []string{"good/1 queued attempts=0", "good/2 queued attempts=0",
		"good/3 queued attempts=0", "other/0 queued attempts=0"}, jobStates(t, q.Pool))

	// A bad line in a file names the file.
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"key":"new","seq":1}`+"\n\n"+`{"key":"new"}`+"\n"), 0o644))
	r = runCLI(t, q.URL, "", "enqueue", bad)
	requireOneLineError(t, r)
	require.Regexp(t, `^ordered: `+regexp.QuoteMeta(bad)+`: line 3: missing seq`, r.stderr)
	require.Equal(t, 4, jobCount(t, q.Pool))

	// A file that does not exist.
	r = runCLI(t, q.URL, "", "enqueue", filepath.Join(dir, "missing.jsonl"))
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "missing.jsonl")
	require.Contains(t, r.stderr, "no such file or directory")
	require.Equal(t, 4, jobCount(t, q.Pool))
}
