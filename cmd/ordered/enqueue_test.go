package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/cmd/ordered/internal/cli"
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
		{"truncated JSON", `{"key":"a","seq":1`, "not a valid event object: the line ends before its JSON does"},
		// A syntax error names its column, and the field and place in its value.
		{"syntax error in the payload", ` {"key":"a","seq":1,"payload":{"a":[1,"x	y"]}}`, `payload: not valid JSON at column 41 (/payload/a/1): invalid character '\t' in string`},
		{"syntax error between fields", `{"key":"a","seq":01}`, "not a valid event object at column 19: invalid character '1' after object value"},
		{"not an object", `[1,2]`, "not a valid event object"},
		{"two values", `{"key":"a","seq":1} {"key":"a","seq":2}`, "more than one JSON value"},
		{"missing key", `{"seq":1}`, "missing key"},
		{"null key", `{"key":null,"seq":1}`, "missing key"},
		{"key not a string", `{"key":5,"seq":1}`, "key: not a string"},
		{"empty key", `{"key":"","seq":1}`, "key: empty"},
		{"missing seq", `{"key":"a"}`, "missing seq"},
		{"negative seq", `{"key":"a","seq":-1}`, "seq: negative"},
		{"fractional seq", `{"key":"a","seq":1.5}`, "not an integer"},
		{"exponent seq", `{"key":"a","seq":1e3}`, "not an integer"},
		{"seq beyond int64", `{"key":"a","seq":9223372036854775808}`, "seq 9223372036854775808 is out of range (0 to 9223372036854775806)"},
		{"seq at int64's limit", `{"key":"a","seq":9223372036854775807}`, "seq: out of range (0 to 9223372036854775806)"},
		{"seq not a number", `{"key":"a","seq":"seven"}`, "not an integer"},
		{"seq a quoted number", `{"key":"a","seq":"7"}`, "not an integer"},
		{"unknown field", `{"key":"a","seq":1,"sequence":2}`, "unknown field"},
		{"bad run_at", `{"key":"a","seq":1,"run_at":"tomorrow"}`, "run_at"},
		{"run_at the zero time", `{"key":"a","seq":1,"run_at":"0001-01-01T01:00:00+01:00"}`, "the earliest time there is, which the client takes for no run_at"},
		{"run_at offset beyond PostgreSQL's", `{"key":"a","seq":1,"run_at":"2026-01-02T15:04:05+16:00"}`, "its UTC offset is beyond ±15:59"},
		{"negative max_attempts", `{"key":"a","seq":1,"max_attempts":-1}`, "max_attempts: negative"},
		{"max_attempts not an integer", `{"key":"a","seq":1,"max_attempts":2.5}`, "max_attempts 2.5 is not an integer"},
		{"max_attempts beyond int32", `{"key":"a","seq":1,"max_attempts":2147483648}`, "max_attempts 2147483648 is out of range (at most 2147483647)"},
		{"payload over the limit", `{"key":"a","seq":1,"payload":` + bigPayload + `}`, "payload: 1048577 bytes, over the limit of 1048576"},
		{"NUL in payload", `{"key":"a","seq":1,"payload":"a\u0000b"}`, "payload"},
		// Field names are exact, each given once; nothing follows the object.
		{"field name in upper case", `{"KEY":"a","seq":1}`, `unknown field "KEY"`},
		{"field name capitalised", `{"key":"a","Seq":1}`, `unknown field "Seq"`},
		{"field given twice", `{"key":"a","key":"b","seq":1}`, `field "key" given twice`},
		{"field given twice, first null", `{"key":"a","seq":null,"seq":1}`, `field "seq" given twice`},
		{"closing bracket after the object", `{"key":"a","seq":1}]`, "data after the event object"},
		{"closing brace after the object", `{"key":"a","seq":1}}`, "data after the event object"},
		{"garbage after the object", `{"key":"a","seq":1}x`, "data after the event object"},
		{"byte order mark past the first line", "\ufeff" + `{"key":"a","seq":1}`, "not a valid event object"},
		{"no-break space before the object", "\u00a0" + `{"key":"a","seq":1}`, "not a valid event object"},
		// Keys and kinds are valid UTF-8, never replaced by U+FFFD, and hold no control character.
		{"key not UTF-8", "{\"key\":\"a\xffb\",\"seq\":1}", "key: not valid UTF-8"},
		{"key with a lone high surrogate", `{"key":"a\ud800","seq":1}`, `key: contains \ud800, a UTF-16 surrogate without its pair`},
		{"key with a lone low surrogate", `{"key":"\uDC00b","seq":1}`, `key: contains \udc00`},
		{"key with a high surrogate and no low one", `{"key":"\ud800\u0041","seq":1}`, `key: contains \ud800`},
		{"key with NUL", `{"key":"a\u0000b","seq":1}`, "key: contains a NUL character"},
		{"key with ESC", `{"key":"a\u001b[2Jb","seq":1}`, "key: contains the control character U+001B"},
		{"key with a newline", `{"key":"a\nb","seq":1}`, "key: contains the control character U+000A"},
		{"key with a tab", `{"key":"a\tb","seq":1}`, "key: contains the control character U+0009"},
		{"key with DEL", "{\"key\":\"a\x7fb\",\"seq\":1}", "key: contains the control character U+007F"},
		{"key with a C1 control", "{\"key\":\"a\u009bb\",\"seq\":1}", "key: contains the control character U+009B"},
		{"kind not UTF-8", "{\"key\":\"a\",\"seq\":1,\"kind\":\"\xc3\"}", "kind: not valid UTF-8"},
		{"kind with a lone surrogate", `{"key":"a","seq":1,"kind":"\udbff"}`, `kind: contains \udbff`},
		{"kind with a carriage return", `{"key":"a","seq":1,"kind":"a\rb"}`, "kind: contains the control character U+000D"},
		{"kind not a string", `{"key":"a","seq":1,"kind":1}`, "kind: not a string"},
		// A payload PostgreSQL's jsonb would refuse is refused before it is sent.
		{"payload not UTF-8", "{\"key\":\"a\",\"seq\":1,\"payload\":{\"t\":\"\xff\"}}", "payload: not valid UTF-8"},
		{"payload with a lone high surrogate", `{"key":"a","seq":1,"payload":{"t":"\ud800"}}`, `payload: contains \ud800`},
		{"payload with a lone low surrogate", `{"key":"a","seq":1,"payload":["\udc00x"]}`, `payload: contains \udc00`},
		// A payload jsonb would merge or refuse is refused, naming the place in it.
		{"payload number beyond PostgreSQL's numeric", `{"key":"a","seq":1,"payload":{"n":[1e1000000]}}`, "payload: the number 1e1000000 at /n/0 is beyond what PostgreSQL's jsonb stores"},
		{"payload naming a member twice", `{"key":"a","seq":1,"payload":{"id":1,"id":2}}`, `payload: the name "id" is given twice in the object; jsonb would keep only the last`},
		// A few bytes sent that PostgreSQL writes out past the limit: workers read it so.
		{"payload over the limit as PostgreSQL writes it", `{"key":"a","seq":1,"payload":[1e131071,1e131071,1e131071,1e131071,1e131071,1e131071,1e131071,1e131071,1e131071]}`,
			"payload: 1179666 bytes as PostgreSQL writes it, over the limit of 1048576"},
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

