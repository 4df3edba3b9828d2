package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

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
