package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/cmd/ordered/internal/cli"
	"github.com/orderedq/ordered/internal/pgbouncer"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

var poolerModes = []pgbouncer.Mode{pgbouncer.Session, pgbouncer.Transaction}

// Several `ordered migrate` at once through PgBouncer migrate an empty schema once; the others
// find it up to date.
func TestPoolerMigrateConcurrently(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			ref := orderedtest.New(t) // migrated by the library, for the number of migrations
			name := ref.Schema + "_cli"
			_, err := ref.Pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize())
			require.NoError(t, err)
			t.Cleanup(func() {
				_, err := ref.Pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
				require.NoError(t, err)
			})
			url := pgbouncer.New(t, mode, name).URL(name)

			const n = 2 * pgbouncer.PoolSize // more than the server connections: they serve several
			results := make([]cliResult, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = runBin(t, "", "--pooler", string(mode), "--database-url", url, "migrate")
				}()
			}
			wg.Wait()
			for _, r := range results {
				require.Zero(t, r.code, "migrate: %s", r.stderr)
			}
			var want, got int
			require.NoError(t, ref.Pool.QueryRow(ctx, "SELECT count(*) FROM ordered_migrations").Scan(&want))
			require.NoError(t, ref.Pool.QueryRow(ctx,
				"SELECT count(*) FROM "+pgx.Identifier{name}.Sanitize()+".ordered_migrations").Scan(&got))
			require.Equal(t, want, got, "every migration recorded once")
		})
	}
}

// poolerScript is the --exec command of the pooler test: it logs the run, and fails bad/1 for
// good.
const poolerScript = `printf '%s %s %s\n' "$ORDERED_KEY" "$ORDERED_SEQ" "$ORDERED_ATTEMPT" >> "$ORDERED_TEST_DIR/runs.log"
[ "$ORDERED_KEY/$ORDERED_SEQ" = bad/1 ] && exit 65
exit 0`

// Through PgBouncer in each mode: `ordered enqueue` of JSON Lines files (several at once),
// `ordered work --exec` draining them while PgBouncer is restarted, each key's jobs in order
// and none run twice in one attempt, and the admin commands on a blocked key.
func TestPoolerEnqueueWorkAdmin(t *testing.T) {
	t.Parallel()
	for _, mode := range poolerModes {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			q := orderedtest.New(t)
			bouncer := pgbouncer.New(t, mode, q.Schema)
			url := bouncer.URL(q.Schema)
			ordered := func(stdin string, args ...string) cliResult {
				t.Helper()
				r := runBin(t, stdin, append([]string{"--pooler", string(mode), "--database-url", url}, args...)...)
				require.Zero(t, r.code, "ordered %s: %s", strings.Join(args, " "), r.stderr)
				return r
			}

			const keys, seqs, files = 6, 15, 3
			dir := t.TempDir()
			var wg sync.WaitGroup
			for f := range files {
				var jsonl strings.Builder
				for k := f; k < keys; k += files {
					for s := 1; s <= seqs; s++ {
						fmt.Fprintf(&jsonl, `{"key":"k%d","seq":%d,"kind":"p","payload":{"n":%d}}`+"\n", k, s, s)
					}
				}
				if f == 0 {
					jsonl.WriteString(`{"key":"bad","seq":1,"payload":{}}` + "\n" + `{"key":"bad","seq":2,"payload":{}}` + "\n")
				}
				path := filepath.Join(dir, fmt.Sprintf("events-%d.jsonl", f))
				require.NoError(t, os.WriteFile(path, []byte(jsonl.String()), 0o644))
				wg.Add(1)
				go func() {
					defer wg.Done()
					ordered("", "enqueue", path)
				}()
			}
			wg.Wait()
			require.Equal(t, keys*seqs+2, jobCount(t, q.Pool))

			w := startCLIWorker(t, &orderedtest.Queue{URL: url}, "--pooler", string(mode),
				"--workers", "4", "--lease", "10s", "--policy", "block", "--exec", poolerScript)
			count := func(where string) int {
				var n int
				require.NoError(t, q.Pool.QueryRow(context.Background(),
					"SELECT count(*) FROM ordered_jobs_now WHERE "+where).Scan(&n))
				return n
			}
			require.Eventually(t, func() bool { return count("status = 'done'") >= keys*seqs/3 },
				3*time.Minute, 10*time.Millisecond, "a third done; worker stderr:\n%s", w.stderr())
			bouncer.Restart()
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("jobs:\n%s", strings.Join(jobStates(t, q.Pool), "\n"))
				}
			})
			require.Eventually(t, func() bool {
				return count("status = 'done'") == keys*seqs && count("key = 'bad' AND seq = 1 AND status = 'blocked'") == 1
			},
				3*time.Minute, 10*time.Millisecond, "drained")

			var status cli.StatusJSON
			require.NoError(t, json.Unmarshal([]byte(ordered("", "status", "--json").stdout), &status))
			require.Equal(t, cli.StatusJSON{Queued: 1, Done: keys * seqs, Blocked: 1, BlockedKeyCount: 1,
				BlockedKeys: status.BlockedKeys, OldestReadySeconds: status.OldestReadySeconds}, status)
			require.Len(t, status.BlockedKeys, 1)
			require.Equal(t, "bad", status.BlockedKeys[0].Key)
			var failed []cli.FailedJSON
			require.NoError(t, json.Unmarshal([]byte(ordered("", "failed", "--json").stdout), &failed))
			require.Len(t, failed, 1)
			require.Equal(t, "bad", failed[0].Key)
			id := strconv.FormatInt(failed[0].ID, 10)

			ordered("", "replay", id) // it runs, its attempts counted anew, and fails again
			require.Eventually(t, func() bool {
				return strings.Count(w.file("runs.log"), "bad 1 ") == 2 && count("key = 'bad' AND seq = 1 AND status = 'blocked'") == 1
			}, 3*time.Minute, 10*time.Millisecond, "replayed; worker stderr:\n%s", w.stderr())
			ordered("", "skip", id) // bad/2 runs
			require.Eventually(t, func() bool { return count("status = 'done'") == keys*seqs+1 },
				3*time.Minute, 10*time.Millisecond, "skipped; worker stderr:\n%s", w.stderr())
			require.Zero(t, count("status IN ('running', 'queued')"), "none left running or queued")

			checkRunLog(t, w.file("runs.log"), keys, seqs)
		})
	}
}

