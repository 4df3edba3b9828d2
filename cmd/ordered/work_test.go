package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
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

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/execguard"
	"github.com/orderedq/ordered/ordered/orderedtest"
)

// cliProc is the CLI running as a real process (the binary built by TestMain). Its output
// goes to files, so that commands it starts and that outlive it cannot hold a pipe open.
type cliProc struct {
	cmd      *exec.Cmd
	dir      string
	done     chan struct{}
	waitErr  error
	exitedAt time.Time
}

// startCLIWorker starts `ordered work --database-url URL args...`; the commands it runs find
// their scratch directory in $ORDERED_TEST_DIR. The process is killed when the test ends.
func startCLIWorker(t *testing.T, q *orderedtest.Queue, args ...string) *cliProc {
	t.Helper()
	return startCLIWorkerEnv(t, q, nil, args...)
}

// startCLIWorkerEnv is startCLIWorker with env added to the worker's environment.
func startCLIWorkerEnv(t *testing.T, q *orderedtest.Queue, env []string, args ...string) *cliProc {
	t.Helper()
	return startCLIWorkerVia(t, q, nil, env, args...)
}

// startCLIWorkerVia is startCLIWorkerEnv through launcher, a command line that ends by
// running the rest of its arguments (the worker's) in its own process, as exec does.
func startCLIWorkerVia(t *testing.T, q *orderedtest.Queue, launcher, env []string, args ...string) *cliProc {
	t.Helper()
	dir := t.TempDir()
	stdout, err := os.Create(filepath.Join(dir, "worker.stdout"))
	require.NoError(t, err)
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(dir, "worker.stderr"))
	require.NoError(t, err)
	defer stderr.Close()

	full := append([]string{cliBin, "work", "--database-url", q.URL, "--poll", "50ms"}, args...)
	full = append(launcher[:len(launcher):len(launcher)], full...)
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env = append(append(os.Environ(), env...), "ORDERED_TEST_DIR="+dir)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	require.NoError(t, cmd.Start())
	p := &cliProc{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		p.exitedAt = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("worker stderr:\n%s", p.stderr())
		}
	})
	return p
}

func (p *cliProc) stderr() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "worker.stderr"))
	return string(b)
}

// metricsAddr is the address that a worker started with --metrics-addr 127.0.0.1:0 logged it
// serves on.
func (p *cliProc) metricsAddr(t *testing.T) string {
	t.Helper()
	serving := regexp.MustCompile(`msg="ordered: serving /metrics, /healthz and /readyz" addr=(127\.0\.0\.1:[1-9]\d*)`)
	var addr string
	require.Eventually(t, func() bool {
		m := serving.FindStringSubmatch(p.stderr())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, time.Minute, 20*time.Millisecond, "no address logged; stderr:\n%s", p.stderr())
	return addr
}

// file reads a file the commands wrote in the scratch directory ("" when there is none).
func (p *cliProc) file(name string) string {
	b, _ := os.ReadFile(filepath.Join(p.dir, name))
	return string(b)
}

func (p *cliProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// wait waits up to d for the worker to exit and returns its exit code.
func (p *cliProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("worker still running %v later; stderr:\n%s", d, p.stderr())
	}
	var exit *exec.ExitError
	if errors.As(p.waitErr, &exit) {
		return exit.ExitCode()
	}
	require.NoError(t, p.waitErr)
	return 0
}

// waitPID waits for a command to write its pid to the file name, and kills that pid's
// process group when the test ends.
func (p *cliProc) waitPID(t *testing.T, name string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		var err error
		pid, err = strconv.Atoi(strings.TrimSpace(p.file(name)))
		return err == nil && pid > 0
	}, 10*time.Second, 10*time.Millisecond, "the command never started; worker stderr:\n%s", p.stderr())
	t.Cleanup(func() { _ = syscall.Kill(-pid, syscall.SIGKILL) }) // its own process group
	return pid
}

func enqueueCLI(t *testing.T, q *orderedtest.Queue, jsonl string) {
	t.Helper()
	r := runCLI(t, q.URL, jsonl, "enqueue")
	require.Zero(t, r.code, r.stderr)
}