// A UTF-8 byte order mark at the start of the input is skipped; CRLF line ends, escaped field
// names and keys written as escapes (a surrogate pair among them) are plain JSON and accepted.
func TestEnqueueStrictInputAcceptsValidJSON(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	in := "\ufeff" + `{"key":"\ud83d\udd11","seq":1}` + "\r\n" + `{"k\u0065y":"\u00e9t\u00E9","seq":2,"kind":"a b"}` + "\r\n"
	r := runCLI(t, q.URL, in, "enqueue")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "enqueued 2 events from stdin (2 new, 0 duplicates)\n", r.stdout)
	require.Equal(t, []string{"été/2 queued attempts=0", "🔑/1 queued attempts=0"}, jobStates(t, q.Pool))
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

// A run_at is kept to the microsecond, a finer fraction cut as ordered_enqueue cuts it, so the
// same line sent through SQL and then through the CLI is a duplicate.
func TestEnqueueRunAtIsStoredAsOrderedEnqueueStoresIt(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	times := []string{"2026-01-02T15:04:05.1234569Z", "2026-01-02T15:04:05.1234565Z",
		"2026-01-02T15:04:05.9999996+02:00", "2026-01-02T15:04:05.123456Z", "2026-01-02T15:04:05Z"}
	var lines strings.Builder
	for seq, at := range times {
		fmt.Fprintf(&lines, `{"key":"cli","seq":%d,"run_at":%q}`+"\n", seq, at)
		_, err := q.Pool.Exec(ctx, `SELECT ordered_enqueue(jsonb_build_array(jsonb_build_object('key', 'sql', 'seq', $1::bigint, 'run_at', $2::text)))`, seq, at)
		require.NoError(t, err)
	}
	r := runCLI(t, q.URL, lines.String(), "enqueue")
	require.Zero(t, r.code, r.stderr)
	for seq, at := range times {
		sent, err := time.Parse(time.RFC3339Nano, at)
		require.NoError(t, err)
		var cli, sql time.Time
		require.NoError(t, q.Pool.QueryRow(ctx, `SELECT (SELECT run_at FROM ordered_jobs_now WHERE key = 'cli' AND seq = $1),
			(SELECT run_at FROM ordered_jobs_now WHERE key = 'sql' AND seq = $1)`, seq).Scan(&cli, &sql))
		require.True(t, sent.Truncate(time.Microsecond).Equal(cli), "%s: stored %s", at, cli)
		require.True(t, cli.Equal(sql), "%s: the CLI stored %s, SQL %s", at, cli, sql)
	}
	r = runCLI(t, q.URL, strings.ReplaceAll(lines.String(), `"cli"`, `"sql"`), "enqueue")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, fmt.Sprintf("enqueued %d events from stdin (0 new, %d duplicates)\n", len(times), len(times)), r.stdout)
}