// checkRunLog checks the runs a drain logged ("key seq attempt" a line, in the order they
// ran): each key's jobs in seq order, none run twice in one attempt, every job run. The key
// "bad" is the admin commands': its head ran, was replayed and ran again, then skipped.
func checkRunLog(t *testing.T, log string, keys, seqs int) {
	t.Helper()
	last := map[string]int{}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var key string
		var seq, attempt int
		_, err := fmt.Sscanf(line, "%s %d %d", &key, &seq, &attempt)
		require.NoError(t, err, "line %q", line)
		if key == "bad" {
			seen[fmt.Sprintf("%s/%d", key, seq)] = true
			continue
		}
		require.GreaterOrEqual(t, seq, last[key], "%s/%d ran after %s/%d", key, seq, key, last[key])
		last[key] = seq
		run := fmt.Sprintf("%s/%d#%d", key, seq, attempt)
		require.False(t, seen[run], "%s ran twice in one attempt", run)
		seen[run] = true
	}
	for k := range keys {
		for s := 1; s <= seqs; s++ {
			require.True(t, seen[fmt.Sprintf("k%d/%d#1", k, s)] || seen[fmt.Sprintf("k%d/%d#2", k, s)],
				"k%d/%d ran", k, s)
		}
	}
	require.Equal(t, 2, strings.Count(log, "bad 1 1\n"), "bad/1 ran, was replayed and ran again")
	require.True(t, seen["bad/2"], "bad/2 ran after the skip")
}

// A bad --pooler, and an exec mode in the URL that cannot work behind a transaction pooler,
// are one-line errors.
func TestPoolerFlagErrors(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "", "--pooler", "statement", "status")
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "want none, session or transaction")
	u, err := url.Parse(orderedtest.DatabaseURL())
	require.NoError(t, err)
	q := u.Query()
	q.Set("default_query_exec_mode", "describe_exec")
	u.RawQuery = q.Encode()
	r = runCLI(t, u.String(), "", "--pooler", "transaction", "status")
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "describe_exec does not work behind a transaction pooler")
}
