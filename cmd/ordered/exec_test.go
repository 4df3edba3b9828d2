package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/ordered/orderedtest"
)

// treeScript is a command whose process tree has every shape the guard must end, for the job
// TAG = $ORDERED_SEQ-$ORDERED_ATTEMPT, writing into the directory $1: the script itself,
// which traps SIGTERM (the trap pauses 1s, notes whether the SIGTERM-ignoring child still
// runs, then exits); a child in its process group; a child that ignores SIGTERM; and a process
// that left the group (setsid) and whose parent exited (double fork). It lists them in
// pids-TAG, one "pid starttime" a line (the start time tells a process from a later one that
// reuses its pid), writes started-TAG once they all run, and waits.
const treeScript = `#!/bin/sh
d=$1
tag=$ORDERED_SEQ-$ORDERED_ATTEMPT
record() { echo "$1 $(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f20)" >> "$d/pids-$tag"; }
trap 'echo trapped >> "$d/trap-$tag"; sleep 1; kill -0 $ignorer && echo ignorer-alive >> "$d/trap-$tag"; echo cleaned >> "$d/trap-$tag"; exit 143' TERM
record $$
sleep 1000 &
record $!
sh -c 'trap "" TERM; : > "$0"; exec sleep 1000' "$d/ignoring-$tag" &
ignorer=$!
until [ -e "$d/ignoring-$tag" ]; do sleep 0.01; done
record $ignorer
setsid sh -c 'sh -c "echo \$\$ > \"\$0.tmp\"; mv \"\$0.tmp\" \"\$0\"; exec sleep 1000" "$0" &' "$d/escaped-$tag"
until [ -s "$d/escaped-$tag" ]; do sleep 0.01; done
record "$(cat "$d/escaped-$tag")"
echo started > "$d/started-$tag"
wait
`

// writeScript writes an executable script into a directory of its own and returns its path.
func writeScript(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o755))
	return path
}

// treeRun is where a treeScript writes: the test's directory for it, and the script.
type treeRun struct {
	dir, script string
}

func newTreeRun(t *testing.T) treeRun {
	return treeRun{dir: t.TempDir(), script: writeScript(t, "tree.sh", treeScript)}
}

// command is the --exec command that runs the script: the script as it is, or within a
// pipeline or a list (so that /bin/sh stays its parent) by shape.
func (r treeRun) command(shape string) string {
	return strings.ReplaceAll(shape, "SCRIPT", fmt.Sprintf("'%s' '%s'", r.script, r.dir))
}

func (r treeRun) file(name string) string {
	b, _ := os.ReadFile(filepath.Join(r.dir, name))
	return string(b)
}

// treeProc is a process that a treeScript recorded.
type treeProc struct {
	pid   int
	start string // field 22 of /proc/PID/stat
}

// waitTree waits for the tree of the job tag to run and returns its processes, which the
// test's end kills whatever happens.
func (r treeRun) waitTree(t *testing.T, w *cliProc, tag string) []treeProc {
	t.Helper()
	require.Eventually(t, func() bool { return r.file("started-"+tag) != "" },
		20*time.Second, 10*time.Millisecond, "the command of %s never started; worker stderr:\n%s", tag, w.stderr())
	var procs []treeProc
	for _, line := range strings.Split(strings.TrimSpace(r.file("pids-"+tag)), "\n") {
		pid, start, _ := strings.Cut(line, " ")
		n, err := strconv.Atoi(pid)
		require.NoError(t, err, "pids-%s: %q", tag, line)
		procs = append(procs, treeProc{pid: n, start: start})
	}
	require.Len(t, procs, 4, "pids-%s", tag)
	t.Cleanup(func() {
		for _, p := range procs {
			if p.alive() {
				_ = syscall.Kill(p.pid, syscall.SIGKILL)
			}
		}
	})
	for _, p := range procs {
		require.True(t, p.alive(), "process %d of %s", p.pid, tag)
	}
	return procs
}

// alive reports whether the process runs: not gone, not a zombie, not a later one with its pid.
func (p treeProc) alive() bool {
	if processGone(p.pid) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 19 && fields[19] == p.start
}