// protocolScript is the --exec command of the protocol test: it keeps the payload and the job's
// environment, then exits by key (ok… 0, perm… 65, any other 3).
const protocolScript = `cat > "$ORDERED_TEST_DIR/payload-$ORDERED_JOB_ID-$ORDERED_ATTEMPT"
printf '%s|%s|%s|%s|%s\n' "$ORDERED_JOB_ID" "$ORDERED_KEY" "$ORDERED_SEQ" "$ORDERED_ATTEMPT" "$ORDERED_KIND" >> "$ORDERED_TEST_DIR/env.log"
case "$ORDERED_KEY" in ok*) exit 0;; perm*) exit 65;; *) exit 3;; esac`

// The exec protocol: payload on stdin, the job in the environment; exit 0 completes, 65 fails
// for good (the policy decides), any other exit retries until the attempts run out.
func TestWorkExecProtocol(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		policy string
		want   []string
	}{
		{"block", []string{
			"ok/1 done attempts=1", "ok/2 done attempts=1",
			"perm/1 blocked attempts=1", "perm/2 queued attempts=0",
			"retry/1 blocked attempts=2", "retry/2 queued attempts=0",
		}},
		{"skip", []string{
			"ok/1 done attempts=1", "ok/2 done attempts=1",
			"perm/1 failed attempts=1", "perm/2 failed attempts=1",
			"retry/1 failed attempts=2", "retry/2 failed attempts=2",
		}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			t.Parallel()
			q := orderedtest.New(t)
			// IDs by key and seq: ok 1-2, perm 3-4, retry 5-6.
			enqueueCLI(t, q, `{"key":"ok","seq":1,"kind":"greeting","payload":{"text":"hello, world","n":1}}
{"key":"ok","seq":2,"kind":"greeting.v2","payload":"it's \"quoted\""}
{"key":"perm","seq":1,"kind":"bad","payload":{"n":3}}
{"key":"perm","seq":2,"kind":"bad","payload":{"n":4}}
{"key":"retry","seq":1,"kind":"flaky","max_attempts":2}
{"key":"retry","seq":2,"kind":"flaky","max_attempts":2}
`)
			w := startCLIWorker(t, q, "--exec", protocolScript, "--workers", "3", "--policy", tc.policy)
			require.Eventually(t, func() bool {
				return jobStatesAre(q.Pool, tc.want...)
			}, 20*time.Second, 50*time.Millisecond, "jobs end as %v; worker stderr:\n%s", tc.want, w.stderr())

			w.signal(t, syscall.SIGTERM)
			require.Zero(t, w.wait(t, 10*time.Second), w.stderr())
			require.Equal(t, tc.want, jobStates(t, q.Pool))

			// Every attempt saw its job in the environment, and its payload on stdin.
			env := strings.Split(strings.TrimSpace(w.file("env.log")), "\n")
			require.Contains(t, env, "1|ok|1|1|greeting")
			require.Contains(t, env, "2|ok|2|1|greeting.v2")
			require.Contains(t, env, "3|perm|1|1|bad")
			require.Contains(t, env, "5|retry|1|1|flaky")
			require.Contains(t, env, "5|retry|1|2|flaky")
			require.NotContains(t, env, "5|retry|1|3|flaky")
			require.NotContains(t, env, "3|perm|1|2|bad", "exit 65 is not retried")
			if tc.policy == "block" {
				require.Len(t, env, 5, "the jobs behind a blocked key never run: %v", env)
			} else {
				require.Contains(t, env, "4|perm|2|1|bad")
				require.Contains(t, env, "6|retry|2|2|flaky")
				require.Len(t, env, 8, "%v", env)
			}
			require.JSONEq(t, `{"text":"hello, world","n":1}`, w.file("payload-1-1"))
			require.JSONEq(t, `"it's \"quoted\""`, w.file("payload-2-1"))
			require.JSONEq(t, `null`, w.file("payload-5-2"), "no payload is JSON null")

			var lastError string
			require.NoError(t, q.Pool.QueryRow(context.Background(),
				"SELECT last_error FROM ordered_jobs_now WHERE id = 3").Scan(&lastError))
			require.Contains(t, lastError, "65")
			require.NoError(t, q.Pool.QueryRow(context.Background(),
				"SELECT last_error FROM ordered_jobs_now WHERE id = 5").Scan(&lastError))
			require.Contains(t, lastError, "status 3")
		})
	}
}

