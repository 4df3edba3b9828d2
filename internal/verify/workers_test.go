package verify

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A worker that ends on its own fails the run, naming it, how it ended and its last line of
// standard error; the workers still running do not.
func TestAnyExitedNamesAWorkerThatEndedOnItsOwn(t *testing.T) {
	t.Parallel()
	running := exec.Command("sleep", "600")
	require.NoError(t, running.Start())
	r := &run{procs: []*workerProc{watch(running, nil)}}
	defer r.killWorkers()
	require.NoError(t, r.anyExited())

	ended := exec.Command("sh", "-c", "echo starting >&2; echo 'ordered: check schema: gone' >&2; exit 3")
	stderr := &tail{}
	ended.Stderr = stderr
	require.NoError(t, ended.Start())
	p := watch(ended, stderr)
	r.procs = append(r.procs, p)
	<-p.Exited()
	require.EqualError(t, r.anyExited(), fmt.Sprintf("worker process %d ended on its own (exit status 3; its last words: ordered: check schema: gone)", ended.Process.Pid))
}

// waitReady returns once a worker process has written ReadyLine, whatever came before it and
// however its writes split it; a process that ends first fails the wait with its last words.
func TestWaitReadyWaitsForTheReadyLine(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := &run{o: Options{Timeout: time.Minute}}
	start := func(script string) *workerProc {
		stdout, stderr := newReadiness(), &tail{}
		cmd := exec.Command("sh", "-c", script)
		cmd.Stdout, cmd.Stderr = stdout, stderr
		require.NoError(t, cmd.Start())
		p := watch(cmd, stderr)
		p.ready = stdout.ready
		r.procs = append(r.procs, p)
		return p
	}
	defer r.killWorkers()

	// A command's output, a line that only begins like it, then the line in two writes after
	// a command's unfinished line; the process stays: it is ready, not ended.
	ready := start(fmt.Sprintf("echo '{\"out\":1}'; echo '%[1]s, or not'; printf 'partial%%s' '%[2]s'; sleep 0.1; printf '%%s\\n' '%[3]s'; exec sleep 600",
		ReadyLine, ReadyLine[:10], ReadyLine[10:]))
	require.NoError(t, r.waitReady(ctx, ready))
	require.NoError(t, r.anyExited())

	ended := start("echo 'ordered: connect: connection refused' >&2; exit 1")
	require.EqualError(t, r.waitReady(ctx, ended), fmt.Sprintf("worker process %d ended on its own (exit status 1; its last words: ordered: connect: connection refused)", ended.Process.Pid))
}

// Readiness comes with a line that ends with ReadyLine, however the writes split it, and not
// before; what a worker process writes after it is dropped.
func TestReadinessComesWithTheReadyLine(t *testing.T) {
	t.Parallel()
	w := newReadiness()
	isReady := func() bool {
		select {
		case <-w.ready:
			return true
		default:
			return false
		}
	}
	for _, p := range []string{"x\n", ReadyLine + ", or not\n", "partial", ReadyLine[:10], ReadyLine[10:]} {
		_, err := w.Write([]byte(p))
		require.NoError(t, err)
		require.False(t, isReady(), "ready after %q", p)
	}
	_, err := w.Write([]byte("\n" + ReadyLine + "\n"))
	require.NoError(t, err)
	require.True(t, isReady())
	_, err = w.Write([]byte(ReadyLine + "\nmore\n"))
	require.NoError(t, err, "a second ready line closes nothing twice")
	require.Empty(t, w.line)
}
