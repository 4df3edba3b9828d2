package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/orderedq/ordered/internal/execguard"
)

// The guard on its own: stdin and stdout pass through, its exit status is the command's, or
// 128+N when a signal N ended it.
func TestExecGuardExitStatus(t *testing.T) {
	t.Parallel()
	for command, want := range map[string]int{
		"cat":                   0,
		"cat; exit 3":           3,
		"cat; exit 65":          65,
		"cat; kill -KILL $$":    128 + 9,
		"cat | (cat; exit 4)":   4,
		"cat; sleep 1000 & : ;": 0,
	} {
		t.Run(command, func(t *testing.T) {
			t.Parallel()
			control, keep, err := os.Pipe()
			require.NoError(t, err)
			defer keep.Close()
			cmd := exec.Command(cliBin, execguard.Name, "--grace", "1s", "--", command)
			cmd.Stdin = strings.NewReader(`{"n":1}`)
			var stdout bytes.Buffer
			cmd.Stdout = &stdout
			cmd.ExtraFiles = []*os.File{control}
			require.NoError(t, cmd.Start())
			control.Close()
			err = cmd.Wait()
			require.Equal(t, want, cmd.ProcessState.ExitCode(), "%v", err)
			require.Equal(t, `{"n":1}`, stdout.String())
		})
	}
}

// Run without a control pipe, the guard refuses to start anything.
func TestExecGuardNeedsControlPipe(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(cliBin, execguard.Name, "--", "echo ran")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	requireOneLineError(t, cliResult{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()})
	require.Error(t, err)
	require.Contains(t, stderr.String(), "control pipe")
	require.Empty(t, stdout.String())
}

// A fence written on the control pipe ends the command when it passes, the pipe still open
// (the worker alive but unable to act); of fences written one after another, the last counts.
// A guard that ended its command at the fence says so on its result pipe, whatever the
// command's exit status: one that exits 0 on SIGTERM was still stopped short.
func TestExecGuardEndsTheCommandAtItsFence(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		fences  []time.Duration // from now, written in this order
		command string
		want    int
		fenced  bool
	}{
		{"passes", []time.Duration{300 * time.Millisecond}, "sleep 1000", 128 + 15, true},
		{"moved on", []time.Duration{2 * time.Second, time.Hour}, "sleep 3; exit 5", 5, false},
		{"moved back", []time.Duration{time.Hour, 300 * time.Millisecond}, "sleep 1000", 128 + 15, true},
		// The fence is written once the trap is set (the command has made $READY).
		{"exits 0 on SIGTERM", []time.Duration{300 * time.Millisecond}, `trap 'exit 0' TERM; : >"$READY"; sleep 1000 & wait`, 0, true},
		{"done before it", []time.Duration{time.Hour}, "exit 0", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			control, keep, err := os.Pipe()
			require.NoError(t, err)
			defer keep.Close()
			result, written, err := os.Pipe()
			require.NoError(t, err)
			defer result.Close()
			cmd := exec.Command(cliBin, execguard.Name, "--grace", "1s", "--", c.command)
			cmd.ExtraFiles = []*os.File{control, written}
			ready := filepath.Join(t.TempDir(), "ready")
			cmd.Env = append(os.Environ(), "READY="+ready)
			start := time.Now()
			require.NoError(t, cmd.Start())
			control.Close()
			written.Close()
			if strings.Contains(c.command, "$READY") {
				require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil },
					time.Minute, 10*time.Millisecond, "the command did not start")
				start = time.Now()
			}
			for _, f := range c.fences {
				require.NoError(t, execguard.WriteFence(keep, start.Add(f)))
			}
			err = cmd.Wait()
			require.Equal(t, c.want, cmd.ProcessState.ExitCode(), "%v", err)
			if c.fenced {
				require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "not before the fence")
			}
			mark, err := io.ReadAll(result)
			require.NoError(t, err)
			require.Equal(t, c.fenced, len(mark) > 0, "the guard reports that it ended the command at the fence")
		})
	}
}