// running lists the processes of procs that still run.
func running(procs []treeProc) []int {
	var pids []int
	for _, p := range procs {
		if p.alive() {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// processesOf lists, as "pid comm", the live processes other than the worker w that carry w's
// ORDERED_TEST_DIR in their environment: the guards, shells and commands w started, and
// whatever those started, recorded or not.
func processesOf(w *cliProc) []string {
	want := []byte("ORDERED_TEST_DIR=" + w.dir + "\x00")
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == w.cmd.Process.Pid || processGone(pid) {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(append([]byte{0}, env...), append([]byte{0}, want...)) {
			continue
		}
		comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
		out = append(out, e.Name()+" "+strings.TrimSpace(string(comm)))
	}
	return out
}

// requireTreeGone waits until no process of the tree, nor any other that w started, runs.
func requireTreeGone(t *testing.T, w *cliProc, procs []treeProc, within time.Duration, msg string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return len(running(procs)) == 0 && len(processesOf(w)) == 0
	}, within, 10*time.Millisecond, "%s: still running %v, and of the worker's %v", msg, running(procs), processesOf(w))
}

// requireTrapRan checks that the tree's script got SIGTERM and finished its trap while its
// SIGTERM-ignoring child still ran: SIGKILL came only after a grace.
func requireTrapRan(t *testing.T, r treeRun, tag string) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(r.file("trap-"+tag), "cleaned") },
		10*time.Second, 10*time.Millisecond, "the TERM trap of %s did not run to its end: %q", tag, r.file("trap-"+tag))
	require.Equal(t, "trapped\nignorer-alive\ncleaned\n", r.file("trap-"+tag),
		"SIGKILL must come only after the grace, when the trap has finished")
}

// When the command exits, what it left running ends before its job counts as done, the same
// way as a command that must stop: SIGTERM to all (the script's trap runs), SIGKILL after the
// grace (the child that ignores SIGTERM).
func TestWorkExecEndsLeftoversBeforeDone(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	r := newTreeRun(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	// The shell leaves the tree running in the background and exits 0 on SIGUSR1.
	w := startCLIWorker(t, q, "--kill-grace", "3s", "--exec",
		r.command(`trap 'exit 0' USR1; SCRIPT & echo $$ > "$ORDERED_TEST_DIR/pid"; wait`))
	procs := r.waitTree(t, w, "1-1")
	shell := w.waitPID(t, "pid")
	require.NoError(t, syscall.Kill(shell, syscall.SIGUSR1))

	require.Eventually(t, func() bool { return jobStatesAre(q.Pool, "k/1 done attempts=1") },
		20*time.Second, time.Millisecond, "worker stderr:\n%s", w.stderr())
	require.Empty(t, running(procs), "the job is done while processes of its command run")
	require.Empty(t, processesOf(w), "the job is done while processes of its command run")
	requireTrapRan(t, r, "1-1")
}

// The command's environment: the fencing token and the idempotency key; not the worker's
// database credentials, unless --exec-database-env.
func TestWorkExecEnvironment(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	credentials := []string{
		"DATABASE_URL=" + q.URL, "PGPASSWORD=hunter2", "PGPASSFILE=/nonexistent/pgpass",
		"PGAPPNAME=ordered-env-test", "PGCONNECT_TIMEOUT=10",
	}
	enqueueCLI(t, q, `{"key":"a","seq":1}
{"key":"b","seq":1}
`)
	// Key a fails its first attempt, so that its second claim has a higher claim version.
	w := startCLIWorkerEnv(t, q, credentials, "--exec",
		`env > "$ORDERED_TEST_DIR/env-$ORDERED_KEY-$ORDERED_ATTEMPT"; [ "$ORDERED_KEY$ORDERED_ATTEMPT" != a1 ]`)
	require.Eventually(t, func() bool {
		return jobStatesAre(q.Pool, "a/1 done attempts=2", "b/1 done attempts=1")
	}, 2*time.Minute, 20*time.Millisecond, "worker stderr:\n%s", w.stderr())

	env := func(name string) map[string]string {
		vars := map[string]string{}
		for _, line := range strings.Split(w.file(name), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				vars[k] = v
			}
		}
		require.NotEmpty(t, vars, name)
		return vars
	}
	a1, a2, b1 := env("env-a-1"), env("env-a-2"), env("env-b-1")
	require.Equal(t, "a/1", a1["ORDERED_IDEMPOTENCY_KEY"])
	require.Equal(t, "a/1", a2["ORDERED_IDEMPOTENCY_KEY"], "the same on every attempt")
	require.Equal(t, "b/1", b1["ORDERED_IDEMPOTENCY_KEY"])
	v1, err := strconv.ParseInt(a1["ORDERED_CLAIM_VERSION"], 10, 64)
	require.NoError(t, err)
	v2, err := strconv.ParseInt(a2["ORDERED_CLAIM_VERSION"], 10, 64)
	require.NoError(t, err)
	require.Greater(t, v2, v1, "every claim of the job has a higher claim version")
	var version int64
	require.NoError(t, q.Pool.QueryRow(context.Background(),
		"SELECT claim_version FROM ordered_jobs_now WHERE key = 'a'").Scan(&version))
	require.Equal(t, version, v2, "ORDERED_CLAIM_VERSION is the claim's")
	for name, vars := range map[string]map[string]string{"a-1": a1, "a-2": a2, "b-1": b1} {
		for k := range vars {
			require.False(t, k == "DATABASE_URL" || strings.HasPrefix(k, "PG"),
				"the command of %s got the worker's %s", name, k)
		}
	}

	// With --exec-database-env the command gets them, DATABASE_URL as the worker connects.
	other := orderedtest.New(t)
	enqueueCLI(t, other, `{"key":"c","seq":1}`+"\n")
	w = startCLIWorkerEnv(t, other, credentials, "--exec-database-env", "--exec", `env > "$ORDERED_TEST_DIR/env"`)
	require.Eventually(t, func() bool { return jobStatesAre(other.Pool, "c/1 done attempts=1") },
		20*time.Second, 20*time.Millisecond, "worker stderr:\n%s", w.stderr())
	c1 := env("env")
	require.Equal(t, other.URL, c1["DATABASE_URL"], "--database-url, not the worker's DATABASE_URL")
	require.Equal(t, "hunter2", c1["PGPASSWORD"])
	require.Equal(t, "ordered-env-test", c1["PGAPPNAME"])
}