// A line of MaxLineBytes is read, whatever its line end; one byte more is too long.
func TestEnqueueLineAtTheLimit(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	line := func(seq, size int) string {
		head := fmt.Sprintf(`{"key":"a","seq":%d,`, seq)
		payload := `"payload":"` + strings.Repeat("x", ordered.MaxPayloadBytesDefault-2) + `"}`
		return head + strings.Repeat(" ", size-len(head)-len(payload)) + payload
	}
	in := line(1, cli.MaxLineBytes) + "\n" + line(2, cli.MaxLineBytes) + "\r\n" + line(3, cli.MaxLineBytes)
	require.Len(t, in, 3*cli.MaxLineBytes+3)
	r := runCLI(t, q.URL, in, "enqueue")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "enqueued 3 events from stdin (3 new, 0 duplicates)\n", r.stdout)

	for _, end := range []string{"", "\n", "\r\n"} {
		r = runCLI(t, q.URL, `{"key":"b","seq":1}`+"\n"+line(4, cli.MaxLineBytes+1)+end, "enqueue")
		requireOneLineError(t, r)
		require.Contains(t, r.stderr, fmt.Sprintf("stdin: line 2: longer than %d bytes", cli.MaxLineBytes), "line end %q", end)
	}
	require.Equal(t, 3, jobCount(t, q.Pool))
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
	code := cli.Main(ctx, []string{"enqueue", "--database-url", q.URL}, in, &stdout, &stderr)
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

	// An event repeated in the input with other content names both lines.
	r = runCLI(t, q.URL, `{"key":"twice","seq":1,"payload":{"a":1}}`+"\n\n"+`{"key":"twice","seq":1,"payload":{"a":2}}`, "enqueue")
	requireOneLineError(t, r)
	require.Equal(t, `ordered: stdin: line 3: duplicate event with different content: key "twice" seq 1 is given on line 1 `+
		"with a different payload; nothing was enqueued\n", r.stderr)
	require.Equal(t, 4, jobCount(t, q.Pool))

	// A file that does not exist.
	r = runCLI(t, q.URL, "", "enqueue", filepath.Join(dir, "missing.jsonl"))
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "missing.jsonl")
	require.Contains(t, r.stderr, "no such file or directory")
	require.Equal(t, 4, jobCount(t, q.Pool))
}

