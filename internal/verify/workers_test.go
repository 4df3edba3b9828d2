package verify

import (
	"fmt"
	"os/exec"
	"testing"

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
