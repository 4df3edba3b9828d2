package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/orderedq/ordered/cmd/ordered/internal/cli"
)

var update = flag.Bool("update", false, "rewrite golden files")

// goldenDir holds the golden files and input streams of the CLI tests.
const goldenDir = "../../testdata/cli"

// cliBin is the ordered binary built once by TestMain, for the tests that need a real process
// (signals, process groups, Pdeathsig). cliBuildFlags gains -race under `go test -race`.
var (
	cliBin        string
	cliBuildFlags []string
)

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "ordered-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "cli test:", err)
		os.Exit(1)
	}
	cliBin = filepath.Join(dir, "ordered")
	args := append(append([]string{"build"}, cliBuildFlags...), "-o", cliBin, ".")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "cli test: go %s: %v\n%s", strings.Join(args, " "), err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// cliResult is what one in-process run of the CLI printed and returned.
type cliResult struct {
	args           []string
	stdout, stderr string
	code           int
}

// runCLI runs the CLI in this process, as `ordered args...` with stdin, on the database URL
// (empty: none given).
func runCLI(t *testing.T, dbURL, stdin string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	full := args
	if dbURL != "" {
		full = append(append([]string{}, args...), "--database-url", dbURL)
	}
	var stdout, stderr bytes.Buffer
	code := cli.Main(ctx, full, strings.NewReader(stdin), &stdout, &stderr)
	return cliResult{args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// transcript renders runs as a golden file: the command line, then what it printed, then its
// stderr and exit code when it failed.
func transcript(runs ...cliResult) string {
	var b strings.Builder
	for i, r := range runs {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "$ ordered %s\n", strings.Join(r.args, " "))
		b.WriteString(r.stdout)
		if r.stderr != "" {
			fmt.Fprintf(&b, "[stderr]\n%s", r.stderr)
		}
		if r.code != 0 {
			fmt.Fprintf(&b, "[exit %d]\n", r.code)
		}
	}
	return b.String()
}

// checkGolden compares got with testdata/cli/name, or rewrites the file under -update.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	if *update {
		require.NoError(t, os.MkdirAll(goldenDir, 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test ./cmd/ordered -update")
	require.Equal(t, string(want), got, "output differs from %s (run go test ./cmd/ordered -update if the change is intended)", path)
}

// requireOneLineError checks the contract of a failure: a non-zero exit code and exactly one
// line on stderr, prefixed with "ordered: ".
func requireOneLineError(t *testing.T, r cliResult) {
	t.Helper()
	require.NotZero(t, r.code, "exit code; stdout %q", r.stdout)
	require.True(t, strings.HasPrefix(r.stderr, "ordered: "), "stderr %q", r.stderr)
	require.True(t, strings.HasSuffix(r.stderr, "\n"), "stderr %q", r.stderr)
	require.Equal(t, 1, strings.Count(r.stderr, "\n"), "stderr must be one line: %q", r.stderr)
}

// withSchema returns url with its search_path switched to schema.
var searchPathRE = regexp.MustCompile(`options=[^&]*`)

func withSchema(url, schema string) string {
	return searchPathRE.ReplaceAllString(url, "options=-csearch_path%3D"+schema)
}

// jobCount counts the rows of ordered_jobs.
func jobCount(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM ordered_jobs_now").Scan(&n))
	return n
}

// jobStates lists every job as "key/seq status attempts=N", by key and seq.
func jobStates(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	states, err := queryJobStates(pool)
	require.NoError(t, err)
	return states
}

// jobStatesAre reports whether the jobs are in states (as listed by jobStates); it does not
// fail the test, for require.Eventually.
func jobStatesAre(pool *pgxpool.Pool, states ...string) bool {
	got, err := queryJobStates(pool)
	return err == nil && slices.Equal(got, states)
}

func queryJobStates(pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(context.Background(),
		"SELECT key || '/' || seq || ' ' || status || ' attempts=' || attempts FROM ordered_jobs_now ORDER BY key, seq")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// processGone reports whether pid no longer runs: it does not exist, or it is a zombie that
// nobody reaps (an orphan's zombie may linger when PID 1 does not reap).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) S ...: the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