// `work --max-attempts N` bounds the attempts of jobs enqueued without max_attempts: with 2, a
// job that keeps failing is blocked after its second attempt.
func TestWorkMaxAttemptsFlag(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"retry","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--exec", "exit 3", "--max-attempts", "2", "--policy", "block")

	// Wait until the second attempt is settled, whatever the outcome.
	var status string
	var attempts, maxAttempts int
	require.Eventually(t, func() bool {
		err := q.Pool.QueryRow(context.Background(),
			"SELECT status, attempts, max_attempts FROM ordered_jobs_now WHERE id = 1").Scan(&status, &attempts, &maxAttempts)
		return err == nil && attempts >= 2 && status != "running"
	}, 15*time.Second, 20*time.Millisecond, "worker stderr:\n%s", w.stderr())
	require.Equal(t, "blocked attempts=2", fmt.Sprintf("%s attempts=%d", status, attempts),
		"--max-attempts 2 must stop the retries after attempt 2 (the job has max_attempts=%d)", maxAttempts)
}

// drainThenStop waits until q has no job queued or running, then stops w with SIGTERM, which
// must end it with status 0.
func drainThenStop(t *testing.T, q *orderedtest.Queue, w *cliProc) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := orderedtest.WaitDrained(ctx, q.Pool)
	require.NoError(t, err, "worker stderr:\n%s", w.stderr())
	w.signal(t, syscall.SIGTERM)
	require.Zero(t, w.wait(t, time.Minute), w.stderr())
}

// A command that a signal ends (here the shell kills itself) fails its attempt with a status
// that names the signal, as a shell would report it (128+N).
func TestWorkExecSignalledCommandNamesTheSignal(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"sig","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--exec", "kill -KILL $$", "--max-attempts", "1", "--policy", "skip")
	drainThenStop(t, q, w)

	var status, lastError string
	require.NoError(t, q.Pool.QueryRow(context.Background(),
		"SELECT status, last_error FROM ordered_jobs WHERE id = 1").Scan(&status, &lastError))
	require.Equal(t, "failed", status)
	require.Equal(t, "command exited with status 137 (128+9: ended by SIGKILL)", lastError)
}

// A lost claim terminates the command's whole tree: the next heartbeat finds the claim gone,
// and every process gets SIGTERM (the script's trap runs), then SIGKILL after the grace.
func TestWorkLostClaimTerminatesCommand(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	r := newTreeRun(t)
	enqueueCLI(t, q, `{"key":"k","seq":1,"max_attempts":1}`+"\n")
	w := startCLIWorker(t, q, "--lease", "8s", "--kill-grace", "3s", "--exec", r.command("SCRIPT; true"))
	procs := r.waitTree(t, w, "1-1")

	tag, err := q.Pool.Exec(context.Background(),
		"UPDATE ordered_heads SET claim_version = claim_version + 1 WHERE job_id = 1 AND state = 'running'")
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())

	requireTrapRan(t, r, "1-1")
	requireTreeGone(t, w, procs, 10*time.Second, "the command outlived its lost claim")
	require.Eventually(t, func() bool { return strings.Contains(w.stderr(), "lost the claim") },
		5*time.Second, 20*time.Millisecond)
	select {
	case <-w.done:
		t.Fatalf("the worker exited after a lost claim; stderr:\n%s", w.stderr())
	default:
	}
}

// A worker killed with SIGKILL leaves nothing of its command behind, and long before the
// job's lease expires: every process gets SIGTERM (the script's trap runs), then SIGKILL after
// the grace.
func TestWorkSIGKILLLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	r := newTreeRun(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--lease", "30s", "--kill-grace", "3s", "--exec", r.command("SCRIPT | cat"))
	procs := r.waitTree(t, w, "1-1")
	require.NotEmpty(t, processesOf(w))

	w.signal(t, syscall.SIGKILL)
	require.Equal(t, -1, w.wait(t, 5*time.Second), "killed by a signal")
	requireTreeGone(t, w, procs, 15*time.Second, "the command outlived its SIGKILLed worker")
	requireTrapRan(t, r, "1-1")
	var leased bool
	require.NoError(t, q.Pool.QueryRow(context.Background(),
		"SELECT status = 'running' AND lease_until > now() FROM ordered_jobs_now WHERE id = 1").Scan(&leased))
	require.True(t, leased, "the command must be gone while its claim still holds")
}

