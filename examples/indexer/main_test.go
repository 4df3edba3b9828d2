package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// runAsMainEnv makes the test binary run the program's main: the tests run the program as a
// real process, and it runs its workers as processes of the same binary.
const runAsMainEnv = "INDEXER_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runAsMainEnv) != "" {
		main()
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// The whole backfill as a user runs it: its checks pass, the crash and the stale worker
// happened, and the index, read here on its own, has every range once.
func TestBackfillThroughCrashAndStaleWorker(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	stdout, stderr, err := runIndexer(t, "--database-url", q.URL, "--lease", "3s")
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout, stderr)

	require.Contains(t, stdout, "all 9 checks passed")
	require.NotContains(t, stdout, "check FAIL")
	require.Regexp(t, `killed worker crash with SIGKILL in the middle of range \d+: worker crash: signal: killed`, stdout)
	require.Regexp(t, `progress: \d+/200 ranges indexed, watermark block \d+`, stdout)
	require.Contains(t, stdout, "progress: 200/200 ranges indexed, watermark block 2000000")

	stale := summary(t, stdout, "stale")
	require.GreaterOrEqual(t, stale[2], int64(1), "the stale worker's completion was refused as lost ownership")
	// The crashed worker's range is recovered by one of the two that live on (which one, and
	// who recovers the stale worker's range, depends on the machine's speed; the program's
	// checks say that both ranges were indexed once, by another worker).
	worker := summary(t, stdout, "worker")
	require.GreaterOrEqual(t, stale[1]+worker[1], int64(1), "expired leases recovered")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ranges, runs, events int64
	require.NoError(t, q.Pool.QueryRow(ctx, `SELECT count(DISTINCT range_from), count(*), sum(events) FROM index_runs`).
		Scan(&ranges, &runs, &events))
	require.Equal(t, int64(200), ranges)
	require.Equal(t, int64(200), runs, "no range indexed twice")
	require.Equal(t, int64(2000), events)
}

// The checks fail, and the command exits 1, when a range is indexed twice and one is missing.
func TestCheckFailsOnABadIndex(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	args := []string{"check", "--database-url", q.URL, "--ranges", "3", "--range-size", "1000"}
	stdout, stderr, err := runIndexer(t, args...) // creates the tables; nothing indexed yet
	require.Error(t, err)
	require.Contains(t, stdout, "check FAIL every range indexed (3 of 3 missing)", stderr)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = q.Pool.Exec(ctx, `
		INSERT INTO block_events (block, range_from) VALUES (7, 0), (1007, 1000);
		INSERT INTO index_runs (range_from, range_to, events, worker, attempt, claim_version)
		VALUES (0, 999, 1, 'a', 1, 1), (1000, 1999, 1, 'a', 1, 1), (1000, 1999, 1, 'b', 2, 2)`)
	require.NoError(t, err)
	stdout, _, err = runIndexer(t, args...)
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	for _, line := range []string{
		"check FAIL every range indexed (1 of 3 missing)",
		"check FAIL no range indexed twice (1 indexed more than once)",
		"check ok   nothing indexed outside the plan (0 ranges outside it)",
		"check FAIL every event stored and counted once (2 stored, 3 counted, want 3)",
		"check FAIL watermark at the end (block 2000 of 3000)",
	} {
		require.Contains(t, stdout, line)
	}
}

// runIndexer runs the program with args and returns its output. Its worker processes share
// its process group, which is killed when the test ends, so none outlives a failed test.
func runIndexer(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), runAsMainEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err = cmd.Wait()
	return out.String(), errOut.String(), err
}

// summary returns a worker's last line's completed, recovered and lost counts.
func summary(t *testing.T, stdout, worker string) [3]int64 {
	t.Helper()
	m := regexp.MustCompile(fmt.Sprintf(`\[%s\] %s`, worker,
		strings.ReplaceAll(summaryFormat, "%d", `(\d+)`))).FindStringSubmatch(stdout)
	require.NotNil(t, m, "worker %s's summary in:\n%s", worker, stdout)
	var n [3]int64
	_, err := fmt.Sscanf(strings.Join(m[1:], " "), "%d %d %d", &n[0], &n[1], &n[2])
	require.NoError(t, err)
	return n
}