// `ordered enqueue` streams: it sends a chunk of events (cli.EnqueueChunk events, or
// cli.EnqueueChunkBytes of lines) before it has read the rest of its input, and all chunks go in
// one transaction, so a bad last line leaves nothing of the input enqueued and is named by its
// number. The test holds the input open until the first chunk holds its key's row lock.
func TestEnqueueStreamsChunksInOneTransaction(t *testing.T) {
	t.Parallel()
	smallLine := func(i int) string { return fmt.Sprintf(`{"key":"k%d","seq":%d,"payload":{"i":%d}}`, i%100, i, i) }
	bigPayload := strings.Repeat("x", 900<<10)
	bigLine := func(i int) string {
		return fmt.Sprintf(`{"key":"k0","seq":%d,"payload":"%s"}`, i, bigPayload)
	}
	for _, tc := range []struct {
		name       string
		line       func(i int) string
		firstChunk int // lines that fill the first chunk
		lines      int // good lines in all
		last       string
		want       string
	}{
		{"bad line", smallLine, cli.EnqueueChunk, 2*cli.EnqueueChunk + 500, `{"key":"k1"}`, "missing seq"},
		{"event the library refuses", smallLine, cli.EnqueueChunk, 2*cli.EnqueueChunk + 500,
			`{"key":"k1","seq":1,"payload":1e1000000}`, "payload: the number 1e1000000 is beyond what PostgreSQL's jsonb stores"},
		// An error only the database finds, here a constraint of the test's, still names its line.
		{"event the database refuses", smallLine, cli.EnqueueChunk, 2*cli.EnqueueChunk + 500,
			`{"key":"poisoned","seq":1,"payload":"poison"}`, `violates check constraint "test_no_poison"`},
		// The event it conflicts with is in an earlier chunk, rolled back with the rest: the
		// error does not say it is enqueued.
		{"duplicate of an event in an earlier chunk", smallLine, cli.EnqueueChunk, 2*cli.EnqueueChunk + 500,
			`{"key":"k5","seq":5,"payload":{"i":-1}}`, `duplicate event with different content: key "k5" seq 5 is given earlier in the input, or was enqueued before it, with a different payload`},
		{"chunks bounded by bytes", bigLine, cli.EnqueueChunkBytes/len(bigLine(0)) + 1, 12,
			`{"key":"k1","seq":1,"payload":"\ud800"}`, `payload: contains \ud800`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := orderedtest.New(t)
			ctx := context.Background()
			c := newTestClient(t, q, time.Hour, policy.Block)
			_, err := c.Enqueue(ctx, ordered.Event{Key: "k0", Seq: 0}) // k0's row exists: the chunk locks it
			require.NoError(t, err)
			_, err = q.Pool.Exec(ctx, `ALTER TABLE ordered_jobs ADD CONSTRAINT test_no_poison CHECK (payload IS DISTINCT FROM '"poison"')`)
			require.NoError(t, err)

			cmd := exec.Command(cliBin, "enqueue", "--database-url", q.URL)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill() }) // a no-op once it has exited
			w := bufio.NewWriter(stdin)
			write := func(from, to int) {
				for i := from; i <= to; i++ {
					_, err := w.WriteString(tc.line(i) + "\n")
					require.NoError(t, err)
				}
				require.NoError(t, w.Flush())
			}

			write(1, tc.firstChunk)
			require.Eventually(t, func() bool {
				_, err := q.Pool.Exec(ctx, "SELECT FROM ordered_keys WHERE key = 'k0' FOR UPDATE NOWAIT")
				var pgErr *pgconn.PgError
				return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
			}, time.Minute, 10*time.Millisecond, "the first chunk is sent before the input ends")

			write(tc.firstChunk+1, tc.lines)
			_, err = io.WriteString(stdin, tc.last+"\n")
			require.NoError(t, err)
			require.NoError(t, stdin.Close())
			err = cmd.Wait()
			var exitErr *exec.ExitError
			require.ErrorAs(t, err, &exitErr, "stdout %q", stdout.String())
			r := cliResult{stdout: stdout.String(), stderr: stderr.String(), code: exitErr.ExitCode()}
			requireOneLineError(t, r)
			require.Regexp(t, fmt.Sprintf(`^ordered: stdin: line %d: `, tc.lines+1), r.stderr)
			require.Contains(t, r.stderr, tc.want)
			require.Contains(t, r.stderr, "nothing was enqueued")
			require.Empty(t, r.stdout)
			require.Equal(t, []string{"k0/0 queued attempts=0"}, jobStates(t, q.Pool), "nothing from the input is enqueued")
		})
	}
}