// A guard killed outright (SIGKILL, the OOM killer) cannot end its command's tree, so its
// worker does, as the guard would: SIGTERM to every process (the script's trap runs), SIGKILL
// after the grace; and the job runs again only once all of it is gone.
func TestWorkSIGKILLedGuardLeavesNoOrphan(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	r := newTreeRun(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--kill-grace", "3s", "--exec", r.command("SCRIPT; true"))
	first := r.waitTree(t, w, "1-1")

	require.NoError(t, syscall.Kill(guardOf(t, w), syscall.SIGKILL))
	r.waitTree(t, w, "1-2")
	require.Empty(t, running(first), "the retry started while the killed attempt's processes ran")
	requireTrapRan(t, r, "1-1")
	var lastError string
	require.NoError(t, q.Pool.QueryRow(context.Background(), "SELECT last_error FROM ordered_jobs_now WHERE id = 1").Scan(&lastError))
	require.Equal(t, "the command's guard process was killed (signal: killed); what the command started was ended", lastError)
}

// When the worker and its guard are both killed outright, the command, the guard's child, gets
// SIGKILL with the guard. This command ignores SIGTERM and the grace is long, so nothing else
// could end it.
func TestWorkSIGKILLedWorkerAndGuardEndTheCommand(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--lease", "2m", "--kill-grace", "1m", "--exec",
		`trap "" TERM; echo $$ > "$ORDERED_TEST_DIR/pid"; exec sleep 1000`)
	command := w.waitPID(t, "pid")
	guard := guardOf(t, w)

	w.signal(t, syscall.SIGKILL)
	require.Equal(t, -1, w.wait(t, 5*time.Second), "killed by a signal")
	require.NoError(t, syscall.Kill(guard, syscall.SIGKILL))
	require.Eventually(t, func() bool { return processGone(command) }, 15*time.Second, 10*time.Millisecond,
		"the command outlived its SIGKILLed guard and worker")
}

// SIGTERM drains: the running job finishes and is done, no other job starts, exit 0.
func TestWorkSIGTERMDrains(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}
{"key":"k","seq":2}
{"key":"k","seq":3}
`)
	w := startCLIWorker(t, q, "--workers", "2",
		"--exec", `echo "$ORDERED_SEQ start" >> "$ORDERED_TEST_DIR/log"; sleep 1; echo "$ORDERED_SEQ end" >> "$ORDERED_TEST_DIR/log"`)
	require.Eventually(t, func() bool { return w.file("log") == "1 start\n" },
		10*time.Second, 10*time.Millisecond, "worker stderr:\n%s", w.stderr())
	signalled := time.Now()
	w.signal(t, syscall.SIGTERM)

	require.Zero(t, w.wait(t, 10*time.Second), w.stderr())
	require.Equal(t, "1 start\n1 end\n", w.file("log"), "the job ran to its end and nothing started after the signal")
	require.Equal(t, []string{"k/1 done attempts=1", "k/2 queued attempts=0", "k/3 queued attempts=0"},
		jobStates(t, q.Pool))
	require.Less(t, w.exitedAt.Sub(signalled), 5*time.Second)
}

// Signalling every ordered process at once (pkill ordered, killall, a service manager's stop)
// drains as SIGTERM to the worker alone does: the guard ignores SIGTERM and SIGINT, so the
// running command runs to its end and its job is done, its attempt counted once.
func TestWorkSignalsToEveryOrderedProcessDrain(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}
{"key":"k","seq":2}
`)
	w := startCLIWorker(t, q, "--exec",
		`echo "$ORDERED_SEQ start" >> "$ORDERED_TEST_DIR/log"; until [ -e "$ORDERED_TEST_DIR/go" ]; do sleep 0.01; done; echo "$ORDERED_SEQ end" >> "$ORDERED_TEST_DIR/log"`)
	require.Eventually(t, func() bool { return w.file("log") == "1 start\n" },
		10*time.Second, 10*time.Millisecond, "worker stderr:\n%s", w.stderr())
	guard := guardOf(t, w)

	w.signal(t, syscall.SIGTERM)
	require.NoError(t, syscall.Kill(guard, syscall.SIGTERM))
	require.NoError(t, syscall.Kill(guard, syscall.SIGINT))
	require.Eventually(t, func() bool { return strings.Contains(w.stderr(), "draining") && !signalsPending(guard) },
		5*time.Second, 10*time.Millisecond, "worker stderr:\n%s", w.stderr())
	require.NoError(t, os.WriteFile(filepath.Join(w.dir, "go"), nil, 0o644))

	require.Zero(t, w.wait(t, 10*time.Second), w.stderr())
	require.Equal(t, "1 start\n1 end\n", w.file("log"), "the command ran to its end and nothing started after the signals")
	require.Equal(t, []string{"k/1 done attempts=1", "k/2 queued attempts=0"}, jobStates(t, q.Pool))
}

