package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered"
	"github.com/orderedq/ordered/ordered/orderedtest"
	"github.com/orderedq/ordered/policy"
	"github.com/orderedq/ordered/schema"
)

// cliEventsFile is the input of the known state (six events of three keys, one blank line).
const cliEventsFile = goldenDir + "/events.jsonl"

// finishedAtRE matches the one volatile field of `failed --json`: when the job failed.
var finishedAtRE = regexp.MustCompile(`"finished_at": "[^"]*"`)

// knownState is a queue in a state whose CLI output is deterministic: nothing is ready to run
// (so the oldest ready job is 0s old), job IDs are those of a fresh schema.
//
//	id key    seq status
//	1  cust-1 1   done
//	2  cust-1 2   blocked (multi-line error)
//	3  cust-1 3   queued, behind the blocked job
//	4  cust-2 1   failed (skip policy)
//	5  cust-2 2   queued, run_at 2099
//	6  cust-3 7   running, lease of an hour
//	7  cust-4 1   running, lease expired
func knownState(t *testing.T) *orderedtest.Queue {
	t.Helper()
	ctx := context.Background()
	q := orderedtest.New(t)
	r := runCLI(t, q.URL, "", "enqueue", cliEventsFile)
	require.Zero(t, r.code, r.stderr)

	block := newTestClient(t, q, time.Hour, policy.Block)
	skip := newTestClient(t, q, time.Hour, policy.Skip)

	jobs := claimIDs(t, block, 1, 4, 6)
	require.NoError(t, block.Complete(ctx, jobs[1]))
	outcome, err := skip.Fail(ctx, jobs[4], errors.New("card declined"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeSkipped, outcome)

	jobs = claimIDs(t, block, 2)
	outcome, err = block.Fail(ctx, jobs[2], errors.New("payment gateway said:\n  insufficient funds"))
	require.NoError(t, err)
	require.Equal(t, ordered.OutcomeBlocked, outcome)

	_, err = block.Enqueue(ctx, ordered.Event{Key: "cust-4", Seq: 1, Kind: "invoice.created"})
	require.NoError(t, err)
	short := newTestClient(t, q, ordered.LeaseMin, policy.Block)
	claimIDs(t, short, 7)
	require.Eventually(t, func() bool {
		s, err := block.Stats(ctx)
		return err == nil && s.ExpiredLeases == 1
	}, 5*time.Second, 10*time.Millisecond)
	return q
}

func newTestClient(t *testing.T, q *orderedtest.Queue, lease time.Duration, d policy.Decision) *ordered.Client {
	t.Helper()
	c, err := ordered.NewClient(q.Pool, &ordered.Config{Lease: lease, Policy: policy.Always(d)})
	require.NoError(t, err)
	return c
}

// claimIDs claims what is ready and requires it to be exactly the jobs ids.
func claimIDs(t *testing.T, c *ordered.Client, ids ...int64) map[int64]*ordered.Job {
	t.Helper()
	jobs, err := c.Claim(context.Background(), 100)
	require.NoError(t, err)
	byID := make(map[int64]*ordered.Job, len(jobs))
	var got []int64
	for _, j := range jobs {
		byID[j.ID] = j
		got = append(got, j.ID)
	}
	slices.Sort(got)
	require.Equal(t, ids, got, "claimed jobs")
	return byID
}

// The help of each command of the contract. The root help is not pinned (its command list grows
// with every new command); TestHelpHasContractFlags checks that it lists the contract's.
func TestGoldenHelp(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"migrate", "enqueue", "work", "status", "failed", "replay", "skip", "archive"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, "", "", cmd, "--help")
			require.Zero(t, r.code, r.stderr)
			checkGolden(t, "help_"+cmd+".golden", transcript(r))
		})
	}
}

// The flags that PRODUCT.md's CLI contract names stay in the help, whatever the golden files say.
func TestHelpHasContractFlags(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"":       {"--database-url", "migrate", "enqueue", "work", "status", "failed", "replay", "skip", "archive"},
		"work":   {"--exec", "--workers", "--lease", "--max-attempts", "--policy", "--metrics-addr", "--poll", "--database-url"},
		"status": {"--json"},
		"failed": {"--key", "--json"},
		"replay": {"--force"},
	}
	for cmd, flags := range want {
		args := []string{"--help"}
		if cmd != "" {
			args = []string{cmd, "--help"}
		}
		r := runCLI(t, "", "", args...)
		require.Zero(t, r.code)
		for _, f := range flags {
			require.Contains(t, r.stdout, f, "ordered %s --help", cmd)
		}
	}
}