// A signal ends `ordered enqueue` while it waits for more input, its producer's end still open:
// before any input (nothing sent yet), and after a chunk went into its transaction, whose lock
// of the chunk's key is then released; nothing is enqueued, in one line and exit 1.
func TestEnqueueSignalWhileWaitingForInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		sig    syscall.Signal
		chunks int // full chunks written before the signal
	}{
		{"SIGINT before any input", syscall.SIGINT, 0},
		{"SIGTERM after a chunk", syscall.SIGTERM, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			q := orderedtest.New(t)
			ctx := context.Background()
			c := newTestClient(t, q, time.Hour, policy.Block)
			_, err := c.Enqueue(ctx, ordered.Event{Key: "k0", Seq: 0})
			require.NoError(t, err)
			locked := func() bool {
				_, err := q.Pool.Exec(ctx, "SELECT FROM ordered_keys WHERE key = 'k0' FOR UPDATE NOWAIT")
				var pgErr *pgconn.PgError
				return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
			}

			cmd := exec.Command(cliBin, "enqueue", "--database-url", q.URL)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			stdin, err := cmd.StdinPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = stdin.Close() })
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			if tc.chunks > 0 {
				w := bufio.NewWriter(stdin)
				for i := 1; i <= tc.chunks*cli.EnqueueChunk; i++ {
					_, err := fmt.Fprintf(w, `{"key":"k0","seq":%d}`+"\n", i)
					require.NoError(t, err)
				}
				require.NoError(t, w.Flush())
				require.Eventually(t, locked, time.Minute, 10*time.Millisecond, "the first chunk is sent")
			} else {
				// Signals are caught from the start; wait until the command is reading its input.
				require.Eventually(t, func() bool { return waitingOnPipe(cmd.Process.Pid) },
					time.Minute, 10*time.Millisecond, "the command never read its input")
			}

			require.NoError(t, cmd.Process.Signal(tc.sig))
			var werr error
			select {
			case werr = <-exited:
			case <-time.After(time.Minute):
				t.Fatalf("still running after %v while its input stays open; stderr %q", tc.sig, stderr.String())
			}
			var exitErr *exec.ExitError
			require.ErrorAs(t, werr, &exitErr, "stdout %q", stdout.String())
			r := cliResult{stdout: stdout.String(), stderr: stderr.String(), code: exitErr.ExitCode()}
			requireOneLineError(t, r)
			require.Equal(t, "ordered: stdin: interrupted before the end of the input; nothing was enqueued\n", r.stderr)
			require.Empty(t, r.stdout)
			require.Eventually(t, func() bool { return !locked() }, time.Minute, 10*time.Millisecond,
				"the transaction is rolled back and its lock released")
			require.Equal(t, []string{"k0/0 queued attempts=0"}, jobStates(t, q.Pool), "nothing from the input is enqueued")
		})
	}
}

// waitingOnPipe reports whether some thread of process pid is blocked reading a pipe.
func waitingOnPipe(pid int) bool {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	for _, task := range tasks {
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/wchan", pid, task.Name()))
		if strings.Contains(string(wchan), "pipe_read") || strings.Contains(string(wchan), "pipe_wait") {
			return true
		}
	}
	return false
}

// Over several chunks, the summary counts every event, and an event repeated in a later chunk
// is a duplicate.
func TestEnqueueManyChunks(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	var in strings.Builder
	for i := range 2*cli.EnqueueChunk + 10 {
		j := i % (cli.EnqueueChunk + 5) // lines 10,006 on repeat lines 1 to 10,005
		fmt.Fprintf(&in, `{"key":"k%d","seq":%d}`+"\n", j%100, j)
	}
	r := runCLI(t, q.URL, in.String(), "enqueue")
	require.Zero(t, r.code, r.stderr)
	want := fmt.Sprintf("enqueued %d events from stdin (%d new, %d duplicates)\n", 2*cli.EnqueueChunk+10, cli.EnqueueChunk+5, cli.EnqueueChunk+5)
	require.Equal(t, want, r.stdout)
	require.Equal(t, cli.EnqueueChunk+5, jobCount(t, q.Pool))
}