// orderScript is the --exec command of the order test, for a directory $1 shared by the
// workers and a treeScript $2: it records an order violation if a process that an earlier
// command recorded still runs, then runs the tree for seq 1's first attempt; other jobs end.
const orderScript = `#!/bin/sh
d=$1
tag=$ORDERED_SEQ-$ORDERED_ATTEMPT
alive() { # pid starttime: that process runs (not gone, not a zombie, not a later one with its pid)
	s=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$s" ] && [ "${s%% *}" != Z ] && [ "$(echo "$s" | cut -d' ' -f20)" = "$2" ]
}
for f in "$d"/pids-*; do
	[ -e "$f" ] || continue
	while read -r pid start; do
		if alive "$pid" "$start"; then echo "$tag started while $pid of ${f##*/pids-} runs" >> "$d/violations"; fi
	done < "$f"
done
echo "$tag" >> "$d/ran"
[ "$tag" = 1-1 ] && exec "$2" "$d"
exit 0
`

// Per-key order through a SIGKILLed worker: seq 1's command runs on worker A, A is killed,
// and worker B runs seq 1 again and then seq 2; no command of B starts while a process of
// seq 1's first command runs.
func TestWorkSIGKILLKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	r := newTreeRun(t)
	order := writeScript(t, "order.sh", orderScript)
	command := fmt.Sprintf("'%s' '%s' '%s'", order, r.dir, r.script)
	enqueueCLI(t, q, `{"key":"k","seq":1}
{"key":"k","seq":2}
`)
	args := []string{"--lease", "8s", "--kill-grace", "3s", "--exec", command}
	a := startCLIWorker(t, q, args...)
	procs := r.waitTree(t, a, "1-1")
	b := startCLIWorker(t, q, args...)
	require.Eventually(t, func() bool { return strings.Contains(b.stderr(), "worker started") },
		time.Minute, 10*time.Millisecond, "worker B stderr:\n%s", b.stderr())

	a.signal(t, syscall.SIGKILL)
	require.Equal(t, -1, a.wait(t, 5*time.Second), "killed by a signal")
	require.Eventually(t, func() bool {
		return jobStatesAre(q.Pool, "k/1 done attempts=2", "k/2 done attempts=1")
	}, 40*time.Second, 20*time.Millisecond, "worker B stderr:\n%s", b.stderr())

	require.Empty(t, r.file("violations"), "a command started while seq 1's first command ran")
	require.Equal(t, "1-1\n1-2\n2-1\n", r.file("ran"))
	require.Empty(t, running(procs))
	require.Empty(t, processesOf(a))
	requireTrapRan(t, r, "1-1")
}