// guardOf is the pid of the one guard process that w runs.
func guardOf(t *testing.T, w *cliProc) int {
	t.Helper()
	var guards []int
	for _, p := range processesOf(w) {
		pid, _ := strconv.Atoi(strings.Fields(p)[0])
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte(execguard.Name)) {
			guards = append(guards, pid)
		}
	}
	require.Len(t, guards, 1, "the worker's processes: %v", processesOf(w))
	return guards[0]
}

// signalsPending reports whether a signal sent to process pid waits to be delivered.
func signalsPending(pid int) bool {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if name, mask, ok := strings.Cut(line, ":"); ok && (name == "ShdPnd" || name == "SigPnd") &&
			strings.Trim(strings.TrimSpace(mask), "0") != "" {
			return true
		}
	}
	return false
}

// A second SIGTERM stops at once: the running command's tree gets SIGTERM (its trap runs),
// SIGKILL after the grace, and its job is released.
func TestWorkSecondSIGTERMStopsAtOnce(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	r := newTreeRun(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}
{"key":"k","seq":2}
`)
	const grace = 3 * time.Second
	w := startCLIWorker(t, q, "--kill-grace", grace.String(), "--exec", r.command("SCRIPT; true"))
	procs := r.waitTree(t, w, "1-1")

	w.signal(t, syscall.SIGTERM)
	// The first signal must be handled before the second, or the two may be merged.
	require.Eventually(t, func() bool { return strings.Contains(w.stderr(), "draining") },
		5*time.Second, 10*time.Millisecond, "worker stderr:\n%s", w.stderr())
	select {
	case <-w.done:
		t.Fatalf("the worker exited after one SIGTERM while its job runs; stderr:\n%s", w.stderr())
	case <-time.After(200 * time.Millisecond):
	}
	require.Empty(t, r.file("trap-1-1"), "draining lets the command run")
	signalled := time.Now()
	w.signal(t, syscall.SIGTERM)
	w.wait(t, grace+10*time.Second)
	require.Less(t, w.exitedAt.Sub(signalled), grace+5*time.Second, "the second signal stops at once, the grace aside")
	requireTrapRan(t, r, "1-1")
	requireTreeGone(t, w, procs, time.Second, "the command outlived the worker's stop")
	require.Equal(t, []string{"k/1 queued attempts=0", "k/2 queued attempts=0"}, jobStates(t, q.Pool),
		"the running job goes back to the queue, its attempt not counted")
}

// Flags out of range are refused by their own names, before any database is needed; every
// failure of work is one line on stderr and a non-zero exit.
func TestWorkFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--exec is required"},
		{[]string{"--workers", "0"}, "--workers must be at least 1"},
		{[]string{"--workers", "-2"}, "--workers must be at least 1"},
		{[]string{"--lease", "0"}, "--lease must be at least 50ms"},
		{[]string{"--lease", "10ms"}, "--lease must be at least 50ms"},
		{[]string{"--max-attempts", "0"}, "--max-attempts must be between 1 and 2147483647"},
		{[]string{"--max-attempts", "-1"}, "--max-attempts must be between 1 and 2147483647"},
		{[]string{"--max-attempts", "2147483648"}, "--max-attempts must be between 1 and 2147483647"},
		{[]string{"--poll", "0"}, "--poll must be at least 10ms"},
		{[]string{"--poll", "1ms"}, "--poll must be at least 10ms"},
		{[]string{"--kill-grace", "0"}, "--kill-grace must be positive"},
		{[]string{"--kill-grace", "-1s"}, "--kill-grace must be positive"},
		{[]string{"--kill-grace", "16s"}, "--kill-grace 16s is too long for --lease 30s: it must be at most half of it"},
		{[]string{"--lease", "1s", "--kill-grace", "600ms"}, "--kill-grace 600ms is too long for --lease 1s: it must be at most half of it"},
		{[]string{"--workers", "many"}, `invalid argument "many" for "--workers" flag`},
		{[]string{"--policy", "sometimes"}, "sometimes"},
		// Accepted: the default grace shrinks to a short lease; the database is what fails.
		{[]string{"--lease", "1s"}, "connect"},
		{[]string{"--lease", "1s", "--kill-grace", "500ms"}, "connect"},
	} {
		args := append([]string{"work"}, tc.args...)
		if !slices.Contains(tc.args, "--exec") && len(tc.args) > 0 {
			args = append(args, "--exec", "true")
		}
		r := runCLI(t, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2", "", args...)
		requireOneLineError(t, r)
		require.Contains(t, r.stderr, tc.want, "%v", args)
		if !strings.Contains(tc.want, "connect") {
			require.NotContains(t, r.stderr, "Config", "%v: a flag's name, not a library field's", args)
		}
	}

	// Failures once connected are one line too: an address that cannot be served.
	q := orderedtest.New(t)
	r := runCLI(t, q.URL, "", "work", "--exec", "true", "--metrics-addr", "127.0.0.1:99999")
	requireOneLineError(t, r)
	require.Contains(t, r.stderr, "--metrics-addr")
}

// --metrics-addr serves /healthz and the Prometheus /metrics.
func TestWorkMetricsAddr(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--exec", "true", "--metrics-addr", "127.0.0.1:0")
	addr := w.metricsAddr(t)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return 0, err.Error()
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	require.Eventually(t, func() bool {
		code, _ := get("/healthz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "/healthz never answered 200; worker stderr:\n%s", w.stderr())
	require.Eventually(t, func() bool {
		return jobStatesAre(q.Pool, "k/1 done attempts=1")
	}, 10*time.Second, 20*time.Millisecond)

	// The completion counter moves when the completion statement returns, a moment after the
	// job reads as done.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		code, body := get("/metrics")
		assert.Equal(c, http.StatusOK, code, body)
		assert.Contains(c, body, "ordered_claims_total 1")
		assert.Contains(c, body, "ordered_completions_total 1")
	}, 10*time.Second, 20*time.Millisecond)

	w.signal(t, syscall.SIGTERM)
	require.Zero(t, w.wait(t, 10*time.Second), w.stderr())
}

// work --name names the worker in the jobs it claims (what ordered ui shows as the holder);
// without it, the name is "ordered work HOST:PID".
func TestWorkNameIsRecordedWithItsClaims(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want *regexp.Regexp
	}{
		{[]string{"--name", "billing-1"}, regexp.MustCompile(`^billing-1$`)},
		{nil, regexp.MustCompile(`^ordered work .+:[0-9]+$`)},
	} {
		q := orderedtest.New(t)
		enqueueCLI(t, q, `{"key":"a","seq":1}`+"\n")
		w := startCLIWorker(t, q, append(tc.args, "--exec", "true")...)
		require.Eventually(t, func() bool { return jobStatesAre(q.Pool, "a/1 done attempts=1") },
			2*time.Minute, 20*time.Millisecond, "worker stderr:\n%s", w.stderr())
		var name string
		require.NoError(t, q.Pool.QueryRow(context.Background(),
			`SELECT claimed_by FROM ordered_jobs_now WHERE key = 'a'`).Scan(&name))
		require.Regexp(t, tc.want, name)
	}
}

// stopPastTheFence stops (SIGSTOP) worker w while job 1's command runs (it wrote its child's
// pid to "child"), waits until the guard has ended the command and its child at the job's
// fence, and requires the stopped worker's claim of job 1 still to hold then.
func stopPastTheFence(t *testing.T, q *orderedtest.Queue, w *cliProc) {
	t.Helper()
	child := w.waitPID(t, "child")
	var version int64
	require.NoError(t, q.Pool.QueryRow(context.Background(), "SELECT claim_version FROM ordered_jobs_now WHERE id = 1").Scan(&version))
	w.signal(t, syscall.SIGSTOP)
	t.Cleanup(func() { _ = w.cmd.Process.Signal(syscall.SIGCONT) })
	require.Eventually(t, func() bool { return processGone(child) && len(processesOf(w)) == 0 },
		30*time.Second, 10*time.Millisecond, "the command outlived its stopped worker's fence: %v", processesOf(w))
	var leased bool
	require.NoError(t, q.Pool.QueryRow(context.Background(),
		"SELECT status = 'running' AND claim_version = $1 AND lease_until > now() FROM ordered_jobs_now WHERE id = 1", version).Scan(&leased))
	require.True(t, leased, "the command must be gone while the stopped worker's claim still holds")
}

// A worker stopped (SIGSTOP) while its command runs can neither renew the lease nor end the
// command; the command's guard ends it at the job's fence by its own clock, before the lease
// that the stopped worker still holds runs out, so that the job's next claim never overlaps it.
func TestWorkStoppedWorkersCommandEndsBeforeItsLease(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--lease", "12s", "--kill-grace", "2s", "--exec",
		`trap 'echo trapped > "$ORDERED_TEST_DIR/trap"; exit 143' TERM; sleep 1000 & echo $! > "$ORDERED_TEST_DIR/child"; wait`)
	stopPastTheFence(t, q, w)
	require.Equal(t, "trapped\n", w.file("trap"), "SIGTERM first")
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(w.cmd.Process.Pid) + "/stat")
	require.NoError(t, err)
	require.Equal(t, "T", strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))[0], "the worker is still stopped")
}

// The worker ends the processes its guards leave, not those it had as children before it
// started: a script that starts a process of its own and then runs exec ordered work keeps it.
func TestWorkLeavesTheChildrenItStartedWithAlone(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n"+`{"key":"k","seq":2}`+"\n")
	w := startCLIWorkerVia(t, q, []string{"/bin/sh", "-c",
		`sleep 1000 & echo $! > "$ORDERED_TEST_DIR/sidecar"; exec "$@"`, "launcher"}, nil,
		"--exec", `sleep 1000 & echo $! > "$ORDERED_TEST_DIR/left"`)
	sidecar := w.waitPID(t, "sidecar")
	t.Cleanup(func() { _ = syscall.Kill(sidecar, syscall.SIGKILL) })
	require.Eventually(t, func() bool { return jobStatesAre(q.Pool, "k/1 done attempts=1", "k/2 done attempts=1") },
		time.Minute, 20*time.Millisecond, "worker stderr:\n%s", w.stderr())
	require.True(t, processGone(w.waitPID(t, "left")), "what a command left is ended")
	require.False(t, processGone(sidecar), "the worker's own earlier child is left alone")
}

// A command that the guard ended at the fence was stopped short, even when it exits 0 on
// SIGTERM: once its stopped worker goes on, with the claim still its own, the job is retried,
// never completed by that attempt. (Whether the guard's answer or the worker's own fence
// reaches the handler first is a race; TestExecGuardEndsTheCommandAtItsFence checks the
// guard's answer alone.)
func TestWorkCommandEndedAtItsFenceIsRetriedNotDone(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	w := startCLIWorker(t, q, "--lease", "12s", "--kill-grace", "2s", "--exec",
		`[ "$ORDERED_ATTEMPT" = 1 ] || exit 0; trap 'exit 0' TERM; sleep 1000 & echo $! > "$ORDERED_TEST_DIR/child"; wait`)
	stopPastTheFence(t, q, w)
	w.signal(t, syscall.SIGCONT)
	require.Eventually(t, func() bool { return !jobStatesAre(q.Pool, "k/1 running attempts=1") },
		time.Minute, 20*time.Millisecond, "worker stderr:\n%s", w.stderr())
	require.Eventually(t, func() bool { return jobStatesAre(q.Pool, "k/1 done attempts=2") },
		time.Minute, 20*time.Millisecond, "the first attempt, ended at its fence, must not complete the job; worker stderr:\n%s", w.stderr())
}

// A command that runs past its job's first fence, its worker renewing the lease, runs to its
// end: each renewal's fence reaches the guard before the one before it passes.
func TestWorkRenewedCommandOutlivesItsFirstFence(t *testing.T) {
	t.Parallel()
	q := orderedtest.New(t)
	enqueueCLI(t, q, `{"key":"k","seq":1}`+"\n")
	// The first fence: 6s less a tenth and the grace, 4.9s after the claim; renewals every 2s.
	w := startCLIWorker(t, q, "--lease", "6s", "--kill-grace", "500ms", "--exec", "sleep 8")
	require.Eventually(t, func() bool { return jobStatesAre(q.Pool, "k/1 done attempts=1") },
		30*time.Second, 20*time.Millisecond, "worker stderr:\n%s", w.stderr())
}
