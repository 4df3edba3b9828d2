package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
			cmd := exec.Command(cliBin, execGuardName, "--grace", "1s", "--", command)
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
	cmd := exec.Command(cliBin, execGuardName, "--", "echo ran")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	requireOneLineError(t, cliResult{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()})
	require.Error(t, err)
	require.Contains(t, stderr.String(), "control pipe")
	require.Empty(t, stdout.String())
}

// Both ways of reading the process tree find a child's children.
func TestDescendants(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command("/bin/sh", "-c", `sleep 1000 & echo $! > "$0/a"; sleep 1000 & echo $! > "$0/b"; wait`, dir)
	require.NoError(t, cmd.Start())
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	var want []int
	require.Eventually(t, func() bool {
		want = []int{cmd.Process.Pid}
		for _, name := range []string{"a", "b"} {
			b, _ := os.ReadFile(filepath.Join(dir, name))
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return false
			}
			want = append(want, pid)
		}
		return true
	}, 10*time.Second, 10*time.Millisecond)
	defer func() {
		for _, pid := range want[1:] {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()

	fromStat := childrenFromStat()
	for name, children := range map[string]func(int) []int{"task children": childrenFromTasks, "stat": fromStat} {
		got := children(cmd.Process.Pid)
		require.Contains(t, children(os.Getpid()), cmd.Process.Pid, name)
		slices.Sort(got)
		sorted := slices.Clone(want[1:])
		slices.Sort(sorted)
		require.Equal(t, sorted, got, name)
	}
	for _, pid := range want {
		require.Contains(t, descendants(os.Getpid()), pid)
	}
}