func TestGoldenMigrate(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	ctx := context.Background()
	empty := q.Schema + "_m"
	_, err := q.Pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{empty}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := q.Pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{empty}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	url := withSchema(q.URL, empty)
	first := runCLI(t, url, "", "migrate")
	second := runCLI(t, url, "", "migrate")
	require.Zero(t, first.code, first.stderr)
	require.Zero(t, second.code, second.stderr)
	checkGolden(t, "migrate.golden", transcript(first, second))

	var n int
	require.NoError(t, q.Pool.QueryRow(ctx,
		"SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'ordered_jobs'", empty).Scan(&n))
	require.Equal(t, 1, n, "migrate created ordered_jobs in the schema of the URL")
}

// Several migrates at once on an empty schema: one applies, the others find it current.
func TestMigrateConcurrent(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	empty := q.Schema + "_c"
	_, err := q.Pool.Exec(context.Background(), "CREATE SCHEMA "+pgx.Identifier{empty}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := q.Pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{empty}.Sanitize()+" CASCADE")
		require.NoError(t, err)
	})
	url := withSchema(q.URL, empty)
	results := make([]cliResult, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = runCLI(t, url, "", "migrate") })
	}
	wg.Wait()
	var outs []string
	for _, r := range results {
		require.Zero(t, r.code, r.stderr)
		outs = append(outs, r.stdout)
	}
	slices.Sort(outs)
	require.Equal(t, []string{"schema is up to date\n", "schema is up to date\n", "schema is up to date\n"}, outs[1:])
	ms, err := schema.Migrations()
	require.NoError(t, err)
	versions := make([]int, len(ms))
	for i, m := range ms {
		versions[i] = m.Version
	}
	require.True(t, strings.HasPrefix(outs[0], fmt.Sprintf("applied migrations %v\napplied functions ", versions)), outs[0])
}

func TestGoldenEnqueue(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	dups := `{"seq":1,"key":"cust-1","payload":{ "amount": 100.0 },"kind":"invoice.created"}
{"key":"cust-2","seq":1,"kind":"invoice.created","payload":{"amount":250}}
{"key":"cust-5","seq":1,"payload":[1,2,3]}

{"key":"cust-5","seq":1,"payload":[1,2,3]}
`
	conflict := `{"key":"cust-9","seq":1}
{"key":"cust-2","seq":1,"kind":"other","payload":{"ignored":true}}
`
	runs := []cliResult{
		runCLI(t, q.URL, "", "enqueue", cliEventsFile),
		runCLI(t, q.URL, dups, "enqueue", "-"),
		runCLI(t, q.URL, "\n\n", "enqueue"),
		runCLI(t, q.URL, "", "enqueue", cliEventsFile),
		runCLI(t, q.URL, conflict, "enqueue"),
	}
	for _, r := range runs[:4] {
		require.Zero(t, r.code, r.stderr)
	}
	requireOneLineError(t, runs[4])
	checkGolden(t, "enqueue.golden", transcript(runs...))
	require.Equal(t, []string{
		"cust-1/1 queued attempts=0", "cust-1/2 queued attempts=0", "cust-1/3 queued attempts=0",
		"cust-2/1 queued attempts=0", "cust-2/2 queued attempts=0", "cust-3/7 queued attempts=0",
		"cust-5/1 queued attempts=0",
	}, jobStates(t, q.Pool))
	// A duplicate with other content changes nothing: cust-2/1 keeps its kind and payload.
	var kind, payload string
	require.NoError(t, q.Pool.QueryRow(context.Background(),
		"SELECT kind, payload::text FROM ordered_jobs_now WHERE key = 'cust-2' AND seq = 1").Scan(&kind, &payload))
	require.Equal(t, "invoice.created", kind)
	require.JSONEq(t, `{"amount":250}`, payload)
}