// work --exec --batch: each key's jobs come to one command as JSON Lines, in seq order; exit 0
// completes the batch; otherwise the seqs the command appended to ORDERED_PROGRESS_FILE are
// completed, the exit status applies to the next job (65 fails it for good, 3 retries it) and
// the rest go back with their attempts not counted.
func TestWorkExecBatchProgress(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"a","seq":1,"payload":{"n":1}}
{"key":"a","seq":2}
{"key":"a","seq":3}
{"key":"b","seq":1}
{"key":"b","seq":2}
{"key":"b","seq":3}
{"key":"b","seq":4}
{"key":"b","seq":5}
{"key":"c","seq":1}
{"key":"c","seq":2}
{"key":"c","seq":3}
`)
	w := startCLIWorker(t, q, "--batch", "10", "--exec", `d=$ORDERED_TEST_DIR
cat > "$d/in-$ORDERED_KEY-$ORDERED_FIRST_SEQ"
echo "$ORDERED_KEY $ORDERED_BATCH_SIZE $ORDERED_FIRST_SEQ $ORDERED_LAST_SEQ" >> "$d/calls"
case "$ORDERED_KEY-$ORDERED_FIRST_SEQ" in
b-1) echo 1 >> "$ORDERED_PROGRESS_FILE"; echo 2 >> "$ORDERED_PROGRESS_FILE"; exit 65;;
c-1) echo 1 >> "$ORDERED_PROGRESS_FILE"; exit 3;;
esac`)
	require.Eventually(t, func() bool {
		return jobStatesAre(q.Pool,
			"a/1 done attempts=1", "a/2 done attempts=1", "a/3 done attempts=1",
			"b/1 done attempts=1", "b/2 done attempts=1", "b/3 blocked attempts=1",
			"b/4 queued attempts=0", "b/5 queued attempts=0",
			"c/1 done attempts=1", "c/2 done attempts=2", "c/3 done attempts=1")
	}, 2*time.Minute, 20*time.Millisecond, "worker stderr:\n%s\njobs: %v", w.stderr(), jobStates(t, q.Pool))

	calls := strings.Split(strings.TrimSpace(w.file("calls")), "\n")
	slices.Sort(calls)
	require.Equal(t, []string{"a 3 1 3", "b 5 1 5", "c 2 2 3", "c 3 1 3"}, calls)
	var lines []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(w.file("in-a-1")), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		lines = append(lines, m)
	}
	require.Len(t, lines, 3)
	require.Equal(t, "a", lines[0]["key"])
	require.EqualValues(t, 1, lines[0]["seq"])
	require.EqualValues(t, 1, lines[0]["attempt"])
	require.Equal(t, "a/1", lines[0]["idempotency_key"])
	require.Equal(t, map[string]any{"n": float64(1)}, lines[0]["payload"])
	require.EqualValues(t, 3, lines[2]["seq"])
	require.Contains(t, w.file("in-c-2"), `"attempt":2`)
}

// --job-timeout ends a command that runs past it (SIGTERM to its processes; what it does then
// does not complete the job, here an exit 0 from its trap) and retries the job, the attempt
// counted: a command that always hangs fails its job for good after --max-attempts, and the
// key's next job never starts (block policy).
func TestWorkExecJobTimeoutEndsTheCommandAndCountsTheAttempt(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}
{"key":"k","seq":2}
`)
	w := startCLIWorker(t, q, "--job-timeout", "1s", "--max-attempts", "2", "--exec", `d=$ORDERED_TEST_DIR
echo "$ORDERED_SEQ" >> "$d/started"
[ "$ORDERED_SEQ" = 1 ] || exit 0
trap 'exit 0' TERM
sleep 1000 &
wait`)
	require.Eventually(t, func() bool {
		return jobStatesAre(q.Pool, "k/1 blocked attempts=2", "k/2 queued attempts=0")
	}, 2*time.Minute, 20*time.Millisecond, "worker stderr:\n%s\njobs: %v", w.stderr(), jobStates(t, q.Pool))
	var lastError string
	require.NoError(t, q.Pool.QueryRow(context.Background(), "SELECT last_error FROM ordered_jobs_now WHERE key = 'k' AND seq = 1").Scan(&lastError))
	require.Equal(t, "ordered: job timed out after 1s", lastError)
	require.NotContains(t, w.file("started"), "2", "the key's next job started")
	require.Empty(t, processesOf(w), "processes of a command that timed out still run")
}
