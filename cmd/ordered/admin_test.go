package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/policy"
)

// A key, kind or error cannot forge terminal output: `status`, `failed` (both forms) and the
// error line print control and format characters as escapes. The library and the schema's
// enqueue functions refuse such keys, so this one is written into the tables by hand, as a key
// stored before they refused them would be.
func TestAdminOutputEscapesKeysAndErrors(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	const key = "evil\x1b[2J\u009b31m\u202eyek\x7f"
	_, err := q.Pool.Exec(ctx, `SELECT * FROM ordered_enqueue('[{"key":"placeholder","seq":1,"max_attempts":1}]')`)
	require.NoError(t, err)
	_, err = q.Pool.Exec(ctx, `UPDATE ordered_jobs SET key = $1, kind = $2 WHERE key = 'placeholder'`, key, "k\u0007ind")
	require.NoError(t, err)
	_, err = q.Pool.Exec(ctx, `UPDATE ordered_keys SET key = $1 WHERE key = 'placeholder'`, key)
	require.NoError(t, err)
	_, err = q.Pool.Exec(ctx, `UPDATE ordered_heads SET key = $1 WHERE key = 'placeholder'`, key)
	require.NoError(t, err)
	c := newTestClient(t, q, time.Hour, policy.Block)
	jobs := claimIDs(t, c, 1)
	require.Equal(t, key, jobs[1].Key)
	outcome, err := c.Fail(ctx, jobs[1], errors.New("boom\x1b]0;owned\x07\r\nordered: all good\u0085"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeBlocked, outcome)

	requireInert := func(t *testing.T, out string) {
		t.Helper()
		for i, r := range out {
			require.True(t, r == '\n' || r >= ' ' && r != 0x7f && !(r >= 0x80 && r <= 0x9f) && r != '\u202e' && r != utf8.RuneError,
				"character %U at byte %d of %q", r, i, out)
		}
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"failed"}, {"failed", "--json"}} {
		r := runCLI(t, q.URL, "", args...)
		require.Zero(t, r.code, r.stderr)
		requireInert(t, r.stdout)
		switch {
		case args[len(args)-1] == "--json":
			require.Contains(t, r.stdout, `"key": "evil\u001b[2J\u009b31m\u202eyek\u007f"`)
		default:
			require.Contains(t, r.stdout, `"evil\x1b[2J\u009b31m\u202eyek\x7f"`)
			require.Contains(t, r.stdout, `"boom\x1b]0;owned\a ordered: all good"`)
		}
		if args[0] == "failed" && len(args) == 1 {
			require.Contains(t, r.stdout, `"k\aind"`)
		}
	}

	// The one-line error escapes what it quotes from outside, such as a file name.
	missing := filepath.Join(t.TempDir(), "x\x1b[2J\u202e.jsonl")
	r := runCLI(t, q.URL, "", "enqueue", missing)
	requireOneLineError(t, r)
	requireInert(t, r.stderr)
	require.Contains(t, r.stderr, `x\x1b[2J\u202e.jsonl`)
	_, err = os.Stat(missing)
	require.True(t, errors.Is(err, os.ErrNotExist))

}

// `ordered gaps` lists the contiguous keys waiting on a gap, `gaps release` passes their
// missing ranges (a key without one is refused, and the exit status says so), and `status`
// counts them.
func TestGapsCommand(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	_, err := q.Pool.Exec(ctx, `SELECT * FROM ordered_enqueue('[{"key":"cust-1","seq":3},{"key":"cust-2","seq":1}]', p_first_seq => 1)`)
	require.NoError(t, err)

	r := runCLI(t, q.URL, "", "gaps")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^cust-1 +1 +1-2 +\d+s +wait +- +1$`, r.stdout)
	require.NotContains(t, r.stdout, "cust-2")
	r = runCLI(t, q.URL, "", "gaps", "--json")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, `"missing": {`+"\n"+`        "from": 1,`)
	r = runCLI(t, q.URL, "", "status")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "keys waiting on a gap  1 (0 blocked)")

	r = runCLI(t, q.URL, "", "gaps", "release", "cust-1", "cust-2", "nope")
	requireOneLineError(t, r)
	require.Equal(t, "released key cust-1: passed seqs 1-2\n"+
		"refused: the key has no gap: key \"cust-2\" misses no seq below an open job\n"+
		"refused: key nope is not a contiguous key\n", r.stdout)
	require.Equal(t, "ordered: released 1 of 3 keys; refused: cust-2, nope\n", r.stderr)

	r = runCLI(t, q.URL, "", "gaps", "--key", "cust-1")
	require.Zero(t, r.code, r.stderr)
	require.Regexp(t, `(?m)^cust-1 +3 +- +no +wait +- +1$`, r.stdout)
	require.Regexp(t, `(?m)^cust-1 +1-2 +\S+ +released$`, r.stdout)
}

// enqueue --contiguous creates gap-aware keys: an event above a missing seq waits on the gap,
// an event for the key in the default mode is refused with nothing enqueued, and flags that
// do not make a sequence are refused by name before anything is read.
func TestEnqueueContiguousFlags(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)

	r := runCLI(t, q.URL, `{"key":"c","seq":2}`+"\n", "enqueue", "--contiguous", "--first-seq", "1",
		"--gap", "proceed", "--gap-timeout", "1h")
	require.Zero(t, r.code, r.stderr)
	r = runCLI(t, q.URL, "", "gaps")
	require.Zero(t, r.code, r.stderr)
	// The gap has waited some time and acts when the hour is up: the two add up to the
	// timeout, each rounded to the second, however long the machine took to get here.
	m := regexp.MustCompile(`(?m)^c +1 +1 +(\S+) +proceed +(\S+) +1$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	waiting, err := time.ParseDuration(m[1])
	require.NoError(t, err)
	actsIn, err := time.ParseDuration(m[2])
	require.NoError(t, err)
	require.InDelta(t, time.Hour.Seconds(), (waiting + actsIn).Seconds(), 1, r.stdout)

	r = runCLI(t, q.URL, `{"key":"d","seq":1}`+"\n"+`{"key":"c","seq":3}`+"\n", "enqueue")
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "line 2")
	require.Contains(t, r.stderr, "sequence mode mismatch")
	var n int
	require.NoError(t, q.Pool.QueryRow(context.Background(), `SELECT count(*) FROM ordered_jobs_now`).Scan(&n))
	require.Equal(t, 1, n, "a refused input enqueued something")

	for args, want := range map[string]string{
		"--gap proceed":                "--gap proceed needs a positive --gap-timeout",
		"--gap later --gap-timeout 1s": `--gap "later": want wait, proceed or block`,
		"--gap-timeout 1s":             "--gap-timeout needs --gap proceed or --gap block",
		"--first-seq -1":               "--first-seq -1: must be 0 or more",
	} {
		r = runCLI(t, q.URL, `{"key":"e","seq":1}`+"\n", append([]string{"enqueue", "--contiguous"}, strings.Fields(args)...)...)
		requireOneLineError(t, r)
		require.Contains(t, r.stderr, want, args)
	}
	r = runCLI(t, q.URL, `{"key":"e","seq":1}`+"\n", "enqueue", "--first-seq", "1")
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "need --contiguous")
}