func TestGoldenEmpty(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	runs := []cliResult{
		runCLI(t, q.URL, "", "status"),
		runCLI(t, q.URL, "", "status", "--json"),
		runCLI(t, q.URL, "", "failed"),
		runCLI(t, q.URL, "", "failed", "--json"),
		runCLI(t, q.URL, "", "archive"),
	}
	for _, r := range runs {
		require.Zero(t, r.code, r.stderr)
	}
	checkGolden(t, "empty.golden", transcript(runs...))
}

func TestGoldenStatus(t *testing.T) {
	t.Parallel()
	q := knownState(t)
	human := runCLI(t, q.URL, "", "status")
	asJSON := runCLI(t, q.URL, "", "status", "--json")
	require.Zero(t, human.code, human.stderr)
	require.Zero(t, asJSON.code, asJSON.stderr)
	checkGolden(t, "status.golden", transcript(human, asJSON))
}

func TestGoldenFailed(t *testing.T) {
	t.Parallel()
	q := knownState(t)
	runs := []cliResult{
		runCLI(t, q.URL, "", "failed"),
		runCLI(t, q.URL, "", "failed", "--key", "cust-2"),
		runCLI(t, q.URL, "", "failed", "--limit", "1"),
		runCLI(t, q.URL, "", "failed", "--key", "nobody"),
	}
	for _, r := range runs {
		require.Zero(t, r.code, r.stderr)
	}
	checkGolden(t, "failed.golden", transcript(runs...))

	asJSON := runCLI(t, q.URL, "", "failed", "--json")
	require.Zero(t, asJSON.code, asJSON.stderr)
	var jobs []struct {
		ID         int64     `json:"id"`
		FinishedAt time.Time `json:"finished_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(asJSON.stdout), &jobs))
	require.Len(t, jobs, 2)
	for _, j := range jobs {
		require.WithinDuration(t, time.Now(), j.FinishedAt, time.Minute, "finished_at of job %d", j.ID)
		require.Equal(t, time.UTC, j.FinishedAt.Location(), "finished_at of job %d is UTC", j.ID)
	}
	asJSON.stdout = finishedAtRE.ReplaceAllString(asJSON.stdout, `"finished_at": "<finished_at>"`)
	checkGolden(t, "failed_json.golden", transcript(asJSON))
}

func TestGoldenReplaySkip(t *testing.T) {
	t.Parallel()
	q := knownState(t)
	ctx := context.Background()
	block := newTestClient(t, q, time.Hour, policy.Block)
	var runs []cliResult
	step := func(args ...string) cliResult {
		r := runCLI(t, q.URL, "", args...)
		runs = append(runs, r)
		return r
	}

	// Each ID is done on its own: one line each, a summary, non-zero when any was refused.
	requireOneLineError(t, step("replay", "1")) // done, not failed
	requireOneLineError(t, step("replay", "x")) // not an ID
	requireOneLineError(t, step("skip", "0"))   // not an ID
	requireOneLineError(t, step("skip", "99"))  // no such job
	require.Zero(t, step("skip", "2").code)     // releases cust-1 past its blocked seq 2
	require.Zero(t, step("skip", "2").code)     // skipping it again blocks nothing, says so
	r := step("skip", "4")                      // failed under the skip policy: blocks nothing, and says so
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "job 4 blocks nothing: its key had moved on already; left as it is\nskipped 0 of 1 jobs; 1 blocked nothing\n", r.stdout)
	requireOneLineError(t, step("skip", "3", "2")) // job 3 is queued: refused; job 2 is still done
	require.Equal(t, []string{
		"cust-1/1 done attempts=1", "cust-1/2 failed attempts=1", "cust-1/3 queued attempts=0",
		"cust-2/1 failed attempts=1", "cust-2/2 queued attempts=0",
		"cust-3/7 running attempts=1", "cust-4/1 running attempts=1",
	}, jobStates(t, q.Pool))

	// cust-1/3 runs after the skip (and cust-4/1's expired lease is recovered); replaying
	// seq 2 now would run it out of order: refused, and the IDs after it still go. cust-2/2
	// has not started: replaying cust-2/1 keeps the order.
	require.NoError(t, block.Complete(ctx, claimIDs(t, block, 3, 7)[3]))
	r = step("replay", "2", "4", "99")
	requireOneLineError(t, r)
	require.Contains(t, r.stdout, "replayed job 4\n")
	require.Equal(t, "cust-2/1 queued attempts=0", jobStates(t, q.Pool)[3])
	require.Zero(t, step("replay", "--force", "2").code)
	requireOneLineError(t, step("replay", "4", "1")) // both refused: 4 is queued now, 1 is done
	require.Equal(t, []string{
		"cust-1/1 done attempts=1", "cust-1/2 queued attempts=0", "cust-1/3 done attempts=1",
		"cust-2/1 queued attempts=0", "cust-2/2 queued attempts=0",
		"cust-3/7 running attempts=1", "cust-4/1 running attempts=2",
	}, jobStates(t, q.Pool))
	checkGolden(t, "replay_skip.golden", transcript(runs...))
}

func TestGoldenArchive(t *testing.T) {
	t.Parallel()
	q := knownState(t)
	runs := []cliResult{
		runCLI(t, q.URL, "", "archive", "--older-than", "1h"),
		runCLI(t, q.URL, "", "archive"),
		runCLI(t, q.URL, "", "archive"),
		runCLI(t, q.URL, "", "archive", "--batch", "0"),
		// cust-1/1 is archived: sending it again is a duplicate that does not run again.
		runCLI(t, q.URL, `{"key":"cust-9","seq":1}`+"\n"+`{"key":"cust-1","seq":1}`+"\n", "enqueue"),
	}
	for _, r := range runs[:3] {
		require.Zero(t, r.code, r.stderr)
	}
	requireOneLineError(t, runs[3])
	require.Zero(t, runs[4].code, runs[4].stderr)

	// Many done jobs, archived in batches of 2.
	many := orderedtest.New(t)
	c := newTestClient(t, many, time.Hour, policy.Block)
	ctx := context.Background()
	var events []ordered.Event
	for i := range 5 {
		events = append(events, ordered.Event{Key: fmt.Sprintf("k%d", i), Seq: 1})
	}
	_, err := c.EnqueueMany(ctx, events)
	require.NoError(t, err)
	for _, j := range claimIDs(t, c, 1, 2, 3, 4, 5) {
		require.NoError(t, c.Complete(ctx, j))
	}
	batched := runCLI(t, many.URL, "", "archive", "--batch", "2")
	require.Zero(t, batched.code, batched.stderr)
	require.Zero(t, jobCount(t, many.Pool))
	runs = append(runs, batched)

	checkGolden(t, "archive.golden", transcript(runs...))
	require.Equal(t, []string{
		"cust-1/2 blocked attempts=1", "cust-1/3 queued attempts=0",
		"cust-2/1 failed attempts=1", "cust-2/2 queued attempts=0",
		"cust-3/7 running attempts=1", "cust-4/1 running attempts=1",
		"cust-9/1 queued attempts=0",
	}, jobStates(t, q.Pool))
}

// Usage errors are one line on stderr and a non-zero exit, before any database is needed.
func TestGoldenUsageErrors(t *testing.T) {
	t.Parallel()
	var runs []cliResult
	for _, args := range [][]string{
		{"bogus"},
		{"status", "--bogus"},
		{"status", "extra"},
		{"replay"},
		{"work"},
		{"work", "--exec", "true", "--policy", "sometimes"},
		{"demo", "--policy", "sometimes"},
		{"demo", "--workers", "0"},
		{"gaps", "release"},
		{"gaps", "relase", "k"},
		{"work", "--exec", "echo", "hi"},
		{"archive", "--batch", "0"},
		{"archive", "--older-than", "-1h"},
		{"failed", "--limit", "0"},
		{"failed", "--limit", "-1"},
		{"verify", "--hosts", "-1"},
		{"enqueue", "a.jsonl", "b.jsonl"},
	} {
		r := runCLI(t, "", "", args...)
		requireOneLineError(t, r)
		runs = append(runs, r)
	}
	checkGolden(t, "usage_errors.golden", transcript(runs...))
}

// A database that cannot be reached is a one-line error too.
func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2",
		"not a url ::",
	} {
		for _, args := range [][]string{{"migrate"}, {"status"}, {"enqueue", "-"}} {
			r := runCLI(t, url, `{"key":"a","seq":1}`, args...)
			requireOneLineError(t, r)
			require.Empty(t, r.stdout)
			require.False(t, strings.Contains(r.stderr, "panic"), r.stderr)
		}
	}
}
